/**
 * The quota tracker, with shared counters in memory standing for Redis or the key store, two
 * trackers for two replicas, and a clock the test moves.
 */
import { QuotaTracker, scopeName, secondsToNext, type QuotaCounters } from '../../src/accounts/quota';
import type { CallerKey } from '../../src/context';
import type { Quota } from '../../src/store/types';

class SharedCounters implements QuotaCounters {
  readonly values = new Map<string, number>();
  failing = false;
  async add(amounts: ReadonlyMap<string, number>) {
    if (this.failing) throw new Error('counters away');
    for (const [scope, tokens] of amounts) this.values.set(scope, (this.values.get(scope) ?? 0) + tokens);
  }
  async totals(scopes: readonly string[]) {
    if (this.failing) throw new Error('counters away');
    return new Map(scopes.map((scope) => [scope, this.values.get(scope) ?? 0]));
  }
}

const NONE: Quota = { tokensPerDay: null, tokensPerMonth: null };
const key = (quota: Quota = NONE, id = 'key_1', accountId = 'acc_1'): CallerKey => ({ id, name: id, accountId, models: [], endpoints: [], rateLimit: { requestsPerMinute: null, tokensPerMinute: null, maxConcurrent: null }, quota });

function replicas(accountQuotas: Record<string, Quota> = {}, at = new Date('2026-11-27T10:00:00Z')) {
  const shared = new SharedCounters();
  const clock = { at };
  const make = () =>
    new QuotaTracker(shared, { accountQuota: async (ids) => new Map(ids.filter((id) => accountQuotas[id]).map((id) => [id, accountQuotas[id]!])) }, () => clock.at);
  return { shared, clock, a: make(), b: make() };
}

test("a key's daily quota: refused once its tokens reach it, with Retry-After until midnight UTC", async () => {
  const { a } = replicas();
  const limited = key({ tokensPerDay: 100, tokensPerMonth: null });
  expect(a.check(limited)).toBeUndefined();
  a.charge(limited, 60);
  expect(a.check(limited)).toBeUndefined();
  a.charge(limited, 40);
  expect(a.check(limited)).toEqual({ scope: 'key', period: 'day', retryAfterSeconds: 14 * 3600 });
});

test('reached through one replica, refused by the other after a sync of each', async () => {
  const { a, b } = replicas();
  const limited = key({ tokensPerDay: null, tokensPerMonth: 1000 });
  a.charge(limited, 1000);
  expect(b.check(limited)).toBeUndefined(); // b has not heard yet
  await a.sync(); // a adds its use to the shared counters
  await b.sync(); // b reads them back
  expect(b.check(limited)).toMatchObject({ scope: 'key', period: 'month' });
});

test("an account's quota holds over all its keys, read from the store on a sync", async () => {
  const { a } = replicas({ acc_1: { tokensPerDay: 50, tokensPerMonth: null } });
  const first = key(NONE, 'key_1');
  const second = key(NONE, 'key_2');
  expect(a.check(first)).toBeUndefined(); // the account is now in use: its quota is read on the next sync
  await a.sync();
  a.charge(first, 30);
  a.charge(second, 20);
  expect(a.check(second)).toMatchObject({ scope: 'account', period: 'day' });
  expect(a.check(key(NONE, 'key_3', 'acc_2'))).toBeUndefined(); // another account is not touched
});

test('the period turns: the next day starts from zero', async () => {
  const { a, clock } = replicas();
  const limited = key({ tokensPerDay: 10, tokensPerMonth: null });
  a.charge(limited, 10);
  expect(a.check(limited)).toBeDefined();
  clock.at = new Date('2026-11-28T00:00:01Z');
  expect(a.check(limited)).toBeUndefined();
});

test('counters away: what was used is kept, counted here meanwhile, and added once they are back', async () => {
  const { a, shared } = replicas();
  const limited = key({ tokensPerDay: 100, tokensPerMonth: null });
  shared.failing = true;
  a.charge(limited, 70);
  await a.sync();
  a.charge(limited, 30);
  expect(a.check(limited)).toBeDefined(); // still counted here
  shared.failing = false;
  await a.sync();
  expect(shared.values.get(scopeName('key', 'key_1', 'day', new Date('2026-11-27T10:00:00Z')))).toBe(100);
  await a.sync();
  expect(shared.values.get(scopeName('key', 'key_1', 'day', new Date('2026-11-27T10:00:00Z')))).toBe(100); // added once
});

test('secondsToNext: to the next UTC day and month', () => {
  expect(secondsToNext('day', new Date('2026-11-27T23:59:30Z'))).toBe(30);
  expect(secondsToNext('month', new Date('2026-12-31T23:00:00Z'))).toBe(3600);
});
