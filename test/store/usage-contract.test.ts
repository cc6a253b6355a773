/**
 * Usage, its ledger, quota counters and server secrets, on every backend (contract-backends.ts),
 * through two handles: daily rows within the dates (both inclusive) in date and key order; breakdowns
 * with their limit and order (cost, then tokens, then requests, then the group); pruning whole months
 * at most `limit` rows a call; quota counters added up across handles and writers at once; the first
 * server secret kept wins.
 */
import type { AccountStore, KeyUse } from '../../src/store/types';
import { CONTRACT_BACKENDS, type ContractBackend, withBackend } from './contract-backends';
import { notCalled } from './contract-methods';

const use = (keyId: string, date: string, counts: Partial<KeyUse> = {}, accountId = 'acc_u'): KeyUse => ({
  keyId,
  accountId,
  date,
  at: new Date(`${date}T10:00:00Z`),
  requests: 1,
  refused: 0,
  promptTokens: 10,
  completionTokens: 5,
  costNanos: 100,
  model: 'p/m',
  endUser: '',
  ...counts,
});
const day = (keyId: string, date: string, requests: number, promptTokens: number, completionTokens: number, costNanos: number, refused = 0) => ({ date, accountId: 'acc_u', keyId, requests, refused, costNanos, promptTokens, completionTokens });
const share = (group: string, requests: number, promptTokens: number, completionTokens: number, costNanos: number) => ({ group, requests, refused: 0, promptTokens, completionTokens, costNanos });

describe.each(CONTRACT_BACKENDS)('%s: usage, quota counters, server secrets', (_kind, open) => {
  let backend: ContractBackend;
  let store: AccountStore;
  let other: AccountStore;
  withBackend(open, (opened) => {
    backend = opened;
    ({ store, other } = opened);
  });

  test('usage: the days from `from` to `to`, both inclusive, of that account only, by date then key, each day and key summed', async () => {
    // Recorded out of order, and in two batches.
    await backend.recordUse([use('key_b', '2035-03-02'), use('key_a', '2035-03-02', { requests: 2, refused: 1 }), use('key_a', '2035-03-01'), use('key_a', '2035-02-28'), use('key_a', '2035-03-03')]);
    await backend.recordUse([use('key_a', '2035-03-02', { promptTokens: 1, completionTokens: 1, costNanos: 7 }), use('key_e', '2035-03-02', {}, 'acc_elsewhere')]);
    expect(await other.usage('acc_u', '2035-03-01', '2035-03-02')).toEqual([day('key_a', '2035-03-01', 1, 10, 5, 100), day('key_a', '2035-03-02', 3, 11, 6, 107, 1), day('key_b', '2035-03-02', 1, 10, 5, 100)]);
    expect((await store.usage('acc_u', '2035-03-03', '2035-03-03')).map((row) => row.date)).toEqual(['2035-03-03']);
    expect(await store.usage('acc_u', '2035-03-04', '2035-03-31')).toEqual([]);
    expect(await store.usage('acc_nobody', '2035-01-01', '2035-12-31')).toEqual([]);
  });

  test('usageBreakdown: the largest cost first, then tokens, then requests, then the group; its limit; narrowed to a key or an end user', async () => {
    const at = '2036-04-10';
    await backend.recordUse([
      use('key_x', at, { model: 'p/cheap', endUser: 'eu_1', costNanos: 5, promptTokens: 100, completionTokens: 0 }),
      use('key_x', at, { model: 'p/dear', endUser: 'eu_2', costNanos: 900, promptTokens: 1, completionTokens: 0 }),
      use('key_y', at, { model: 'p/tie-b', endUser: 'eu_1', costNanos: 50, promptTokens: 7, completionTokens: 3, requests: 2 }),
      use('key_y', at, { model: 'p/tie-a', endUser: 'eu_3', costNanos: 50, promptTokens: 7, completionTokens: 3, requests: 2 }),
      use('key_y', at, { model: 'p/tokens', endUser: 'eu_3', costNanos: 50, promptTokens: 20, completionTokens: 0, requests: 1 }),
      use('key_y', at, { model: 'p/requests', endUser: 'eu_3', costNanos: 50, promptTokens: 5, completionTokens: 5, requests: 3 }),
    ]);
    const breakdown = (query: Parameters<AccountStore['usageBreakdown']>[3]) => other.usageBreakdown('acc_u', at, at, query);
    expect(await breakdown({ by: 'model', limit: 10 })).toEqual([
      share('p/dear', 1, 1, 0, 900),
      share('p/tokens', 1, 20, 0, 50),
      share('p/requests', 3, 5, 5, 50),
      share('p/tie-a', 2, 7, 3, 50),
      share('p/tie-b', 2, 7, 3, 50),
      share('p/cheap', 1, 100, 0, 5),
    ]);
    expect((await breakdown({ by: 'model', limit: 2 })).map((s) => s.group)).toEqual(['p/dear', 'p/tokens']);
    expect((await breakdown({ by: 'model', limit: 1, keyId: 'key_x' })).map((s) => s.group)).toEqual(['p/dear']);
    expect(await breakdown({ by: 'endUser', limit: 10 })).toEqual([share('eu_2', 1, 1, 0, 900), share('eu_3', 6, 32, 8, 150), share('eu_1', 3, 107, 3, 55)]);
    expect(await breakdown({ by: 'endUser', limit: 10, endUser: 'eu_1', keyId: 'key_y' })).toEqual([share('eu_1', 2, 7, 3, 50)]);
    expect(await breakdown({ by: 'endUser', limit: 10, endUser: 'EU_1' })).toEqual([]);
    expect(await store.usageBreakdown('acc_u', '2036-04-11', '2036-04-30', { by: 'model', limit: 10 })).toEqual([]);
  });

  test('pruneUsage: whole months before the one `before` is in, at most `limit` rows a call, until none is left to delete', async () => {
    // The month before last (due), and last month (kept: `before` is in it); within the days every store keeps.
    const now = new Date();
    const month = (back: number, dayOf: number) => new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - back, dayOf)).toISOString().slice(0, 10);
    await backend.recordUse([use('key_p', month(2, 5), { endUser: 'eu_1' }), use('key_p', month(2, 5), { endUser: 'eu_2' }), use('key_p', month(2, 20), { endUser: 'eu_1' }), use('key_p', month(1, 1), { endUser: 'eu_1' }), use('key_p', month(1, 10), { endUser: 'eu_2' })]);
    let calls = 0;
    for (let deleted = -1; deleted !== 0; calls++) {
      deleted = await (calls % 2 ? store : other).pruneUsage(month(1, 15), 2);
      expect(deleted).toBeGreaterThanOrEqual(0);
      expect(deleted).toBeLessThanOrEqual(2);
    }
    expect(calls).toBeGreaterThan(3); // five rows at least were due (two daily, three in the ledger), two a call
    expect((await other.usage('acc_u', month(2, 1), month(1, 28))).map((row) => row.date)).toEqual([month(1, 1), month(1, 10)]);
    expect(await other.usageBreakdown('acc_u', month(2, 1), month(1, 0), { by: 'endUser', limit: 10 })).toEqual([]);
    expect(await other.usageBreakdown('acc_u', month(1, 1), month(0, 0), { by: 'endUser', limit: 10 })).toEqual([share('eu_1', 1, 10, 5, 100), share('eu_2', 1, 10, 5, 100)]);
    expect(await store.pruneUsage(month(1, 15), 100)).toBe(0);
  });

  test('quota counters: added up across handles and writers at once, read back in one call, 0 for one never counted', async () => {
    const today = new Date().toISOString().slice(0, 10);
    const [dayScope, monthScope] = [`key:uc:d:${today}`, `account:uc:m:${today.slice(0, 7)}`];
    await Promise.all(Array.from({ length: 10 }, (_, i) => (i % 2 ? store : other).addQuotaUsage(new Map([[dayScope, i + 1], [monthScope, 1]]))));
    await store.addQuotaUsage(new Map());
    const totals = await other.quotaUsage([monthScope, `key:never:d:${today}`, dayScope]);
    expect(totals).toEqual(new Map([[monthScope, 10], [`key:never:d:${today}`, 0], [dayScope, 55]]));
    expect(await store.quotaUsage([])).toEqual(new Map());
  });

  test('server secrets: undefined until made; of several made at once through two handles, one is kept and every handle gets it', async () => {
    const id = 'client-tokens:20360101';
    expect(await store.getServerSecret(id)).toBeUndefined();
    const made = (n: number) => ({ id, secret: `secret-${n}`, createdAt: `2036-01-01T00:00:0${n}.000Z` });
    const kept = await Promise.all([store.putServerSecret(made(1)), other.putServerSecret(made(2)), store.putServerSecret(made(3))]);
    expect(new Set(kept.map((secret) => secret.secret)).size).toBe(1);
    expect([made(1), made(2), made(3)]).toContainEqual(kept[0]);
    expect(await other.getServerSecret(id)).toEqual(kept[0]);
    expect(await store.putServerSecret(made(4))).toEqual(kept[0]);
    expect(await store.getServerSecret('client-tokens:20360102')).toBeUndefined();
  });

  test('every method this file answers for was called on this backend', () => {
    expect(notCalled('usage-contract', backend.called)).toEqual([]);
  });
});
