/**
 * The quota tracker over a real SQLite store, wired as the gateway wires it (the store's quota
 * counters, its daily usage, the usage recorder writing to it), with the quota counter calls counted:
 * keys without a quota (of their own or their account's) make no quota counter, so the store is never
 * asked about one, and a quota set on such a key, or its account, later holds from what the period
 * already used.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { QuotaTracker, type QuotaCounters } from '../../src/accounts/quota';
import { issueKey } from '../../src/auth/issue';
import { UsageRecorder } from '../../src/auth/usage-recorder';
import { SqliteKeyStore } from '../../src/store/sqlite/store';
import type { KeyRecord } from '../../src/store/types';

/** The store's quota counters, as the gateway uses them without Redis, with every scope asked about kept. */
class CountingQuotaCounters implements QuotaCounters {
  readonly added: string[] = [];
  readonly read: string[] = [];
  constructor(private readonly store: SqliteKeyStore) {}
  add(amounts: ReadonlyMap<string, number>) {
    this.added.push(...amounts.keys());
    return this.store.addQuotaUsage(amounts);
  }
  totals(scopes: readonly string[]) {
    this.read.push(...scopes);
    return this.store.quotaUsage(scopes);
  }
}

let dir: string;
let store: SqliteKeyStore;
beforeEach(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-quota-store-'));
  store = new SqliteKeyStore(path.join(dir, 'chatgate.db'));
});
afterEach(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

function gateway() {
  const counters = new CountingQuotaCounters(store);
  const usage = new UsageRecorder(store);
  const quota = new QuotaTracker(counters, {
    accountQuota: async (ids) => new Map((await store.listAccounts()).filter((account) => ids.includes(account.id)).map((account) => [account.id, account.quota] as const)),
    usage: (accountId, from, to) => store.usage(accountId, from, to),
  });
  /** One request with this key, as the stages and the proxy's usage event do it: false when refused. */
  const serve = (key: KeyRecord, tokens: number) => {
    const verdict = quota.check(key);
    if (verdict && verdict !== 'unread') return false; // unread: its read is this test's syncs
    usage.used(key);
    usage.ended(key, true);
    usage.tokens(key, tokens - 1, 1);
    quota.charge(key, tokens);
    return true;
  };
  return { counters, usage, quota, serve };
}

const quotaRows = () => store.sql.db.prepare('select scope, tokens from chatgate_quota_usage order by scope').all() as Array<{ scope: string; tokens: number }>;

test('keys with no quota, in an account with none, make no quota counter: the store is never asked about one', async () => {
  const { counters, usage, quota, serve } = gateway();
  const keys = await Promise.all(['a', 'b', 'c'].map(async (name) => (await issueKey(store, { name })).record));
  for (let round = 0; round < 4; round++) {
    for (const key of keys) expect(serve(key, 250)).toBe(true);
    await quota.sync();
  }
  await usage.flush();
  await quota.stop();
  expect(counters.added).toEqual([]);
  expect(counters.read).toEqual([]);
  expect(quotaRows()).toEqual([]);
  // Their usage is recorded all the same.
  const today = new Date().toISOString().slice(0, 10);
  expect((await store.usage(keys[0]!.accountId, today, today)).map((row) => row.promptTokens + row.completionTokens)).toEqual([1000, 1000, 1000]);
});

test('a quota set later on a key that had none holds from what the key already used today', async () => {
  const { counters, usage, quota, serve } = gateway();
  const { record } = await issueKey(store, { name: 'later' });
  for (let i = 0; i < 9; i++) expect(serve(record, 100)).toBe(true);
  await quota.sync();
  await usage.flush(); // every auth.lastUsedFlushMs in the gateway
  expect(counters.read).toEqual([]);

  const limited = (await store.update(record.id, { quota: { tokensPerDay: 1000 } }))!;
  expect(serve(limited, 50)).toBe(true); // the first use with the quota: its counter is made, the daily usage read on the next sync
  await usage.flush();
  await quota.sync();
  expect(serve(limited, 49)).toBe(true); // 950 of 1,000 before it, 999 after
  expect(serve(limited, 1)).toBe(true);
  expect(serve(limited, 1)).toBe(false); // 1,000
  await quota.sync();
  expect(serve(limited, 1)).toBe(false);
  await quota.stop();
  const today = new Date().toISOString().slice(0, 10);
  // The counter holds what was used with the quota; the daily usage, all of it.
  expect(quotaRows()).toEqual([{ scope: `key:${record.id}:d:${today}`, tokens: 100 }]);
  await usage.flush();
  expect((await store.usage(record.accountId, today, today))[0]).toMatchObject({ requests: 12, promptTokens: 1000 - 12, completionTokens: 12 });
});

test("a quota set later on an account holds from what all its keys already used this month", async () => {
  const { usage, quota, serve } = gateway();
  const keys = await Promise.all(['x', 'y'].map(async (name) => (await issueKey(store, { name })).record));
  for (let i = 0; i < 6; i++) for (const key of keys) expect(serve(key, 100)).toBe(true);
  await quota.sync();
  await usage.flush();
  expect(quotaRows()).toEqual([]);

  await store.updateAccount(keys[0]!.accountId, { quota: { tokensPerMonth: 1500 } });
  await quota.sync(); // the account's quota is read
  expect(serve(keys[0]!, 100)).toBe(true); // its counter is made
  await usage.flush();
  await quota.sync(); // the daily usage read: 1,300
  expect(serve(keys[1]!, 100)).toBe(true); // 1,400
  expect(serve(keys[1]!, 100)).toBe(true); // 1,500
  expect(serve(keys[0]!, 1)).toBe(false);
  await quota.stop();
  expect(quotaRows()).toEqual([{ scope: `account:${keys[0]!.accountId}:m:${new Date().toISOString().slice(0, 7)}`, tokens: 300 }]);
});
