/**
 * lru-cache in front of the key store. Known keys are cached for `ttlMs` (so a revocation made
 * elsewhere takes effect within that time); unknown keys are cached for a shorter time in a separate,
 * bounded cache, so a flood of random keys neither reaches the store each time nor evicts real keys.
 * Concurrent misses for the same key share one store lookup.
 */
import { LRUCache } from 'lru-cache';
import { digestKey } from './keys';
import type { KeyRecord, KeyStore } from './store/types';

export interface KeyCacheOptions {
  size: number;
  ttlMs: number;
  negativeSize: number;
  negativeTtlMs: number;
}

export interface KeyCacheEvents {
  hit(): void;
  miss(): void;
}

export class KeyCache {
  private readonly known: LRUCache<string, KeyRecord>;
  private readonly unknown: LRUCache<string, true>;
  /**
   * Store lookups under way, by digest. Kept outside the LRUs so that eviction or invalidation can
   * never abort a lookup a request is waiting on; a lookup overtaken by invalidate() still answers
   * its callers but leaves nothing cached.
   */
  private readonly inFlight = new Map<string, Promise<KeyRecord | undefined>>();

  constructor(
    private readonly store: KeyStore,
    options: KeyCacheOptions,
    private readonly events: KeyCacheEvents,
  ) {
    this.unknown = new LRUCache({ max: options.negativeSize, ttl: options.negativeTtlMs });
    this.known = new LRUCache({ max: options.size, ttl: options.ttlMs });
  }

  /**
   * The cached answer, without waiting: `{ record }` (an undefined record: a key known to be unknown),
   * or undefined when only the store can tell. The request path takes a hit without a promise.
   */
  cached(key: string): { record: KeyRecord | undefined } | undefined {
    return this.cachedByDigest(digestKey(key));
  }

  /** The record for this key, or undefined when the store does not know it. Rejects if the store fails. */
  async lookup(key: string): Promise<KeyRecord | undefined> {
    const digest = digestKey(key);
    const hit = this.cachedByDigest(digest);
    if (hit) return hit.record;
    this.events.miss();
    return this.inFlight.get(digest) ?? this.askStore(digest);
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
    else this.clear();
  }

  /** Forget every key (changes may have been missed). */
  clear(): void {
    this.known.clear();
    this.unknown.clear();
    this.inFlight.clear();
  }

  private cachedByDigest(digest: string): { record: KeyRecord | undefined } | undefined {
    const record = this.known.get(digest);
    if (!record && !this.unknown.has(digest)) return undefined;
    this.events.hit();
    return { record };
  }

  private askStore(digest: string): Promise<KeyRecord | undefined> {
    const lookup = this.store.findByDigest(digest).then(
      (record) => {
        if (this.inFlight.get(digest) === lookup) {
          this.inFlight.delete(digest);
          if (record) this.known.set(digest, record);
          else this.unknown.set(digest, true);
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
