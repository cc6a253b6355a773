/**
 * The quota tracker, with shared counters in memory standing for Redis or the key store, two
 * trackers for two replicas, and a clock the test moves.
 */
import { QuotaTracker, scopeName, secondsToNext, type QuotaCounters } from '../../src/accounts/quota';
import type { CallerKey } from '../../src/context';
import type { Quota, UsageDay } from '../../src/store/types';

class SharedCounters implements QuotaCounters {
  readonly values = new Map<string, number>();
  /** Every scope added to or read back. */
  readonly asked = new Set<string>();
  failing = false;
  async add(amounts: ReadonlyMap<string, number>) {
    if (this.failing) throw new Error('counters away');
    for (const [scope, tokens] of amounts) {
      this.asked.add(scope);
      this.values.set(scope, (this.values.get(scope) ?? 0) + tokens);
    }
  }
  /** How many times the totals were read. */
  reads = 0;
  async totals(scopes: readonly string[]) {
    this.reads++;
    if (this.failing) throw new Error('counters away');
    for (const scope of scopes) this.asked.add(scope);
    return new Map(scopes.map((scope) => [scope, this.values.get(scope) ?? 0]));
  }
}

const NONE: Quota = { tokensPerDay: null, tokensPerMonth: null };
const key = (quota: Quota = NONE, id = 'key_1', accountId = 'acc_1'): CallerKey => ({ id, name: id, accountId, models: [], endpoints: [], rateLimit: { requestsPerMinute: null, tokensPerMinute: null, maxConcurrent: null }, quota, budget: { perDay: null, perMonth: null } });

function replicas(accountQuotas: Record<string, Quota> = {}, at = new Date('2026-11-27T10:00:00Z'), daily?: UsageDay[]) {
  const shared = new SharedCounters();
  const clock = { at };
  /** The accounts whose daily usage was read, in order. */
  const usageReads: string[] = [];
  const usage = daily && (async (accountId: string, from: string, to: string) => {
    usageReads.push(accountId);
    return daily.filter((row) => row.accountId === accountId && row.date >= from && row.date <= to).map((row) => ({ ...row }));
  });
  const make = () =>
    new QuotaTracker(shared, { accountQuota: async (ids) => new Map(ids.filter((id) => accountQuotas[id]).map((id) => [id, accountQuotas[id]!])), usage }, () => clock.at, { usageFlushMs: 10_000, settleMs: 30_000 });
  return { shared, clock, usageReads, a: make(), b: make() };
}

/** A day's usage of a key, as the usage recorder writes it. */
const day = (date: string, tokens: number, keyId = 'key_1', accountId = 'acc_1'): UsageDay => ({ date, accountId, keyId, requests: 1, refused: 0, costNanos: 0, promptTokens: tokens - 1, completionTokens: 1 });
const later = (clock: { at: Date }, ms: number) => (clock.at = new Date(clock.at.getTime() + ms));

/** What check() says with an unread counter taken as not over (what the stage does once its read is done or failed). */
const verdict = (tracker: QuotaTracker, k: CallerKey) => {
  const answer = tracker.check(k);
  return answer === 'unread' ? undefined : answer;
};

test("a key's daily quota: refused once its tokens reach it, with Retry-After until midnight UTC", async () => {
  const { a } = replicas();
  const limited = key({ tokensPerDay: 100, tokensPerMonth: null });
  expect(verdict(a, limited)).toBeUndefined();
  a.charge(limited, 60);
  expect(verdict(a, limited)).toBeUndefined();
  a.charge(limited, 40);
  expect(verdict(a, limited)).toEqual({ scope: 'key', period: 'day', retryAfterSeconds: 14 * 3600 });
});

test('reached through one replica, refused by the other after a sync of each', async () => {
  const { a, b } = replicas();
  const limited = key({ tokensPerDay: null, tokensPerMonth: 1000 });
  a.charge(limited, 1000);
  expect(verdict(b, limited)).toBeUndefined(); // b has not heard yet
  await a.sync(); // a adds its use to the shared counters
  await b.sync(); // b reads them back
  expect(verdict(b, limited)).toMatchObject({ scope: 'key', period: 'month' });
});

test("a counter new on a replica is 'unread' until one read of its shared total: a fresh replica does not judge a spent quota at 0", async () => {
  const { a, b, shared } = replicas();
  const limited = key({ tokensPerDay: 1000, tokensPerMonth: null });
  a.check(limited);
  a.charge(limited, 1000);
  await a.sync(); // spent, in the shared counters
  expect(b.check(limited)).toBe('unread'); // b (a replica that just started) has read nothing yet
  expect(b.reserve(limited, 10)).not.toHaveProperty('scope'); // ... and would admit against 0
  const reads = shared.reads;
  await Promise.all([b.prime(limited), b.prime(limited), b.prime(limited)]); // the requests that wait share one read (b's sync)
  expect(shared.reads - reads).toBe(1);
  expect(b.check(limited)).toMatchObject({ scope: 'key', period: 'day' });
});

test('a read that fails does not make requests wait again: the counter counts on from what the replica knows', async () => {
  const { a, shared } = replicas();
  const limited = key({ tokensPerDay: 1000, tokensPerMonth: null });
  shared.failing = true;
  expect(a.check(limited)).toBe('unread');
  await a.prime(limited);
  expect(a.check(limited)).toBeUndefined();
});

test('a counter that slept (dormant) reads its shared total again before it is trusted', async () => {
  const { a, b } = replicas();
  const limited = key({ tokensPerDay: 1000, tokensPerMonth: null });
  b.check(limited);
  await b.prime(limited);
  for (let i = 0; i < 125; i++) await b.sync(); // unused for over IDLE_SYNCS syncs: dormant, no longer read back
  a.check(limited);
  a.charge(limited, 1000);
  await a.sync();
  expect(b.check(limited)).toBe('unread');
  await b.prime(limited);
  expect(b.check(limited)).toMatchObject({ scope: 'key', period: 'day' });
});

test("an account's quota holds over all its keys, read from the store on a sync", async () => {
  const { a } = replicas({ acc_1: { tokensPerDay: 50, tokensPerMonth: null } });
  const first = key(NONE, 'key_1');
  const second = key(NONE, 'key_2');
  expect(verdict(a, first)).toBeUndefined(); // the account is now in use: its quota is read on the next sync
  await a.sync();
  a.charge(first, 30);
  a.charge(second, 20);
  expect(verdict(a, second)).toMatchObject({ scope: 'account', period: 'day' });
  expect(verdict(a, key(NONE, 'key_3', 'acc_2'))).toBeUndefined(); // another account is not touched
});

test('the period turns: the next day starts from zero', async () => {
  const { a, clock } = replicas();
  const limited = key({ tokensPerDay: 10, tokensPerMonth: null });
  a.charge(limited, 10);
  expect(verdict(a, limited)).toBeDefined();
  clock.at = new Date('2026-11-28T00:00:01Z');
  expect(verdict(a, limited)).toBeUndefined();
});

test('counters away: what was used is kept, counted here meanwhile, and added once they are back', async () => {
  const { a, shared } = replicas();
  const limited = key({ tokensPerDay: 100, tokensPerMonth: null });
  shared.failing = true;
  a.charge(limited, 70);
  await a.sync();
  a.charge(limited, 30);
  expect(verdict(a, limited)).toBeDefined(); // still counted here
  shared.failing = false;
  await a.sync();
  expect(shared.values.get(scopeName('key', 'key_1', 'day', new Date('2026-11-27T10:00:00Z')))).toBe(100);
  await a.sync();
  expect(shared.values.get(scopeName('key', 'key_1', 'day', new Date('2026-11-27T10:00:00Z')))).toBe(100); // added once
});

test('a key with no quota, whose account has none, makes no counter: nothing is added or read back for it', async () => {
  const { a, shared } = replicas({ acc_2: { tokensPerDay: 1000, tokensPerMonth: null } }, undefined, []);
  for (let i = 0; i < 5; i++) {
    for (const [id, account] of [['key_1', 'acc_1'], ['key_2', 'acc_1'], ['key_3', 'acc_3']]) {
      expect(verdict(a, key(NONE, id, account))).toBeUndefined();
      a.charge(key(NONE, id, account), 100);
    }
    await a.sync();
  }
  expect([...shared.asked]).toEqual([]);
  // A key with a quota of its own counts for the periods it limits; a key of an account with a quota, for the account.
  const limited = key({ tokensPerDay: null, tokensPerMonth: 5000 }, 'key_4', 'acc_1');
  a.check(limited);
  a.charge(limited, 10);
  const metered = key(NONE, 'key_5', 'acc_2');
  a.check(metered);
  await a.sync(); // acc_2's quota is read here: what key_5 used before is held until then, not lost
  a.charge(metered, 20);
  await a.sync();
  expect(shared.values).toEqual(new Map([['key:key_4:m:2026-11', 10], ['account:acc_2:d:2026-11-27', 20]]));
  expect([...shared.asked].sort()).toEqual(['account:acc_2:d:2026-11-27', 'key:key_4:m:2026-11']);
});

test("use before the account's quota is known (its first use here) is held, then counted once the sync has read the quota", async () => {
  const { a, shared } = replicas({ acc_1: { tokensPerDay: 100, tokensPerMonth: null } });
  const first = key(NONE, 'key_1');
  expect(verdict(a, first)).toBeUndefined(); // not known yet: admitted
  a.charge(first, 60);
  a.charge(key(NONE, 'key_9', 'acc_9'), 60); // an account without a quota: let go at the sync
  await a.sync();
  expect(shared.values).toEqual(new Map([['account:acc_1:d:2026-11-27', 60]]));
  a.charge(first, 40);
  expect(verdict(a, first)).toMatchObject({ scope: 'account', period: 'day' });
  await a.sync();
  expect(shared.values).toEqual(new Map([['account:acc_1:d:2026-11-27', 100]]));
});

test('a quota set on a key already used this period starts from its daily usage; another replica follows within a usage flush', async () => {
  const daily = [day('2026-11-02', 5000), day('2026-11-27', 900), day('2026-11-27', 400, 'key_2')];
  const { a, b, shared, clock } = replicas({}, undefined, daily);
  // Used without a quota: nothing counted.
  a.charge(key(), 900);
  await a.sync();
  expect(shared.values.size).toBe(0);
  // The quota is set: 1,000 a day, 6,000 a month.
  const limited = key({ tokensPerDay: 1000, tokensPerMonth: 6000 });
  expect(verdict(a, limited)).toBeUndefined(); // the daily usage is read on the next sync
  await a.sync();
  expect(verdict(a, limited)).toBeUndefined(); // 900 of 1,000 today, 5,900 of 6,000 this month
  a.charge(limited, 100);
  expect(verdict(a, limited)).toEqual({ scope: 'key', period: 'day', retryAfterSeconds: 14 * 3600 });
  await a.sync();
  expect(verdict(a, limited)).toMatchObject({ scope: 'key', period: 'day' });
  // b reads the daily usage too; a's last 100 reach it when a's usage is written, and b reads it again a flush later.
  b.check(limited);
  await b.sync();
  expect(verdict(b, limited)).toBeUndefined(); // 900 written, 100 in the shared counter: the larger, 900
  daily[1] = day('2026-11-27', 1000);
  later(clock, 10_000);
  await b.sync();
  expect(verdict(b, limited)).toMatchObject({ scope: 'key', period: 'day' });
  // The counters count only what was used with the quota: the daily usage holds the rest.
  expect(shared.values).toEqual(new Map([['key:key_1:d:2026-11-27', 100], ['key:key_1:m:2026-11', 100]]));
});

test("a quota set on an account starts from all its keys' daily usage", async () => {
  const quotas: Record<string, Quota> = {};
  const daily = [day('2026-11-27', 300, 'key_1'), day('2026-11-27', 500, 'key_2'), day('2026-11-27', 999, 'key_3', 'acc_2')];
  const { a, clock } = replicas(quotas, undefined, daily);
  a.check(key(NONE, 'key_1'));
  await a.sync();
  quotas.acc_1 = { tokensPerDay: 1000, tokensPerMonth: null };
  later(clock, 500);
  await a.sync(); // the quota is read; the account's counter is made
  expect(verdict(a, key(NONE, 'key_1'))).toBeUndefined();
  await a.sync(); // its daily usage read: 800
  a.charge(key(NONE, 'key_2'), 150);
  expect(verdict(a, key(NONE, 'key_1'))).toBeUndefined();
  a.charge(key(NONE, 'key_1'), 50);
  expect(verdict(a, key(NONE, 'key_3', 'acc_1'))).toMatchObject({ scope: 'account', period: 'day' });
});

test('a quota removed, then set again, starts again from the daily usage: use meanwhile is not lost', async () => {
  const daily: UsageDay[] = [];
  const { a, shared, clock } = replicas({}, undefined, daily);
  const limited = key({ tokensPerDay: 100, tokensPerMonth: null });
  a.check(limited);
  a.charge(limited, 30);
  await a.sync();
  daily.push(day('2026-11-27', 30));
  expect(verdict(a, key())).toBeUndefined(); // the quota is gone: its counter with it
  a.charge(key(), 50);
  daily[0] = day('2026-11-27', 80);
  later(clock, 1000);
  await a.sync();
  expect(verdict(a, limited)).toBeUndefined(); // set again: a new counter
  await a.sync();
  a.charge(limited, 20);
  expect(verdict(a, limited)).toMatchObject({ scope: 'key', period: 'day' }); // 30 + 50 + 20
  expect(shared.values.get('key:key_1:d:2026-11-27')).toBe(30); // what was counted under the first quota
});

test('a counter counted from the start of its period reads the daily usage twice, then no more; one set midway reads it every flush', async () => {
  const daily: UsageDay[] = [day('2026-11-27', 700, 'key_2')];
  const { a, clock, usageReads } = replicas({}, undefined, daily);
  const fresh = key({ tokensPerDay: 1000, tokensPerMonth: null }, 'key_1');
  const midway = key({ tokensPerDay: 1000, tokensPerMonth: null }, 'key_2', 'acc_2');
  daily[0] = day('2026-11-27', 700, 'key_2', 'acc_2');
  a.check(fresh);
  a.check(midway);
  for (let second = 0; second < 120; second++) {
    a.charge(fresh, 1);
    daily.push(day('2026-11-27', 1)); // written as the replica's usage recorder would, a little behind
    await a.sync();
    later(clock, 1000);
  }
  const reads = (id: string) => usageReads.filter((account) => account === id).length;
  expect(reads('acc_1')).toBe(2); // when made, and once settled (30 s)
  expect(reads('acc_2')).toBe(12); // every 10 s of the 2 minutes
  expect(verdict(a, midway)).toBeUndefined();
});

test('secondsToNext: to the next UTC day and month', () => {
  expect(secondsToNext('day', new Date('2026-11-27T23:59:30Z'))).toBe(30);
  expect(secondsToNext('month', new Date('2026-12-31T23:00:00Z'))).toBe(3600);
});

test('reservations: a request is refused when what it may cost does not fit beside what is used and in flight; released, it frees its room', async () => {
  const { a } = replicas();
  const metered = key({ tokensPerDay: 100, tokensPerMonth: null });
  const first = a.reserve(metered, 40);
  const second = a.reserve(metered, 40);
  expect(first).toHaveProperty('release');
  expect(second).toHaveProperty('release');
  // 80 in flight: 30 more does not fit, 20 does; then the quota is all in flight and check() refuses too.
  expect(a.reserve(metered, 30)).toEqual({ scope: 'key', period: 'day', retryAfterSeconds: 14 * 3600, room: 20 });
  expect(verdict(a, metered)).toBeUndefined();
  const third = a.reserve(metered, 20) as { release(): void };
  expect(verdict(a, metered)).toMatchObject({ scope: 'key', period: 'day' });
  // The first answer used 25 of its 40: charged, then released; released twice counts once.
  a.charge(metered, 25);
  (first as { release(): void }).release();
  (first as { release(): void }).release();
  expect(a.reserve(metered, 16)).toMatchObject({ scope: 'key', room: 15 }); // 25 used + 60 in flight + 16 > 100
  const fourth = a.reserve(metered, 15) as { release(): void };
  expect(fourth).toHaveProperty('release');
  for (const reservation of [second as { release(): void }, third, fourth]) reservation.release();
  expect(a.reserve(metered, 75)).toHaveProperty('release');
  expect(a.reserve(metered, 1)).toMatchObject({ scope: 'key' });
});

test("reservations hold an account's quota over its keys; a key with no quota in an account with none reserves nothing", async () => {
  const { a } = replicas({ acc_1: { tokensPerDay: null, tokensPerMonth: 50 } });
  const one = key(NONE, 'key_1');
  const two = key(NONE, 'key_2');
  a.check(one);
  await a.sync(); // the account's quota is read
  expect(a.limits(one)).toBe(true);
  expect(a.reserve(one, 30)).toHaveProperty('release');
  expect(a.reserve(two, 30)).toEqual({ scope: 'account', period: 'month', retryAfterSeconds: expect.any(Number), room: 20 });
  expect(a.reserve(two, 20)).toHaveProperty('release');
  const free = key(NONE, 'key_free', 'acc_free');
  a.check(free);
  await a.sync();
  expect(a.limits(free)).toBe(false);
  expect(a.reserve(free, 1_000_000)).toBeUndefined();
});

test('a reservation larger than the whole quota is refused even at zero use; the boundary fits exactly', () => {
  const { a } = replicas();
  const metered = key({ tokensPerDay: 100, tokensPerMonth: 1000 });
  expect(a.reserve(metered, 101)).toMatchObject({ scope: 'key', period: 'day' });
  expect(a.reserve(metered, 100)).toHaveProperty('release');
});

test('a quota spent, then left idle past the syncs that read it, stays spent: its counter sleeps (not read back) and wakes with its total', async () => {
  const { a, b, shared } = replicas({ acc_1: { tokensPerDay: 100, tokensPerMonth: null } });
  const metered = key({ tokensPerDay: 50, tokensPerMonth: null });
  a.check(metered);
  await a.sync();
  a.charge(metered, 60); // over both the key's 50 and, with b below, the account's 100
  b.check(metered);
  await b.sync();
  b.charge(metered, 50);
  await a.sync();
  await b.sync();
  await a.sync();
  expect(verdict(a, metered)).toMatchObject({ scope: 'key', period: 'day' });
  // Idle for more syncs than IDLE_SYNCS (120): nothing of it is read back any more.
  for (let i = 0; i < 125; i++) await a.sync();
  shared.asked.clear();
  await a.sync();
  expect([...shared.asked]).toEqual([]);
  // Used again: refused at once, by the key's and the account's totals as last read, before any sync.
  expect(verdict(a, metered)).toMatchObject({ scope: 'key', period: 'day' });
  expect(a.reserve(metered, 1)).toMatchObject({ scope: 'key' });
  const sibling = key(NONE, 'key_2');
  expect(verdict(a, sibling)).toMatchObject({ scope: 'account', period: 'day' });
  expect(a.reserve(sibling, 1)).toMatchObject({ scope: 'account' });
  await a.sync();
  expect(shared.asked.size).toBeGreaterThan(0); // awake: read back again
});

test('a refusal with less than 10 % of the limit left tells the limit reached, with the real use; an oversized request far from it does not', async () => {
  const crossings: Array<{ threshold: number; used: number }> = [];
  const tracker = new QuotaTracker(new SharedCounters(), { accountQuota: async () => new Map(), crossed: (crossing) => crossings.push(crossing) }, () => new Date('2026-11-27T10:00:00Z'), { thresholds: [0.5, 0.8, 1] });
  const limited = key({ tokensPerDay: 2000, tokensPerMonth: null });
  expect(tracker.reserve(limited, 5000)).toMatchObject({ scope: 'key', room: 2000 }); // far from the limit
  await tracker.sync();
  expect(crossings).toEqual([]);
  tracker.charge(limited, 1995);
  await tracker.sync();
  expect(crossings.map(({ threshold }) => threshold)).toEqual([0.5, 0.8]); // 99.75 %: not reached by use alone
  expect(tracker.reserve(limited, 110)).toMatchObject({ scope: 'key', room: 5 }); // what a request needs no longer fits
  await tracker.sync();
  expect(crossings.map(({ threshold, used }) => [threshold, used])).toEqual([[0.5, 1995], [0.8, 1995], [1, 1995]]);
});
