/**
 * Memory per cached key, measured: the live heap after a full collection, before and after filling
 * a key cache with N records shaped as PostgreSQL's findByDigest returns them (every string its own,
 * as the driver makes them). The figure sizes auth.cacheSize (docs/performance.md); the bound
 * is 2 KiB a key.
 */
import v8 from 'node:v8';
import vm from 'node:vm';
import { KeyCache } from '../../src/auth/cache';
import { generateKey } from '../../src/auth/keys';
import { toAuthRecord } from '../../src/store/sql/rows';
import type { KeyAuthRecord } from '../../src/store/types';

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;

/** A string of its own, as a database driver hands it over (not a slice of another). */
const own = (text: string) => Buffer.from(text, 'utf8').toString('utf8');

/** A record as the PostgreSQL store builds it from a row (the store's own toAuthRecord): two model globs, limits and quota unset. */
function recordFor(digest: string): KeyAuthRecord {
  return toAuthRecord({
    id: own(`key_${digest.slice(0, 26)}`),
    name: own(`service ${digest.slice(26, 34)}`),
    digest: own(digest),
    prefix: own(`cgk_${digest.slice(34, 42)}`),
    created_at: new Date(Date.UTC(2030, 0, 1)),
    revoked_at: null,
    expires_at: new Date(Date.UTC(2031, 0, 1)),
    models: [own('vllm/llama-3*'), own('mock/*')],
    endpoints: [],
    allowed_ips: [],
    rpm: null,
    tpm: null,
    max_concurrent: null,
    account_id: own(`acc_${digest.slice(42, 60)}`),
    created_by: own('someone@example.com'),
    tokens_per_day: null,
    tokens_per_month: null,
    budget_day_nanos: null,
    budget_month_nanos: null,
    previous_digest: null,
    previous_until: null,
    previous_for: null,
  });
}

function liveHeap(): number {
  for (let i = 0; i < 3; i++) gc();
  return process.memoryUsage().heapUsed;
}

test('a cached key takes well under 2 KiB of heap', async () => {
  const N = 20_000;
  const keys = Array.from({ length: N }, () => generateKey()); // the clients' keys: not the cache's memory
  const store = { findByDigest: async (digest: string) => recordFor(digest), changeFeedLive: true };
  const before = liveHeap();
  const cache = new KeyCache(store, { size: N, ttlMs: 30_000, maxAgeMs: 3_600_000, maxStaleMs: 3_600_000, negativeSize: 10_000, negativeTtlMs: 5_000 }, { hit: () => undefined, miss: () => undefined });
  for (const key of keys) await cache.lookup(key);
  const after = liveHeap();
  expect(cache.servableKeys()).toBe(N);
  const perKey = (after - before) / N;
  process.stdout.write(`key cache: ${perKey.toFixed(0)} bytes of live heap per cached key (${N} keys, ${((after - before) / 1048576).toFixed(1)} MiB)\n`);
  expect(perKey).toBeLessThan(2048);
  // With what keys hold alike shared (auth/shared-parts.ts): 561 bytes on Node 20, 449 on Node 24; 1,012 without.
  expect(perKey).toBeLessThan(800);
  expect(perKey).toBeGreaterThan(200); // the records are really held: a measure that saw nothing would pass the bound too
});
