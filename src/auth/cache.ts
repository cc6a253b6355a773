/**
 * lru-cache in front of the key store, built so that the hit ratio follows the cache's size, not a
 * timer, and a store outage never turns a key that just worked into a refusal.
 *
 * Freshness. While the store's change feed is live (`changeFeedLive`: PostgreSQL's LISTEN connection
 * answering its heartbeat, the file store's poll), every change to a key reaches this cache as a
 * notice within about a second and drops the key at once: a known key then stays fresh until it is
 * evicted or changed, with `maxAgeMs` (1 h by default) as a safety net. While the feed is down (or
 * the store has none), a key is fresh for `ttlMs` (30 s) after the store's word on it was last known
 * current: its confirmation, or, for one confirmed while the feed was live, the last moment the feed
 * was seen live. A key in use is confirmed again in the background once it is past 80 % of its
 * window, so a key in steady use never waits for the store.
 *
 * Stale-if-error. A key past its window is looked up before it is served; if the store cannot be
 * reached (or is known to be away: then without waiting), the cached record is served, stale, for up
 * to `maxStaleMs` after the store's word on it was last known current. Keys the store has never
 * confirmed are refused while it is away (503): nothing is admitted that was not known.
 *
 * A notice that anything may have changed (the feed was down a while) marks every entry as needing
 * confirmation: each is looked up on its next use, and served stale only if the store cannot answer.
 *
 * Unknown keys are cached for a short time (`negativeTtlMs`, 5 s) in a separate cache bounded by
 * `negativeSize`, so a flood of made-up keys neither reaches the store each time nor evicts real
 * keys; a key created since is announced by the feed and forgotten here at once. Concurrent lookups
 * of one key share one store call.
 *
 * Memory: about 560 bytes of live heap per cached key (a record as PostgreSQL returns it, two model
 * globs; measured by test/auth/cache-memory.test.ts, see docs/performance.md), so the default 10,000
 * entries take about 5.5 MiB. What keys hold alike (their lists, limits, account) is held once
 * (auth/shared-parts.ts): 1,012 bytes a key before, and twice the old generation's marking work.
 */
import { LRUCache } from 'lru-cache';
import { digestKey } from './keys';
import { SharedParts } from './shared-parts';
import type { KeyAuthRecord, KeyStore } from '../store/types';

export interface KeyCacheOptions {
  size: number;
  /** While the change feed is down (or the store has none), a known key is trusted this long. */
  ttlMs: number;
  /** While the change feed is live, a known key is trusted this long (changes drop it sooner): the safety net. Default: ttlMs. */
  maxAgeMs?: number;
  /** While the store cannot be reached, a known key is served this long after the store's word on it was last current. */
  maxStaleMs: number;
  negativeSize: number;
  negativeTtlMs: number;
}

export interface KeyCacheEvents {
  hit(): void;
  miss(): void;
  /** A known key was served past its window because the store could not confirm it. */
  staleServed?(): void;
}

/** What the cache asks of the store besides lookups: whether it is known to be away right now. */
export interface StoreReachability {
  readonly reachable: boolean;
}

/** What a cached key holds: what authenticating needs. */
export type CachedKey = KeyAuthRecord;

interface Entry {
  record: CachedKey;
  /** performance.now() when the store was asked for this record (its state is at least that recent). */
  confirmedAt: number;
  /** Changes may have been missed since it was confirmed: look it up before serving it again. */
  suspect: boolean;
}

/** The change feed's latest unbroken stretch as this cache saw it, by its clock. */
interface FeedStretch {
  since: number;
  /** The last time it was seen live. */
  seen: number;
  live: boolean;
}

/** A confirmation is started in the background once an entry has lived this share of its window. */
const REFRESH_AT = 0.8;

export class KeyCache {
  private readonly known: LRUCache<string, Entry>;
  private readonly unknown: LRUCache<string, true>;
  /**
   * Store lookups under way, by digest. Kept outside the LRUs so that eviction or invalidation can
   * never abort a lookup a request is waiting on; a lookup overtaken by invalidate() still answers
   * its callers but leaves nothing cached.
   */
  private readonly inFlight = new Map<string, Promise<CachedKey | undefined>>();
  private feed: FeedStretch | undefined;
  private readonly shared = new SharedParts();

  constructor(
    private readonly store: Pick<KeyStore, 'findByDigest'> & Partial<StoreReachability> & { readonly changeFeedLive?: boolean },
    private readonly options: KeyCacheOptions,
    private readonly events: KeyCacheEvents,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.unknown = new LRUCache({ max: options.negativeSize, ttl: options.negativeTtlMs, ttlResolution: 0, perf: { now } });
    // Entries age by our own clock (confirmedAt); the LRU only bounds how many there are.
    this.known = new LRUCache({ max: options.size });
  }

  /**
   * The cached answer, without waiting: `{ record }` (an undefined record: a key known to be unknown),
   * or undefined when only the store can tell. The request path takes a hit without a promise.
   */
  cached(key: string): { record: CachedKey | undefined } | undefined {
    return this.cachedByDigest(digestKey(key));
  }

  /** As `cached`, by the key's digest (a client token names its parent key so). */
  cachedDigest(digest: string): { record: CachedKey | undefined } | undefined {
    return this.cachedByDigest(digest);
  }

  /**
   * The record for this key, or undefined when the store does not know it. Rejects (503
   * key_store_unavailable) when the store cannot be reached and the key is not known well enough.
   */
  lookup(key: string): Promise<CachedKey | undefined> {
    return this.lookupDigest(digestKey(key));
  }

  /** As `lookup`, by the key's digest. */
  async lookupDigest(digest: string): Promise<CachedKey | undefined> {
    const hit = this.cachedByDigest(digest);
    if (hit) return hit.record;
    this.events.miss();
    try {
      return await (this.inFlight.get(digest) ?? this.askStore(digest));
    } catch (err) {
      const entry = this.known.get(digest);
      const now = this.now();
      if (!entry || now - this.currentAt(entry, now) >= this.options.maxStaleMs) throw err;
      this.events.staleServed?.();
      return entry.record; // stale-if-error: the store could not say otherwise
    }
  }

  /** Forget a key at once (after a change this process made or was told of). */
  invalidate(digest: string): void {
    this.known.delete(digest);
    this.unknown.delete(digest);
    this.inFlight.delete(digest);
  }

  /** What a store change notice means here: these keys changed, or (undefined) any may have. */
  applyChanges(digests: string[] | undefined): void {
    if (digests) {
      for (const digest of digests) this.invalidate(digest);
    } else {
      this.suspectAll();
    }
  }

  /** Changes may have been missed: every known key is confirmed on its next use; unknown keys are forgotten. */
  suspectAll(): void {
    for (const entry of this.known.values()) entry.suspect = true;
    this.unknown.clear();
    this.inFlight.clear();
  }

  /** How many known keys could be served now, whatever the store does (readiness). */
  servableKeys(): number {
    const now = this.now();
    this.watchFeed(now);
    let count = 0;
    for (const entry of this.known.values()) if (now - this.currentAt(entry, now) < this.options.maxStaleMs) count++;
    return count;
  }

  private cachedByDigest(digest: string): { record: CachedKey | undefined } | undefined {
    const entry = this.known.get(digest);
    if (entry) {
      const now = this.now();
      this.watchFeed(now);
      const live = this.feed?.live && entry.confirmedAt >= this.feed.since;
      // Live: aged by its confirmation against the long max age. Otherwise: by when the store's word
      // on it was last known current against the TTL.
      const window = live ? (this.options.maxAgeMs ?? this.options.ttlMs) : this.options.ttlMs;
      const age = now - (live ? entry.confirmedAt : this.currentAt(entry, now));
      if (!entry.suspect && age < window) {
        if (age >= window * REFRESH_AT) this.refresh(digest);
        this.events.hit();
        return { record: entry.record };
      }
      // Past its window (or suspect): the store decides, unless it is known to be away.
      if (this.store.reachable === false && now - this.currentAt(entry, now) < this.options.maxStaleMs) {
        this.refresh(digest); // also the probe that notices the store is back
        this.events.staleServed?.();
        return { record: entry.record };
      }
      return undefined;
    }
    if (!this.unknown.has(digest)) return undefined;
    this.events.hit();
    return { record: undefined };
  }

  /** Notes whether the store's change feed is live now, extending or ending its current stretch. */
  private watchFeed(now: number): void {
    if (this.store.changeFeedLive === true) {
      if (this.feed?.live) this.feed.seen = now;
      else this.feed = { since: now, seen: now, live: true };
    } else if (this.feed) {
      this.feed.live = false;
    }
  }

  /**
   * Until when the store's word on an entry is known to hold: its confirmation, or, for one confirmed
   * within the feed's latest stretch, the stretch's end (now, while it lasts): every change within it
   * would have dropped the entry.
   */
  private currentAt(entry: Entry, now: number): number {
    const feed = this.feed;
    if (!feed || entry.confirmedAt < feed.since) return entry.confirmedAt;
    return feed.live ? now : Math.max(feed.seen, entry.confirmedAt);
  }

  /** A confirmation in the background: its failure is the store's health to report, not a request's. */
  private refresh(digest: string): void {
    if (this.inFlight.has(digest)) return;
    this.askStore(digest).catch(() => undefined);
  }

  private askStore(digest: string): Promise<CachedKey | undefined> {
    const askedAt = this.now();
    this.watchFeed(askedAt);
    const lookup = this.store.findByDigest(digest).then(
      (found) => {
        const current = this.inFlight.get(digest) === lookup;
        if (current) this.inFlight.delete(digest); // first: whatever follows, the next lookup asks again
        const record = found && this.shared.compact(found, digest);
        if (current) {
          if (record) {
            this.known.set(digest, { record, confirmedAt: askedAt, suspect: false });
          } else {
            this.known.delete(digest);
            this.unknown.set(digest, true);
          }
        }
        return record;
      },
      (err: unknown) => {
        if (this.inFlight.get(digest) === lookup) this.inFlight.delete(digest);
        throw err;
      },
    );
    this.inFlight.set(digest, lookup);
    return lookup;
  }
}
