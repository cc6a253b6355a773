/**
 * The key cache with a live change feed: a cached key lives until it is evicted or changed (the
 * max age a safety net), so the hit ratio follows the cache's size rather than its TTL; a change
 * still drops it at once; the TTL governs again the moment the feed is down. Time is the test's own
 * clock: no sleeps.
 */
import { KeyCache, type KeyCacheOptions } from '../../src/auth/cache';
import { issueKey } from '../../src/auth/issue';
import { digestKey, generateKey } from '../../src/auth/keys';
import { CountingKeyStore } from '../fakes/counting-key-store';

const TTL = 30_000;
const MAX_AGE = 3_600_000;
const MINUTE = 60_000;

function setup(options: Partial<KeyCacheOptions> = {}) {
  let at = 1_000_000;
  const time = { now: () => at, advance: (ms: number) => (at += ms) };
  const store = new CountingKeyStore();
  store.changeFeedLive = true;
  const counts = { hits: 0, misses: 0, stale: 0 };
  const cache = new KeyCache(
    store,
    { size: 1000, ttlMs: TTL, maxAgeMs: MAX_AGE, maxStaleMs: 3_600_000, negativeSize: 100, negativeTtlMs: 5_000, ...options },
    { hit: () => counts.hits++, miss: () => counts.misses++, staleServed: () => counts.stale++ },
    time.now,
  );
  return { store, cache, counts, time };
}

/** Lets background confirmations finish. */
const settle = () => new Promise((resolve) => setImmediate(resolve));

test('with the feed live, a cached key is served from the cache long past the TTL, without asking the store', async () => {
  const { store, cache, counts, time } = setup();
  const { key, record } = await issueKey(store, { name: 'k' });
  await cache.lookup(key);
  for (let minute = 1; minute <= 40; minute++) {
    time.advance(MINUTE); // 40 TTLs in all
    expect(cache.cached(key)).toEqual({ record });
  }
  expect(store.lookups).toBe(1);
  expect(counts).toEqual({ hits: 40, misses: 1, stale: 0 });
});

test('a revocation announced by the feed evicts the key at once', async () => {
  const { store, cache, time } = setup();
  const { key, record } = await issueKey(store, { name: 'k' });
  await cache.lookup(key);
  time.advance(10 * MINUTE);
  await store.revoke(record.id, new Date('2030-01-01T00:00:00Z'));
  cache.applyChanges([record.digest]); // what the store's notice does (main.ts wires onChange to it)
  expect(cache.cached(key)).toBeUndefined();
  expect((await cache.lookup(key))?.revokedAt).toBe('2030-01-01T00:00:00.000Z');
  expect(store.lookups).toBe(2);
});

test('the max age is the safety net: a key in use is confirmed in the background past 80 % of it, one unused is looked up past it', async () => {
  const { store, cache, time } = setup();
  const inUse = await issueKey(store, { name: 'in use' });
  const idle = await issueKey(store, { name: 'idle' });
  await cache.lookup(inUse.key);
  await cache.lookup(idle.key);
  time.advance(0.8 * MAX_AGE + 1);
  await store.revoke(inUse.record.id, new Date('2030-01-01T00:00:00Z')); // a change whose notice never came
  expect(cache.cached(inUse.key)).toEqual({ record: inUse.record }); // served at once ...
  expect(store.lookups).toBe(3); // ... and confirmed in the background
  await settle();
  expect(cache.cached(inUse.key)?.record?.revokedAt).toBe('2030-01-01T00:00:00.000Z');
  time.advance(0.2 * MAX_AGE);
  expect(cache.cached(idle.key)).toBeUndefined(); // past the max age: only the store can tell
});

test('the feed down: the TTL governs again, counted from when the feed was last seen live', async () => {
  const { store, cache, time } = setup();
  const { key, record } = await issueKey(store, { name: 'k' });
  await cache.lookup(key);
  time.advance(10 * MINUTE);
  expect(cache.cached(key)).toEqual({ record }); // seen live here
  store.changeFeedLive = false;
  await store.revoke(record.id, new Date('2030-01-01T00:00:00Z')); // no notice: the feed is down
  time.advance(TTL / 2);
  expect(cache.cached(key)).toEqual({ record }); // within the TTL of the feed's last live moment
  expect(store.lookups).toBe(1);
  time.advance(TTL / 2);
  expect(cache.cached(key)).toBeUndefined(); // the TTL has passed: the store decides
  expect((await cache.lookup(key))?.revokedAt).toBe('2030-01-01T00:00:00.000Z');
});

test('keys confirmed while the feed is down are trusted for the TTL only, even once it is back', async () => {
  const { store, cache, time } = setup();
  store.changeFeedLive = false;
  const { key, record } = await issueKey(store, { name: 'k' });
  await cache.lookup(key);
  store.changeFeedLive = true; // back: the store announces that anything may have changed
  cache.applyChanges(undefined);
  expect(cache.cached(key)).toBeUndefined(); // suspect until confirmed
  expect(await cache.lookup(key)).toEqual(record); // confirmed within the new stretch of the feed
  time.advance(5 * MINUTE);
  expect(cache.cached(key)).toEqual({ record });
  expect(store.lookups).toBe(2);
});

test('a key confirmed before the feed was first seen live is not taken for one the feed covers', async () => {
  const { store, cache, time } = setup();
  store.changeFeedLive = false;
  const { key } = await issueKey(store, { name: 'k' });
  await cache.lookup(key);
  store.changeFeedLive = true; // no notice of a gap reached the cache
  time.advance(TTL);
  expect(cache.cached(key)).toBeUndefined();
});

test('stale-if-error counts from when the feed was last seen live, not from the old confirmation', async () => {
  const { store, cache, counts, time } = setup();
  const { key, record } = await issueKey(store, { name: 'k' });
  await cache.lookup(key);
  time.advance(40 * MINUTE);
  expect(cache.cached(key)).toEqual({ record }); // the feed seen live, 40 minutes after the confirmation
  store.changeFeedLive = false; // the database goes away, and its feed with it
  store.failing = true;
  time.advance(50 * MINUTE); // 90 minutes after the confirmation, 50 after the feed's last live moment
  expect(cache.cached(key)).toEqual({ record }); // known to be away: served at once, stale
  expect(counts.stale).toBe(1);
  time.advance(11 * MINUTE); // past maxStaleMs since the feed's last live moment
  expect(cache.cached(key)).toBeUndefined();
  await expect(cache.lookup(key)).rejects.toThrow('store down');
});

test('unknown keys are still remembered for the negative TTL only, and a key created meanwhile is found once announced', async () => {
  const { store, cache, time } = setup();
  const stranger = generateKey();
  expect(await cache.lookup(stranger)).toBeUndefined();
  time.advance(4_000);
  expect(cache.cached(stranger)).toEqual({ record: undefined }); // remembered: no query
  expect(store.lookups).toBe(1);
  time.advance(1_001);
  expect(cache.cached(stranger)).toBeUndefined(); // past negativeTtlMs: asked again on its next use
  expect(await cache.lookup(stranger)).toBeUndefined();
  const record = { ...(await issueKey(new CountingKeyStore(), { name: 'late' })).record, digest: digestKey(stranger) };
  await store.insert(record);
  cache.applyChanges([record.digest]); // the insert's notice
  expect(await cache.lookup(stranger)).toEqual(record);
});

test('a flood of made-up keys with the feed live: each reaches the store once, known keys stay cached', async () => {
  const { store, cache } = setup({ size: 10, negativeSize: 50 });
  const known = await issueKey(store, { name: 'k' });
  await cache.lookup(known.key);
  const flood = Array.from({ length: 40 }, () => generateKey());
  for (const key of flood) await cache.lookup(key);
  for (const key of flood) expect(cache.cached(key)).toEqual({ record: undefined });
  expect(store.lookups).toBe(41);
  expect(cache.cached(known.key)).toEqual({ record: known.record });
});

test('concurrent misses for one key share one query with the feed live too', async () => {
  const { store, cache } = setup();
  const { key, record } = await issueKey(store, { name: 'k' });
  store.hold();
  const lookups = Array.from({ length: 25 }, () => cache.lookup(key));
  store.release();
  expect(await Promise.all(lookups)).toEqual(Array(25).fill(record));
  expect(store.lookups).toBe(1);
});

test('with many keys in use, the hit ratio follows the cache size, not the TTL', async () => {
  const { store, cache, counts, time } = setup({ size: 500 });
  const keys = await Promise.all(Array.from({ length: 400 }, (_, i) => issueKey(store, { name: `k${i}` })));
  // 400 keys used round-robin, one request every 100 ms: each key comes back every 40 s, past the 30 s TTL.
  for (let round = 0; round < 5; round++) {
    for (const { key } of keys) {
      time.advance(100);
      await cache.lookup(key);
    }
  }
  expect(counts.misses).toBe(400); // the first use of each, nothing more
  expect(counts.hits / (counts.hits + counts.misses)).toBe(0.8);
});
