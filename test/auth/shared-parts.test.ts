import { KeyCache } from '../../src/auth/cache';
import { digestKey, generateKey } from '../../src/auth/keys';
import { MAX_PART_LENGTH, MAX_PARTS, SharedParts } from '../../src/auth/shared-parts';
import type { KeyAuthRecord } from '../../src/store/types';

/** A string of its own, as a database driver hands it over. */
const own = (text: string) => Buffer.from(text, 'utf8').toString('utf8');

function recordOf(digest: string, parts: Partial<KeyAuthRecord> = {}): KeyAuthRecord {
  return {
    id: own(`key_${digest.slice(0, 20)}`),
    name: own('service'),
    digest: own(digest),
    prefix: own(`cgk_${digest.slice(20, 28)}`),
    createdAt: '2030-01-01T00:00:00.000Z',
    revokedAt: null,
    expiresAt: null,
    models: [own('vllm/llama-3*'), own('mock/*')],
    endpoints: [own('chat')],
    allowedIps: [],
    rateLimit: { requestsPerMinute: null, tokensPerMinute: 600, maxConcurrent: null },
    accountId: own('acc_one'),
    createdBy: own('someone@example.com'),
    quota: { tokensPerDay: 1000, tokensPerMonth: null },
    budget: { perDay: null, perMonth: 5 },
    ...parts,
  };
}

const digestOf = (i: number) => digestKey(`cgk_${String(i).padStart(43, '0')}`);
/** A deep copy, to compare with what was handed over. */
const copy = <T>(value: T): T => structuredClone(value);

describe('SharedParts', () => {
  test('two keys alike hold one copy of each common part, and each reads as the store gave it', () => {
    const shared = new SharedParts();
    const [a, b] = [recordOf(digestOf(1)), recordOf(digestOf(2))];
    const [givenA, givenB] = [copy(a), copy(b)];
    const [ca, cb] = [shared.compact(a, digestOf(1)), shared.compact(b, digestOf(2))];
    expect(ca).toEqual(givenA);
    expect(cb).toEqual(givenB);
    for (const part of ['models', 'endpoints', 'allowedIps', 'rateLimit', 'quota', 'budget', 'accountId', 'createdBy'] as const) {
      expect(ca[part]).toBe(cb[part]);
    }
    // What only one key has stays its own.
    expect(ca.id).not.toBe(cb.id);
    expect(ca.digest).not.toBe(cb.digest);
  });

  test("the record's digest becomes the cache's own string; one found by an earlier secret keeps its own", () => {
    const shared = new SharedParts();
    const digest = digestOf(3);
    expect(shared.compact(recordOf(own(digest)), digest).digest).toBe(digest);
    const current = digestOf(4);
    const byPrevious = shared.compact(recordOf(current, { previousKey: true, previousKeyExpiresAt: '2030-01-02T00:00:00.000Z' }), digest);
    expect(byPrevious.digest).toBe(current);
    expect(byPrevious.previousKey).toBe(true);
    expect(byPrevious.previousKeyExpiresAt).toBe('2030-01-02T00:00:00.000Z');
  });

  test('shared parts are frozen; what the store handed over is neither frozen nor changed', () => {
    const shared = new SharedParts();
    const given = recordOf(digestOf(5));
    const before = copy(given);
    const compacted = shared.compact(given, digestOf(5));
    expect(Object.isFrozen(compacted.models)).toBe(true);
    expect(Object.isFrozen(compacted.rateLimit)).toBe(true);
    expect(() => (compacted.models as string[]).push('evil/*')).toThrow(TypeError);
    expect(() => {
      (compacted.quota as { tokensPerDay: number | null }).tokensPerDay = null;
    }).toThrow(TypeError);
    expect(given).toEqual(before);
    expect(Object.isFrozen(given.models)).toBe(false);
    expect(Object.isFrozen(given.rateLimit)).toBe(false);
    given.models.push('other/*'); // the store's own record stays the store's to change
    expect(shared.compact(recordOf(digestOf(6)), digestOf(6)).models).toEqual(['vllm/llama-3*', 'mock/*']);
  });

  test('look-alike parts are never taken for one another', () => {
    const shared = new SharedParts();
    const cases: Array<Partial<KeyAuthRecord>> = [
      { models: ['a', 'b'] },
      { models: ['a,b'] },
      { models: ['a\nb'] },
      { models: ['a", "b'] },
      { models: ['["a","b"]'] },
      { models: [] },
      { models: [''] },
      { accountId: '["a","b"]' },
      { accountId: "'a" },
      { accountId: 'a' },
      { createdBy: 'l{requestsPerMinute:null,tokensPerMinute:600,maxConcurrent:null' },
      { rateLimit: { requestsPerMinute: null, tokensPerMinute: 600, maxConcurrent: 0 } },
      { rateLimit: { requestsPerMinute: null, tokensPerMinute: 600, maxConcurrent: -0 } },
      { rateLimit: { requestsPerMinute: null, tokensPerMinute: 600, maxConcurrent: Number.NaN } },
      { rateLimit: { requestsPerMinute: null, tokensPerMinute: '600' as unknown as number, maxConcurrent: null } },
      // Field names that would read as others' if they were written unescaped.
      { rateLimit: { 'requestsPerMinute:null,tokensPerMinute': 600, maxConcurrent: null } as unknown as KeyAuthRecord['rateLimit'] },
      { rateLimit: { requestsPerMinute: null, tokensPerMinute: 600, 'maxConcurrent:null': null } as unknown as KeyAuthRecord['rateLimit'] },
      { quota: { tokensPerDay: -0, tokensPerMonth: null } },
      { quota: { tokensPerDay: 0, tokensPerMonth: null } },
      { quota: { tokensPerDay: Number.NaN, tokensPerMonth: null } },
      { budget: { perDay: -0, perMonth: 5 } },
      { budget: { perDay: Number.NaN, perMonth: 5 } },
      { budget: { perDay: Number.POSITIVE_INFINITY, perMonth: 5 } },
      { quota: { tokensPerDay: null, tokensPerMonth: null } },
      { budget: { perDay: null, perMonth: null } },
      { quota: { tokensPerDay: 1000, tokensPerMonth: 0 } },
      { budget: { perDay: 1000, perMonth: 0 } },
      { endpoints: ['chat', 'embeddings'] },
      { endpoints: ['embeddings', 'chat'] },
      { allowedIps: ['10.0.0.0/8'] },
      { allowedIps: ['10.0.0.0/80'] },
    ];
    // Each case twice, in turn: every one reads back exactly as given, the second time from the table.
    for (const round of [1, 2]) {
      for (const [i, parts] of cases.entries()) {
        const given = recordOf(digestOf(100 + i), parts);
        const expected = copy(given);
        const compacted = shared.compact(given, digestOf(100 + i));
        expect({ round, i, record: compacted }).toEqual({ round, i, record: expected });
        for (const part of ['rateLimit', 'quota', 'budget'] as const) {
          expect(Object.keys(compacted[part])).toEqual(Object.keys(expected[part]));
          for (const [name, value] of Object.entries(compacted[part])) expect({ i, part, name, same: Object.is(value, (expected[part] as unknown as Record<string, unknown>)[name]) }).toEqual({ i, part, name, same: true });
        }
      }
    }
  });

  test('the table starts again at its bound, and shares what comes after', () => {
    const shared = new SharedParts();
    for (let i = 0; i < MAX_PARTS + 500; i++) {
      shared.compact(recordOf(digestOf(i), { models: [`m/${i}`] }), digestOf(i));
      expect(shared.size).toBeLessThanOrEqual(MAX_PARTS);
    }
    expect(shared.size).toBeLessThan(MAX_PARTS);
    const a = shared.compact(recordOf(digestOf(1), { models: ['late/one'] }), digestOf(1));
    const b = shared.compact(recordOf(digestOf(2), { models: ['late/one'] }), digestOf(2));
    expect(a.models).toEqual(['late/one']);
    expect(a.models).toBe(b.models);
  });

  test("a long list stays its own key's, frozen, and is not kept in the table", () => {
    const shared = new SharedParts();
    const long = Array.from({ length: 100 }, (_, i) => `provider-${i}/${'x'.repeat(280)}`);
    const before = shared.size;
    const a = shared.compact(recordOf(digestOf(1), { models: [...long] }), digestOf(1));
    const b = shared.compact(recordOf(digestOf(2), { models: [...long] }), digestOf(2));
    expect(a.models).toEqual(long);
    expect(a.models).not.toBe(b.models);
    expect(Object.isFrozen(a.models)).toBe(true);
    // The other parts of the two records are in the table; the long list and its globs are not.
    expect(shared.size - before).toBeLessThan(20);
    expect(shared.compact(recordOf(digestOf(3), { models: [`${'y'.repeat(MAX_PART_LENGTH + 1)}`] }), digestOf(3)).models[0]).toHaveLength(MAX_PART_LENGTH + 1);
  });

  test('a record of another shape than its type says is kept as the store gave it, never a failure', () => {
    const shared = new SharedParts();
    const odd = {
      ...recordOf(digestOf(9)),
      models: 'mock/*',
      endpoints: undefined,
      rateLimit: undefined,
      quota: null,
      budget: ['perDay'],
      accountId: undefined,
      createdBy: 42,
    } as unknown as KeyAuthRecord;
    const compacted = shared.compact(odd, digestOf(9));
    for (const part of ['models', 'endpoints', 'rateLimit', 'quota', 'budget', 'accountId', 'createdBy'] as const) expect(compacted[part]).toBe(odd[part]);
    // Nothing it held was taken for a string part of the same text.
    expect(shared.compact(recordOf(digestOf(10), { accountId: 'undefined', createdBy: '42' }), digestOf(10))).toMatchObject({ accountId: 'undefined', createdBy: '42' });
  });
});

describe('the key cache holds compacted records', () => {
  const options = { size: 100, ttlMs: 30_000, maxAgeMs: 3_600_000, maxStaleMs: 3_600_000, negativeSize: 100, negativeTtlMs: 5_000 };
  const events = { hit: () => undefined, miss: () => undefined };

  test('keys alike share their parts in the cache, and a changed key is read anew with its own', async () => {
    const records = new Map<string, KeyAuthRecord>();
    const store = { findByDigest: async (digest: string) => records.get(digest), changeFeedLive: true };
    const [k1, k2] = [generateKey(), generateKey()];
    for (const key of [k1, k2]) records.set(digestKey(key), recordOf(digestKey(key)));
    const cache = new KeyCache(store, options, events);
    const r1 = await cache.lookup(k1);
    const r2 = await cache.lookup(k2);
    expect(r1?.models).toBe(r2?.models);
    expect(cache.cached(k1)?.record).toBe(r1);
    // The store's records are its own: a change to one (as the memory store makes) reaches the cache after its notice.
    records.get(digestKey(k1))?.models.push('extra/*');
    cache.applyChanges([digestKey(k1)]);
    expect((await cache.lookup(k1))?.models).toEqual(['vllm/llama-3*', 'mock/*', 'extra/*']);
    expect((await cache.lookup(k2))?.models).toEqual(['vllm/llama-3*', 'mock/*']);
  });

  test('a record the store gave in another shape is cached and served as it came, and asked for once', async () => {
    const key = generateKey();
    let asked = 0;
    const odd = { ...recordOf(digestKey(key)), rateLimit: undefined, models: 'mock/*' } as unknown as KeyAuthRecord;
    const store = {
      findByDigest: async () => {
        asked++;
        return odd;
      },
      changeFeedLive: true,
    };
    const cache = new KeyCache(store, options, events);
    expect((await cache.lookup(key))?.models).toBe('mock/*');
    expect((await cache.lookup(key))?.rateLimit).toBeUndefined();
    expect(cache.cached(key)?.record?.id).toBe(odd.id);
    expect(asked).toBe(1);
  });
});
