import { KeyCache, type KeyCacheOptions } from '../../src/auth/cache';
import { issueKey } from '../../src/auth/issue';
import { digestKey, generateKey } from '../../src/auth/keys';
import type { KeyAuthRecord } from '../../src/store/types';
import { CountingKeyStore } from '../fakes/counting-key-store';
import { sleep } from '../helpers/time';

/** How a lookup ended, as one comparable string (handled at once: no unhandled rejection). */
const outcome = (lookup: Promise<KeyAuthRecord | undefined>): Promise<string> =>
  lookup.then(
    (record) => (record ? `found ${record.id}` : 'unknown'),
    (err: Error) => `rejected: ${err.message}`,
  );

function setup(options: Partial<KeyCacheOptions> = {}, now?: () => number) {
  const store = new CountingKeyStore();
  const counts = { hits: 0, misses: 0 };
  const stale = { served: 0 };
  const cache = new KeyCache(
    store,
    { size: 100, ttlMs: 60_000, maxStaleMs: 3_600_000, negativeSize: 100, negativeTtlMs: 60_000, ...options },
    { hit: () => counts.hits++, miss: () => counts.misses++, staleServed: () => stale.served++ },
    now,
  );
  return { store, cache, counts, stale };
}

/** A clock the test moves. */
function clock(start = 1_000_000) {
  let at = start;
  return { now: () => at, advance: (ms: number) => (at += ms) };
}

test('a known key is read from the store once, then from the cache', async () => {
  const { store, cache, counts } = setup();
  const { key, record } = await issueKey(store, { name: 'k' });
  expect(await cache.lookup(key)).toEqual(record);
  expect(counts).toEqual({ hits: 0, misses: 1 });
  expect(await cache.lookup(key)).toEqual(record);
  expect(await cache.lookup(key)).toEqual(record);
  expect(store.lookups).toBe(1);
  expect(counts).toEqual({ hits: 2, misses: 1 });
});

test('an unknown key is remembered, in a bounded cache of its own', async () => {
  const { store, cache, counts } = setup({ negativeSize: 10 });
  const stranger = generateKey();
  expect(await cache.lookup(stranger)).toBeUndefined();
  expect(await cache.lookup(stranger)).toBeUndefined();
  expect(store.lookups).toBe(1);
  expect(counts).toEqual({ hits: 1, misses: 1 });

  for (let i = 0; i < 50; i++) await cache.lookup(generateKey());
  expect(store.lookups).toBe(51);
  expect(await cache.lookup(stranger)).toBeUndefined(); // pushed out by the flood: asked again
  expect(store.lookups).toBe(52);
});

test('a flood of unknown keys, one at a time, does not evict known ones', async () => {
  const { store, cache } = setup({ size: 5, negativeSize: 5 });
  const { key, record } = await issueKey(store, { name: 'k' });
  await cache.lookup(key);
  for (let i = 0; i < 100; i++) await cache.lookup(generateKey());
  const before = store.lookups;
  expect(await cache.lookup(key)).toEqual(record);
  expect(store.lookups).toBe(before);
});

test('concurrent lookups of one key reach the store once', async () => {
  const { store, cache } = setup();
  const { key, record } = await issueKey(store, { name: 'k' });
  store.hold();
  const lookups = Array.from({ length: 20 }, () => cache.lookup(key));
  store.release();
  expect(await Promise.all(lookups)).toEqual(Array(20).fill(record));
  expect(store.lookups).toBe(1);
});

test('after the TTL the store is asked again, so a revocation made elsewhere is seen', async () => {
  const { store, cache } = setup({ ttlMs: 50 });
  const { key, record } = await issueKey(store, { name: 'k' });
  expect((await cache.lookup(key))?.revokedAt).toBeNull();
  await store.revoke(record.id, new Date('2030-01-01T00:00:00Z'));
  expect((await cache.lookup(key))?.revokedAt).toBeNull(); // still within the TTL: the cached copy
  expect(store.lookups).toBe(1);
  await sleep(80);
  expect((await cache.lookup(key))?.revokedAt).toBe('2030-01-01T00:00:00.000Z');
  expect(store.lookups).toBe(2);
});

test('after the negative TTL, a key issued since is found', async () => {
  const { store, cache } = setup({ negativeTtlMs: 50 });
  const key = generateKey();
  expect(await cache.lookup(key)).toBeUndefined();
  const record = { ...(await issueKey(new CountingKeyStore(), { name: 'late' })).record, digest: digestKey(key) };
  await store.insert(record);
  expect(await cache.lookup(key)).toBeUndefined(); // still remembered as unknown
  await sleep(80);
  expect(await cache.lookup(key)).toEqual(record);
  expect(store.lookups).toBe(2);
});

test('invalidate forgets a known key at once', async () => {
  const { store, cache } = setup();
  const { key, record } = await issueKey(store, { name: 'k' });
  await cache.lookup(key);
  await store.revoke(record.id, new Date('2030-01-01T00:00:00Z'));
  cache.invalidate(record.digest);
  expect((await cache.lookup(key))?.revokedAt).toBe('2030-01-01T00:00:00.000Z');
  expect(store.lookups).toBe(2);
});

test('invalidate forgets an unknown key at once, so a key issued since is found', async () => {
  const { store, cache } = setup();
  const key = generateKey();
  expect(await cache.lookup(key)).toBeUndefined();
  const record = { ...(await issueKey(new CountingKeyStore(), { name: 'late' })).record, digest: digestKey(key) };
  await store.insert(record);
  cache.invalidate(record.digest);
  expect(await cache.lookup(key)).toEqual(record);
  expect(store.lookups).toBe(2);
});

test('after a notice that anything may have changed, every key is confirmed by the store on its next use', async () => {
  const { store, cache } = setup();
  const { key, record } = await issueKey(store, { name: 'k' });
  const stranger = generateKey();
  await cache.lookup(key);
  await cache.lookup(stranger);
  await store.revoke(record.id, new Date('2030-01-01T00:00:00Z')); // a change whose notice was lost
  cache.applyChanges(undefined);
  expect(cache.cached(key)).toBeUndefined(); // not served from the cache until confirmed
  expect((await cache.lookup(key))?.revokedAt).toBe('2030-01-01T00:00:00.000Z');
  await cache.lookup(stranger);
  expect(store.lookups).toBe(4);
});

test('a failing store makes the lookup reject, and nothing is cached', async () => {
  const { store, cache } = setup();
  const { key, record } = await issueKey(store, { name: 'k' });
  store.failing = true;
  await expect(cache.lookup(key)).rejects.toThrow('store down');
  await expect(cache.lookup(key)).rejects.toThrow('store down'); // not remembered as unknown either
  store.failing = false;
  expect(await cache.lookup(key)).toEqual(record);
  expect(store.lookups).toBe(3);
});

// The gateway calls invalidate() whenever the store reports a change to a key (revoke, update, rotate:
// src/main.ts wires keyStore.onChange to it). A request that is being authenticated at that moment
// must still get an answer from the store, not a failure (which becomes 503 key_store_unavailable).
test('invalidating a key while its lookup is in flight does not fail the lookup', async () => {
  const { store, cache } = setup();
  const { key, record } = await issueKey(store, { name: 'k' });
  store.hold();
  const lookup = outcome(cache.lookup(key));
  cache.invalidate(record.digest);
  store.release();
  expect(await lookup).toBe(`found ${record.id}`);
});

// More keys in flight at once than the cache holds (a burst of distinct keys, say random ones from a
// scanner, while the store is slow) must not make the lookups of real keys fail.
test('more concurrent lookups than the cache holds all get their answer', async () => {
  const { store, cache } = setup({ size: 5, negativeSize: 100 });
  const { key, record } = await issueKey(store, { name: 'k' });
  store.hold();
  const real = outcome(cache.lookup(key));
  const strangers = Promise.all(Array.from({ length: 10 }, () => outcome(cache.lookup(generateKey()))));
  store.release();
  expect(await real).toBe(`found ${record.id}`);
  expect(await strangers).toEqual(Array(10).fill('unknown'));
});

test('a concurrent flood of unknown keys does not evict known ones either', async () => {
  const { store, cache } = setup({ size: 5, negativeSize: 100 });
  const { key, record } = await issueKey(store, { name: 'k' });
  await cache.lookup(key);
  store.hold();
  const flood = Promise.all(Array.from({ length: 20 }, () => outcome(cache.lookup(generateKey()))));
  store.release();
  await flood;
  const before = store.lookups;
  expect(await outcome(cache.lookup(key))).toBe(`found ${record.id}`);
  expect(store.lookups - before).toBe(0); // still cached: not asked of the store again
});

test('cached() answers without waiting only what the cache knows: a key, a known stranger, or nothing yet', async () => {
  const { store, cache, counts } = setup();
  const { key, record } = await issueKey(store, { name: 'k' });
  const stranger = generateKey();
  expect(cache.cached(key)).toBeUndefined(); // not looked up yet: only the store can tell
  await cache.lookup(key);
  await cache.lookup(stranger);
  expect(cache.cached(key)).toEqual({ record });
  expect(cache.cached(stranger)).toEqual({ record: undefined });
  cache.invalidate(digestKey(key));
  expect(cache.cached(key)).toBeUndefined();
  expect(counts).toEqual({ hits: 2, misses: 2 });
});

describe('stale-if-error: a store outage never turns a known key into a refusal', () => {
  test('past its TTL, a known key the store cannot confirm is served stale, and counted', async () => {
    const time = clock();
    const { store, cache, stale } = setup({ ttlMs: 1000 }, time.now);
    const { key, record } = await issueKey(store, { name: 'k' });
    await cache.lookup(key);
    time.advance(1500);
    store.failing = true;
    expect(await cache.lookup(key)).toEqual(record);
    expect(store.lookups).toBe(2); // it asked, and the store could not answer
    expect(stale.served).toBe(1);
  });

  test('while the store is known to be away, a known key is served at once, with a confirmation in the background', async () => {
    const time = clock();
    const { store, cache, stale } = setup({ ttlMs: 1000 }, time.now);
    const { key, record } = await issueKey(store, { name: 'k' });
    await cache.lookup(key);
    time.advance(1500);
    store.failing = true; // reachable is false from here
    store.hold();
    expect(cache.cached(key)).toEqual({ record }); // no promise, no wait
    expect(stale.served).toBe(1);
    expect(store.lookups).toBe(2); // the background confirmation, which is also the probe
    expect(cache.cached(key)).toEqual({ record });
    expect(store.lookups).toBe(2); // one confirmation at a time per key
    store.release();
  });

  test('the store back: the background confirmation makes the key fresh again, or takes a revocation', async () => {
    const time = clock();
    const { store, cache } = setup({ ttlMs: 1000 }, time.now);
    const { key, record } = await issueKey(store, { name: 'k' });
    await cache.lookup(key);
    time.advance(1500);
    store.failing = true;
    cache.cached(key);
    await settle();
    store.failing = false;
    await store.revoke(record.id, new Date('2030-01-01T00:00:00Z'));
    expect((await cache.lookup(key))?.revokedAt).toBe('2030-01-01T00:00:00.000Z');
  });

  test('no longer than maxStaleMs after the last confirmation', async () => {
    const time = clock();
    const { store, cache } = setup({ ttlMs: 1000, maxStaleMs: 10_000 }, time.now);
    const { key } = await issueKey(store, { name: 'k' });
    await cache.lookup(key);
    store.failing = true;
    time.advance(9_000);
    expect(await outcome(cache.lookup(key))).toMatch(/^found/);
    time.advance(2_000);
    expect(cache.cached(key)).toBeUndefined();
    expect(await outcome(cache.lookup(key))).toBe('rejected: store down');
  });

  test('a key the store never confirmed is refused while the store is away', async () => {
    const { store, cache } = setup();
    store.failing = true;
    expect(await outcome(cache.lookup(generateKey()))).toBe('rejected: store down');
  });

  test('a key in use is confirmed in the background before its TTL ends: it never waits for the store', async () => {
    const time = clock();
    const { store, cache } = setup({ ttlMs: 1000 }, time.now);
    const { key, record } = await issueKey(store, { name: 'k' });
    await cache.lookup(key);
    time.advance(700);
    expect(cache.cached(key)).toEqual({ record });
    expect(store.lookups).toBe(1); // fresh: nothing asked
    time.advance(150); // past 80 % of the TTL
    await store.revoke(record.id, new Date('2030-01-01T00:00:00Z'));
    expect(cache.cached(key)).toEqual({ record }); // served from the cache at once ...
    expect(store.lookups).toBe(2); // ... and confirmed in the background
    await settle();
    expect(cache.cached(key)?.record?.revokedAt).toBe('2030-01-01T00:00:00.000Z');
    time.advance(500); // past the first TTL: the background confirmation renewed it
    expect(cache.cached(key)?.record?.revokedAt).toBe('2030-01-01T00:00:00.000Z');
  });

  test('servableKeys counts the known keys that could still be served with the store away', async () => {
    const time = clock();
    const { store, cache } = setup({ ttlMs: 1000, maxStaleMs: 10_000 }, time.now);
    await cache.lookup((await issueKey(store, { name: 'a' })).key);
    time.advance(5_000);
    await cache.lookup((await issueKey(store, { name: 'b' })).key);
    await cache.lookup(generateKey()); // unknown keys do not count
    expect(cache.servableKeys()).toBe(2);
    time.advance(6_000);
    expect(cache.servableKeys()).toBe(1);
  });
});

/** Lets background confirmations finish. */
const settle = () => new Promise((resolve) => setImmediate(resolve));
