/**
 * lru-cache in front of the key store, built so that a store outage never turns a key that just
 * worked into a refusal.
 *
 * A known key is fresh for `ttlMs` after the store last confirmed it. A key in use is confirmed
 * again in the background once it is past `refreshAfter` (80 % of the TTL), so a key in steady use
 * never expires and never waits for the store. A key past its TTL is looked up before it is served;
 * if the store cannot be reached (or is known to be away: then without waiting), the cached record is
 * served, stale, for up to `maxStaleMs` after its last confirmation (stale-if-error). Keys the store
 * has never confirmed are refused while it is away (503): nothing is admitted that was not known.
 *
 * Revocation: a change notice for a key (PostgreSQL NOTIFY, the file store's watcher, this process's
 * own change) drops it at once. A notice that anything may have changed (notifications were lost for
 * a while) marks every entry as needing confirmation: each is looked up on its next use, and served
 * stale only if the store cannot answer.
 *
 * Unknown keys are cached for a shorter time in a separate, bounded cache, so a flood of random keys
 * neither reaches the store each time nor evicts real keys. Concurrent lookups of one key share one
 * store call.
 */
import { LRUCache } from 'lru-cache';
import { digestKey } from './keys';
import type { KeyRecord, KeyStore } from '../store/types';

export interface KeyCacheOptions {
  size: number;
  ttlMs: number;
  /** While the store cannot be reached, a known key is served this long after its last confirmation. */
  maxStaleMs: number;
  negativeSize: number;
  negativeTtlMs: number;
}

export interface KeyCacheEvents {
  hit(): void;
  miss(): void;
  /** A known key was served past its TTL because the store could not confirm it. */
  staleServed?(): void;
}

/** What the cache asks of the store besides lookups: whether it is known to be away right now. */
export interface StoreReachability {
  readonly reachable: boolean;
}

interface Entry {
  record: KeyRecord;
  /** performance.now() when the store last returned this record. */
  confirmedAt: number;
  /** Changes may have been missed since it was confirmed: look it up before serving it again. */
  suspect: boolean;
}

/** A confirmation is started in the background once an entry has lived this share of its TTL. */
const REFRESH_AT = 0.8;

export class KeyCache {
  private readonly known: LRUCache<string, Entry>;
  private readonly unknown: LRUCache<string, true>;
  /**
   * Store lookups under way, by digest. Kept outside the LRUs so that eviction or invalidation can
   * never abort a lookup a request is waiting on; a lookup overtaken by invalidate() still answers
   * its callers but leaves nothing cached.
   */
  private readonly inFlight = new Map<string, Promise<KeyRecord | undefined>>();
  private readonly refreshAfterMs: number;

  constructor(
    private readonly store: KeyStore & Partial<StoreReachability>,
    private readonly options: KeyCacheOptions,
    private readonly events: KeyCacheEvents,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.unknown = new LRUCache({ max: options.negativeSize, ttl: options.negativeTtlMs });
    // Entries age by our own clock (confirmedAt); the LRU only bounds how many there are.
    this.known = new LRUCache({ max: options.size });
    this.refreshAfterMs = options.ttlMs * REFRESH_AT;
  }

  /**
   * The cached answer, without waiting: `{ record }` (an undefined record: a key known to be unknown),
   * or undefined when only the store can tell. The request path takes a hit without a promise.
   */
  cached(key: string): { record: KeyRecord | undefined } | undefined {
    return this.cachedByDigest(digestKey(key));
  }

  /**
   * The record for this key, or undefined when the store does not know it. Rejects (503
   * key_store_unavailable) when the store cannot be reached and the key is not known well enough.
   */
  async lookup(key: string): Promise<KeyRecord | undefined> {
    const digest = digestKey(key);
    const hit = this.cachedByDigest(digest);
    if (hit) return hit.record;
    this.events.miss();
    try {
      return await (this.inFlight.get(digest) ?? this.askStore(digest));
    } catch (err) {
      const entry = this.known.get(digest);
      if (!entry || this.now() - entry.confirmedAt >= this.options.maxStaleMs) throw err;
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
    if (digests) digests.forEach((digest) => this.invalidate(digest));
    else this.suspectAll();
  }

  /** Changes may have been missed: every known key is confirmed on its next use; unknown keys are forgotten. */
  suspectAll(): void {
    for (const entry of this.known.values()) entry.suspect = true;
    this.unknown.clear();
    this.inFlight.clear();
  }

  /** How many known keys could be served now, whatever the store does (readiness). */
  servableKeys(): number {
    const oldest = this.now() - this.options.maxStaleMs;
    let count = 0;
    for (const entry of this.known.values()) if (entry.confirmedAt >= oldest) count++;
    return count;
  }

  private cachedByDigest(digest: string): { record: KeyRecord | undefined } | undefined {
    const entry = this.known.get(digest);
    if (entry) {
      const age = this.now() - entry.confirmedAt;
      if (!entry.suspect && age < this.options.ttlMs) {
        if (age >= this.refreshAfterMs) this.refresh(digest);
        this.events.hit();
        return { record: entry.record };
      }
      // Past its TTL (or suspect): the store decides, unless it is known to be away.
      if (this.store.reachable === false && age < this.options.maxStaleMs) {
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

  /** A confirmation in the background: its failure is the store's health to report, not a request's. */
  private refresh(digest: string): void {
    if (this.inFlight.has(digest)) return;
    this.askStore(digest).catch(() => undefined);
  }

  private askStore(digest: string): Promise<KeyRecord | undefined> {
    const lookup = this.store.findByDigest(digest).then(
      (record) => {
        if (this.inFlight.get(digest) === lookup) {
          this.inFlight.delete(digest);
          if (record) {
            this.known.set(digest, { record, confirmedAt: this.now(), suspect: false });
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
