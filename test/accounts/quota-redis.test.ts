/**
 * Quota counters in Redis over the key store, against a real throwaway redis-server and a store in
 * memory: Redis restarted empty is seeded from the store (once, however many replicas seed at once),
 * a counter Redis lost alone is too, a batch a frozen Redis ran late counts once, and while Redis is
 * away the replicas count through the store (or, with the store away too, each spends its share).
 */
import { createHash } from 'node:crypto';
import Redis from 'ioredis';
import { RedisQuotaCounters, type QuotaTruth } from '../../src/accounts/redis-quota';
import { GROW } from '../../src/accounts/redis-quota-scripts';
import { monitorRedis, ThrowawayRedis } from '../helpers/redis';
import { eventually } from '../helpers/time';

class MemoryTruth implements QuotaTruth {
  readonly values = new Map<string, number>();
  failing = false;
  async addQuotaUsage(amounts: ReadonlyMap<string, number>) {
    if (this.failing) throw new Error('store away');
    for (const [scope, tokens] of amounts) this.values.set(scope, (this.values.get(scope) ?? 0) + tokens);
  }
  async quotaUsage(scopes: readonly string[]) {
    if (this.failing) throw new Error('store away');
    return new Map(scopes.map((scope) => [scope, this.values.get(scope) ?? 0]));
  }
}

const DAY = 'key:key_1:d:2026-11-27';
const MONTH = 'account:acc_1:m:2026-11';
const use = (tokens: number, ...scopes: string[]) => new Map((scopes.length ? scopes : [DAY, MONTH]).map((scope) => [scope, tokens]));

let redis: ThrowawayRedis;
let inspect: Redis;
const open: RedisQuotaCounters[] = [];

beforeAll(async () => {
  redis = await ThrowawayRedis.start();
  inspect = new Redis(redis.url, { maxRetriesPerRequest: 1 });
  inspect.on('error', () => undefined);
});
afterAll(async () => {
  inspect?.disconnect();
  redis?.child?.kill('SIGCONT');
  await redis?.stop();
});
beforeEach(async () => {
  await eventually(async () => ((await inspect.flushall().catch(() => undefined)) === 'OK' ? true : undefined), 10_000);
});
afterEach(async () => {
  redis.child?.kill('SIGCONT');
  await Promise.all(open.splice(0).map((counters) => counters.close()));
});

async function replica(store: MemoryTruth, options: { storeFlushMs?: number; up?: () => boolean; failures?: unknown[]; reseeds?: number[] } = {}) {
  const counters = new RedisQuotaCounters(store, {
    url: redis.url,
    timeoutMs: 200,
    storeFlushMs: options.storeFlushMs ?? 60_000,
    redisUp: options.up ?? (() => true),
    events: { failed: (err) => options.failures?.push(err), reseeded: (n) => options.reseeds?.push(n) },
  });
  open.push(counters);
  await counters.connected();
  return counters;
}

/** One sync as the tracker does it: add, then read the totals back. */
async function sync(counters: RedisQuotaCounters, amounts: Map<string, number> = new Map(), scopes: string[] = [DAY, MONTH]) {
  await counters.add(amounts);
  return counters.totals(scopes);
}

const redisValue = async (scope: string) => Number(await inspect.get(`chatgate:quota:${scope}`));

test('counts across replicas in Redis, and writes the truth to the store every storeFlushMs', async () => {
  const store = new MemoryTruth();
  const a = await replica(store, { storeFlushMs: 0 });
  const b = await replica(store, { storeFlushMs: 60_000 });
  expect(await sync(a, use(100))).toEqual(new Map([[DAY, 100], [MONTH, 100]]));
  expect(await sync(b, use(50))).toEqual(new Map([[DAY, 150], [MONTH, 150]]));
  expect(await sync(a)).toEqual(new Map([[DAY, 150], [MONTH, 150]]));
  expect(store.values.get(DAY)).toBe(100); // b writes its 50 within its storeFlushMs, not every sync
  await b.close(); // and at the latest when it stops
  expect(store.values.get(DAY)).toBe(150);
});

test('Redis restarted empty: two replicas seeding at once restore the store total, once, with the use not yet in the store', async () => {
  const store = new MemoryTruth();
  const reseeds: number[] = [];
  const a = await replica(store, { storeFlushMs: 0, reseeds });
  const b = await replica(store, { storeFlushMs: 0, reseeds });
  await sync(a, use(3000));
  await sync(b, use(1000));
  await sync(a);
  expect(store.values.get(DAY)).toBe(4000);

  await redis.stop();
  await redis.resume(); // empty: no persistence
  await a.add(use(30)); // used while Redis was restarting, not in the store yet
  await b.add(use(20));
  const [fromA, fromB] = await eventually(async () => {
    const answers = await Promise.all([a.totals([DAY, MONTH]), b.totals([DAY, MONTH])]);
    // Reconnecting: until both replicas reach Redis again they count through the store.
    return (await inspect.exists('chatgate:quota:epoch').catch(() => 0)) && answers.every((totals) => totals.get(DAY)! >= 4050) && (await redisValue(DAY)) >= 4050 ? answers : undefined;
  }, 10_000);
  expect(fromA.get(DAY)).toBe(4050);
  expect(fromB.get(DAY)).toBe(4050);
  expect(await redisValue(DAY)).toBe(4050); // not 8000 (seeded twice), not 50 (forgotten)
  expect(await redisValue(MONTH)).toBe(4050);
  expect(store.values.get(DAY)).toBe(4050);
  // Later use adds up normally on the seeded counters, once: a sync of a's that its 200 ms deadline cut
  // on a busy machine is sent again (and counted once) at its next one.
  await a.add(use(5));
  const later = await eventually(async () => {
    await a.totals([DAY, MONTH]);
    const total = (await sync(b)).get(DAY)!;
    return total >= 4055 ? total : undefined;
  }, 10_000);
  expect(later).toBe(4055);
  expect(await redisValue(DAY)).toBe(4055);
  expect(reseeds.length).toBeGreaterThanOrEqual(1);
}, 30_000);

test('a counter Redis lost alone (evicted) while the store has its count is seeded again, not restarted at 0', async () => {
  const store = new MemoryTruth();
  const a = await replica(store, { storeFlushMs: 0 });
  const b = await replica(store, { storeFlushMs: 0 });
  await sync(a, use(700));
  await sync(b, use(300));
  await inspect.del(`chatgate:quota:${DAY}`);
  await sync(a, use(10));
  expect((await sync(b)).get(DAY)).toBe(1010);
  expect(await redisValue(DAY)).toBe(1010);
  expect(await redisValue(MONTH)).toBe(1010); // the other counters were not doubled by the reseed
});

test('a counter never counted anywhere is created, not seeded: the store is asked about it once', async () => {
  const store = new MemoryTruth();
  let asked = 0;
  const counting: QuotaTruth = {
    addQuotaUsage: (amounts) => store.addQuotaUsage(amounts),
    quotaUsage: (scopes) => {
      asked += scopes.length;
      return store.quotaUsage(scopes);
    },
  };
  const a = new RedisQuotaCounters(counting, { url: redis.url, timeoutMs: 200, storeFlushMs: 60_000, redisUp: () => true });
  open.push(a);
  await a.connected();
  expect(await sync(a)).toEqual(new Map([[DAY, 0], [MONTH, 0]]));
  const afterFirst = asked;
  for (let i = 0; i < 5; i++) await sync(a);
  expect(asked).toBe(afterFirst);
  expect((await sync(a, use(7))).get(DAY)).toBe(7);
});

test('a batch a frozen Redis ran after the replica gave up on it counts once', async () => {
  const store = new MemoryTruth();
  const failures: unknown[] = [];
  const a = await replica(store, { storeFlushMs: 60_000, failures });
  await sync(a, use(100));
  redis.child!.kill('SIGSTOP');
  let totals: Map<string, number>;
  try {
    totals = await sync(a, use(40)); // sent, no answer within 200 ms
  } finally {
    redis.child!.kill('SIGCONT'); // Redis runs it now, late
  }
  expect(failures.length).toBeGreaterThanOrEqual(1);
  expect(totals.get(DAY)).toBe(140); // counted here meanwhile
  expect(await eventually(async () => ((await redisValue(DAY)) === 140 ? 140 : undefined))).toBe(140);
  // The replica sends the same batch again: its marker says it was applied.
  expect((await eventually(async () => {
    const again = await sync(a);
    return failures.length > 0 && again.get(DAY) === 140 && (await redisValue(DAY)) === 140 ? again : undefined;
  })).get(DAY)).toBe(140);
  await sync(a, use(1));
  expect(await redisValue(DAY)).toBe(141);
});

test("Redis away: each replica writes to and reads from the store every sync, so it counts the others' use; back, Redis gets what was used meanwhile, once", async () => {
  const store = new MemoryTruth();
  let up = true;
  const a = await replica(store, { storeFlushMs: 60_000, up: () => up });
  const b = await replica(store, { storeFlushMs: 60_000, up: () => up });
  await sync(a); // the first replica seeds an empty Redis from the store: nothing to write yet
  await sync(a, use(100));
  await sync(b, use(100));
  expect(store.values.get(DAY)).toBeUndefined(); // Redis holds it; the store gets it within storeFlushMs

  up = false;
  await sync(a, use(30));
  await sync(b, use(20)); // b writes its 100 and 20 to the store, reads a's 100 and 30
  expect((await sync(b)).get(DAY)).toBe(250);
  expect((await sync(a)).get(DAY)).toBe(250);

  up = true;
  await sync(a);
  expect((await sync(b)).get(DAY)).toBe(250);
  expect(await redisValue(DAY)).toBe(250);
  expect(store.values.get(DAY)).toBe(250);
});

test('Redis and the store both away: a replica counts its use since once for every replica seen in the last minute', async () => {
  const store = new MemoryTruth();
  let up = true;
  const a = await replica(store, { up: () => up });
  const b = await replica(store, { up: () => up });
  const c = await replica(store, { up: () => up });
  await sync(a, use(100));
  await sync(b);
  await sync(c);
  expect((await sync(a)).get(DAY)).toBe(100);

  up = false;
  store.failing = true;
  // Three replicas seen: 50 used here counts 150, so the 900 left of a quota of 1000 holds across all three.
  expect((await sync(a, use(50))).get(DAY)).toBe(250);
  store.failing = false;
  expect((await sync(a)).get(DAY)).toBe(150); // the store back: the real count
});

test('use during an outage that ends with Redis restarted empty is counted once: a replica owing Redis its outage use drops it when another has seeded it from the store', async () => {
  const store = new MemoryTruth();
  let up = true;
  const a = await replica(store, { up: () => up });
  const b = await replica(store, { up: () => up });
  await sync(a);
  await sync(a, use(100));
  await sync(b, use(100));
  up = false;
  await sync(a, use(30)); // written to the store, owed to Redis
  await sync(b, use(20));
  expect(store.values.get(DAY)).toBe(250);
  await redis.stop();
  await redis.resume();
  up = true;
  await eventually(async () => ((await sync(a)).get(DAY) === 250 && (await redisValue(DAY)) === 250 ? true : undefined), 10_000); // a seeds first
  expect((await sync(b)).get(DAY)).toBe(250); // b's owed 20 is in the store's total already
  expect(await redisValue(DAY)).toBe(250);
  expect((await sync(a)).get(DAY)).toBe(250);
}, 30_000);

test('Redis restarted empty while the store lags (other replicas have not written their use yet): the first replica back seeds from what Redis last told it, never below', async () => {
  const store = new MemoryTruth();
  const a = await replica(store, { storeFlushMs: 60_000 });
  const b = await replica(store, { storeFlushMs: 60_000 });
  await sync(a);
  await sync(a, use(300));
  await sync(b, use(200));
  expect((await sync(a)).get(DAY)).toBe(500);
  expect(store.values.get(DAY) ?? 0).toBe(0); // nothing written yet: within storeFlushMs
  await redis.stop();
  await redis.resume();
  // a alone comes back first: the store has only a's 300 (written as it seeds), b's 200 only in b.
  const first = await eventually(async () => {
    const totals = await a.totals([DAY, MONTH]);
    return (await inspect.exists('chatgate:quota:epoch').catch(() => 0)) ? totals : undefined;
  }, 10_000);
  expect(first.get(DAY)).toBe(500);
  expect(await redisValue(DAY)).toBe(500);
  expect((await sync(b)).get(DAY)).toBe(500); // and b's seed (the store now has 500) does not add up
  expect(await redisValue(DAY)).toBe(500);
}, 30_000);

describe('leases (room Redis holds for a replica, redis-quota-leases.ts)', () => {
  const lease = (scope: string) => inspect.hgetall(`chatgate:quota:lease:${scope}`);
  const grow = (counters: RedisQuotaCounters, need: number, limit: number, scope = DAY) => counters.leases.grow([{ scope, limit, need }]);

  test('budget-sized leases (past 1e14 nano-units) grow, shrink by what is added and stay whole numbers', async () => {
    const a = await replica(new MemoryTruth());
    await sync(a, use(1, DAY)); // the counter exists
    const limit = 1_000_000 * 1e9; // a budget of a million, in nano-units
    expect((await grow(a, 2e14 + 3, limit)).short).toBeUndefined();
    const granted = Number(Object.values(await lease(DAY))[0]);
    expect(granted).toBeGreaterThanOrEqual(2e14 + 3);
    expect(a.leases.room(DAY)).toBe(granted);
    await sync(a, use(1e14 + 1, DAY)); // added: it leaves the lease, in the same call
    const [left] = Object.values(await lease(DAY));
    expect(left).toMatch(/^\d+$/); // never 1.9e+14: HINCRBY would refuse it
    expect(Number(left)).toBe(granted - 1e14 - 1);
    expect(a.leases.room(DAY)).toBe(granted - 1e14 - 1);
    expect((await grow(a, 1e14, limit)).short).toBeUndefined(); // and grows again
  });

  test('a counter Redis does not have (lost, not seeded) is leased nothing', async () => {
    const a = await replica(new MemoryTruth());
    await sync(a, use(5, DAY));
    await inspect.del(`chatgate:quota:${DAY}`);
    await expect(grow(a, 10, 100)).rejects.toThrow(/not in redis/);
    expect(await lease(DAY)).toEqual({});
  });

  test("refused while another replica leases the room, a grow asks once more: a release that reaches Redis just after it is not missed", async () => {
    const store = new MemoryTruth();
    const [a, b] = [await replica(store), await replica(store)];
    await sync(a, use(30, DAY));
    await sync(b);
    expect((await grow(a, 60, 100)).short).toBeUndefined(); // a leases nearly all that is left
    expect((await grow(b, 20, 100)).short).toBe(0); // control: nothing given back, b is refused (after asking twice)
    const grows = createHash('sha1').update(GROW).digest('hex');
    const monitor = await monitorRedis(redis.url);
    try {
      // a gives back 40 as soon as Redis has run b's first ask: only a second ask can see it.
      let released = false;
      monitor.on((args) => {
        if (released || args[0]?.toLowerCase() !== 'evalsha' || args[1] !== grows) return;
        released = true;
        a.leases.release(DAY, 40, true);
      });
      const answer = await grow(b, 20, 100);
      expect(answer.short).toBeUndefined();
      expect(released).toBe(true);
      const held = Object.values(await lease(DAY)).reduce((sum, value) => sum + Number(value), 0);
      expect(30 + held).toBeLessThanOrEqual(100);
    } finally {
      monitor.close();
    }
  });

  test('two replicas asking at once never lease past the limit: 40 grows of 10 against 300, 30 of them used', async () => {
    const store = new MemoryTruth();
    const [a, b] = [await replica(store), await replica(store)];
    await sync(a, use(30, DAY));
    await sync(b);
    const answers = await Promise.all(Array.from({ length: 40 }, (_, i) => grow(i % 2 ? b : a, 10, 300)));
    const held = Object.values(await lease(DAY)).reduce((sum, value) => sum + Number(value), 0);
    expect(held).toBeLessThanOrEqual(270);
    expect(answers.filter((answer) => answer.short === undefined).length).toBeGreaterThan(0);
    expect(answers.filter((answer) => answer.short !== undefined).length).toBeGreaterThan(0); // the limit did bind
    // Each replica's view is at most what Redis holds for it.
    await Promise.all([sync(a), sync(b)]);
    expect((a.leases.room(DAY) ?? 0) + (b.leases.room(DAY) ?? 0)).toBeLessThanOrEqual(held);
  });
});
