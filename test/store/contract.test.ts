/**
 * One contract, every key store: SQLite (two connections to one file) and PostgreSQL (a real server, a fresh database), and the file store fake (test/fakes)
 * must behave the same, change notifications included.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { issueKey, rotateKey } from '../../src/auth/issue';
import { digestKey } from '../../src/auth/keys';
import { FileKeyStore } from '../fakes/file-store';
import { PostgresKeyStore } from '../../src/store/postgres/store';
import { SqliteKeyStore } from '../../src/store/sqlite/store';
import type { BreakdownQuery, KeyRecord, Store } from '../../src/store/types';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres';
import { notCalled, recorded } from './contract-methods';
import { eventually } from '../helpers/time';

interface Backend {
  /** Two handles on one store, as two processes or replicas would have. */
  open(): Promise<[Store, Store]>;
  cleanup(): Promise<void>;
}

const backends: Array<[string, () => Promise<Backend>]> = [
  [
    'file',
    async () => {
      const dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-contract-'));
      const file = path.join(dir, 'keys.json');
      return { open: async () => [new FileKeyStore(file), new FileKeyStore(file)], cleanup: async () => rmSync(dir, { recursive: true, force: true }) };
    },
  ],
  [
    'sqlite',
    async () => {
      const dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-contract-'));
      const file = path.join(dir, 'chatgate.db');
      const opened: Store[] = [];
      return {
        open: async () => {
          const pair: [Store, Store] = [new SqliteKeyStore(file), new SqliteKeyStore(file)];
          opened.push(...pair);
          return pair;
        },
        cleanup: async () => {
          await Promise.all(opened.map((store) => store.close()));
          rmSync(dir, { recursive: true, force: true });
        },
      };
    },
  ],
  [
    'postgres',
    async () => {
      const database: TestDatabase = await createTestDatabase();
      const opened: Store[] = [];
      return {
        open: async () => {
          const pair = await Promise.all([PostgresKeyStore.open(database.url), PostgresKeyStore.open(database.url)]);
          opened.push(...pair);
          return pair;
        },
        cleanup: async () => {
          await Promise.all(opened.map((store) => store.close()));
          await database.drop();
        },
      };
    },
  ],
];

describe.each(backends)('%s key store', (kind, makeBackend) => {
  let backend: Backend;
  let store: Store;
  let other: Store;
  const called = new Set<string>();
  const openRecorded = async (of: Backend) => (await of.open()).map((handle) => recorded(handle, called)) as [Store, Store];

  beforeAll(async () => {
    backend = await makeBackend();
    [store, other] = await openRecorded(backend);
  });
  afterAll(() => backend.cleanup());

  test('insert, then find by digest, get by id and list; the digest is all it keeps of the key', async () => {
    const { key, record } = await issueKey(store, { name: 'alpha', models: ['mock/*'], expiresAt: new Date('2099-01-01T00:00:00Z') });
    // findByDigest answers what authenticating needs; a store may leave the usage figures out of it.
    const { usage: _usage, lastUsedAt: _lastUsedAt, ...authenticating } = record;
    expect(await store.findByDigest(digestKey(key))).toMatchObject(authenticating);
    expect(await other.get(record.id)).toEqual(record);
    expect((await other.list()).map((r) => r.id)).toContain(record.id);
    expect(record).toMatchObject({ name: 'alpha', models: ['mock/*'], expiresAt: '2099-01-01T00:00:00.000Z', revokedAt: null, lastUsedAt: null });
    expect(await store.findByDigest(digestKey(`${key}x`))).toBeUndefined();
    expect(await store.get('key_missing')).toBeUndefined();
  });

  test('update changes only the fields given', async () => {
    const { record } = await issueKey(store, { name: 'beta' });
    const updated = await other.update(record.id, { models: ['vllm/*'], expiresAt: '2098-05-05T00:00:00.000Z' });
    expect(updated).toEqual({ ...record, models: ['vllm/*'], expiresAt: '2098-05-05T00:00:00.000Z' });
    expect(await store.update(record.id, { expiresAt: null, name: 'beta2' })).toEqual({ ...record, name: 'beta2', models: ['vllm/*'], expiresAt: null });
    expect(await store.update('key_missing', { name: 'x' })).toBeUndefined();
  });

  test('revoke once: a second revoke keeps the first time', async () => {
    const { record } = await issueKey(store, { name: 'gamma' });
    const first = await store.revoke(record.id, new Date('2030-01-01T00:00:00Z'));
    const second = await other.revoke(record.id, new Date('2031-01-01T00:00:00Z'));
    expect(first?.revokedAt).toBe('2030-01-01T00:00:00.000Z');
    expect(second?.revokedAt).toBe('2030-01-01T00:00:00.000Z');
    expect(await store.revoke('key_missing', new Date())).toBeUndefined();
  });

  test('rotate: same id and settings, the old key stops matching, the new one matches', async () => {
    const { key: old, record } = await issueKey(store, { name: 'delta', models: ['mock/*'] });
    const rotated = await rotateKey(other, record.id);
    expect(rotated?.record).toMatchObject({ id: record.id, name: 'delta', models: ['mock/*'] });
    expect(await store.findByDigest(digestKey(old))).toBeUndefined();
    expect((await store.findByDigest(digestKey(rotated!.key)))?.id).toBe(record.id);
  });

  test('listExpiring: the live keys whose expiry is in the window, soonest first', async () => {
    const at = (days: number) => new Date(Date.parse('2041-03-01T00:00:00Z') + days * 86_400_000);
    const { record: late } = await issueKey(store, { name: 'window late', expiresAt: at(5) });
    const { record: early } = await issueKey(store, { name: 'window early', expiresAt: at(2) });
    await issueKey(store, { name: 'window after', expiresAt: at(9) });
    const { record: gone } = await issueKey(store, { name: 'window revoked', expiresAt: at(3) });
    await store.revoke(gone.id, new Date());
    expect((await other.listExpiring(at(0), at(7))).map((key) => key.id)).toEqual([early.id, late.id]);
    expect(await other.listExpiring(at(5), at(6))).toEqual([]); // after `from`, at or before `to`
  });

  test('recordUse keeps the latest time per key and adds up the usage', async () => {
    const { record } = await issueKey(store, { name: 'epsilon' });
    const use = (at: string, requests: number, promptTokens: number, completionTokens: number) => [
      { keyId: record.id, accountId: record.accountId, date: at.slice(0, 10), at: new Date(at), requests, refused: requests + 1, costNanos: promptTokens * 7_000_001, promptTokens, completionTokens, model: '', endUser: '' },
    ];
    await store.recordUse(use('2030-01-02T00:00:00Z', 3, 100, 40));
    await other.recordUse(use('2030-01-01T00:00:00Z', 2, 10, 5));
    const after = await store.get(record.id);
    expect(after?.lastUsedAt).toBe('2030-01-02T00:00:00.000Z');
    expect(after?.usage).toEqual({ requests: 5, promptTokens: 110, completionTokens: 45 });
    await store.recordUse([]);
    expect(await store.usage(record.accountId, '2030-01-01', '2030-01-02')).toEqual([
      { date: '2030-01-01', accountId: record.accountId, keyId: record.id, requests: 2, refused: 3, costNanos: 70_000_010, promptTokens: 10, completionTokens: 5 },
      { date: '2030-01-02', accountId: record.accountId, keyId: record.id, requests: 3, refused: 4, costNanos: 700_000_100, promptTokens: 100, completionTokens: 40 },
    ]);
  });

  test('recordUse under a batch id counts the batch once, whichever handle sends it again, even both at once', async () => {
    const { record } = await issueKey(store, { name: 'eta' });
    const batch = [{ keyId: record.id, accountId: record.accountId, date: '2032-01-01', at: new Date('2032-01-01T00:00:00Z'), requests: 2, refused: 1, costNanos: 5, promptTokens: 30, completionTokens: 4, model: '', endUser: '' }];
    await store.recordUse(batch, 'batch-eta-1');
    await other.recordUse(batch, 'batch-eta-1');
    await Promise.all([store.recordUse(batch, 'batch-eta-2'), other.recordUse(batch, 'batch-eta-2')]);
    await store.recordUse(batch); // no id: always counted
    expect((await store.get(record.id))?.usage).toEqual({ requests: 6, promptTokens: 90, completionTokens: 12 });
    expect(await store.usage(record.accountId, '2032-01-01', '2032-01-01')).toEqual([
      { date: '2032-01-01', accountId: record.accountId, keyId: record.id, requests: 6, refused: 3, costNanos: 15, promptTokens: 90, completionTokens: 12 },
    ]);
  });

  test('server secrets: the first kept wins, for every process, however many make one at once', async () => {
    const made = (n: number) => ({ id: `client-tokens:2031010${kind.length}`, secret: `secret-${n}`, createdAt: `2031-01-01T00:00:0${n}.000Z` });
    expect(await other.getServerSecret(made(0).id)).toBeUndefined();
    const kept = await Promise.all([store.putServerSecret(made(1)), other.putServerSecret(made(2)), store.putServerSecret(made(3))]);
    expect(new Set(kept.map((secret) => secret.secret)).size).toBe(1);
    expect(await other.getServerSecret(made(0).id)).toEqual(kept[0]);
    expect(await store.putServerSecret(made(4))).toEqual(kept[0]);
  });

  test('listAudit: the newest first, of one account, of one action, since an instant', async () => {
    const event = (id: string, at: string, action: string, accountId: string | null = 'acc_audit') => ({ id, accountId, at, actor: 'admin-token', action, target: 'key_x', client: null, details: {} });
    await store.appendAudit(event('aud_a1', '2031-01-01T00:00:00.000Z', 'key.leaked'));
    for (let i = 0; i < 5; i++) await other.appendAudit(event(`aud_b${i}`, `2031-01-02T00:00:0${i}.000Z`, 'key.created'));
    await store.appendAudit(event('aud_a2', '2031-01-03T00:00:00.000Z', 'key.leaked'));
    await store.appendAudit(event('aud_c1', '2031-01-04T00:00:00.000Z', 'key.leaked', 'acc_elsewhere'));
    const ids = (events: Array<{ id: string }>) => events.map((e) => e.id);
    expect(ids(await other.listAudit('acc_audit', 3))).toEqual(['aud_a2', 'aud_b4', 'aud_b3']);
    // The leaks are found however many other events came after them; the account's own only.
    expect(ids(await other.listAudit('acc_audit', 3, { action: 'key.leaked' }))).toEqual(['aud_a2', 'aud_a1']);
    expect(ids(await store.listAudit('acc_audit', 10, { action: 'key.leaked', since: '2031-01-02T00:00:00.000Z' }))).toEqual(['aud_a2']);
    expect(ids(await store.listAudit('acc_audit', 10, { since: '2031-01-02T00:00:04.000Z' }))).toEqual(['aud_a2', 'aud_b4']);
    expect(ids(await store.listAudit(null, 10, { action: 'key.leaked', since: '2031-01-02T00:00:00.000Z' }))).toEqual(['aud_c1', 'aud_a2']);
  });

  test('the ledger breaks a day down by model and end user; the daily rows are its sums; another account sees none of it', async () => {
    const [k1, k2] = await Promise.all(['ledger-1', 'ledger-2'].map(async (name) => (await issueKey(store, { name })).record));
    await store.createAccount({ id: 'acc_ledger_other', name: 'ledger-other', createdAt: new Date().toISOString(), quota: { tokensPerDay: null, tokensPerMonth: null }, budget: { perDay: null, perMonth: null } });
    const foreign = (await issueKey(store, { name: 'ledger-foreign', accountId: 'acc_ledger_other' })).record;
    const use = (key: KeyRecord, model: string, endUser: string, requests: number, refused: number, promptTokens: number, completionTokens: number, costNanos: number, date = '2033-03-01') =>
      ({ keyId: key.id, accountId: key.accountId, date, at: new Date(`${date}T08:00:00Z`), requests, refused, promptTokens, completionTokens, costNanos, model, endUser });
    // One pair twice in a batch, the same pair from the other handle, a use that counted nothing (a key's last use), another day, another account.
    await store.recordUse([use(k1!, 'p/a', 'eu_1', 1, 0, 6, 3, 60), use(k1!, 'p/a', 'eu_1', 1, 0, 4, 2, 40), use(k1!, 'p/a', 'eu_2', 1, 0, 1, 1, 0), use(k1!, '', '', 0, 0, 0, 0, 0)]);
    await other.recordUse([use(k1!, 'p/b', 'eu_1', 1, 0, 100, 0, 50), use(k2!, '', '', 0, 3, 0, 0, 0), use(k1!, 'p/a', 'eu_1', 9, 0, 9, 9, 9, '2033-03-02'), use(foreign, 'p/a', 'eu_1', 5, 0, 5, 5, 5000)]);
    expect((await other.usage(k1!.accountId, '2033-03-01', '2033-03-01')).find((day) => day.keyId === k1!.id)).toMatchObject({ requests: 4, refused: 0, promptTokens: 111, completionTokens: 6, costNanos: 150 });
    const share = (group: string, requests: number, refused: number, promptTokens: number, completionTokens: number, costNanos: number) => ({ group, requests, refused, promptTokens, completionTokens, costNanos });
    const day = (query: Omit<BreakdownQuery, 'limit'>, limit = 100) => store.usageBreakdown(k1!.accountId, '2033-03-01', '2033-03-01', { ...query, limit });
    // Largest cost first, then tokens, then requests.
    expect(await day({ by: 'model' })).toEqual([share('p/a', 3, 0, 11, 6, 100), share('p/b', 1, 0, 100, 0, 50), share('', 0, 3, 0, 0, 0)]);
    expect(await day({ by: 'endUser' })).toEqual([share('eu_1', 3, 0, 110, 5, 150), share('eu_2', 1, 0, 1, 1, 0), share('', 0, 3, 0, 0, 0)]);
    expect(await day({ by: 'endUser', keyId: k2!.id })).toEqual([share('', 0, 3, 0, 0, 0)]);
    expect(await day({ by: 'model', endUser: 'eu_1' })).toEqual([share('p/a', 2, 0, 10, 5, 100), share('p/b', 1, 0, 100, 0, 50)]);
    expect(await day({ by: 'model' }, 1)).toEqual([share('p/a', 3, 0, 11, 6, 100)]);
    expect(await other.usageBreakdown(k1!.accountId, '2033-03-01', '2033-03-02', { by: 'endUser', endUser: 'eu_1', limit: 10 })).toEqual([share('eu_1', 12, 0, 119, 14, 159)]);
  });

  test('whole months are read from their sums, the rest day by day: the same figures either way', async () => {
    const { record } = await issueKey(store, { name: 'months' });
    // Two months that are over (three and two months back), on their first, middle and last days.
    const first = (monthsBack: number) => { const now = new Date(); return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - monthsBack, 1)).toISOString().slice(0, 10); };
    const [m1, m2, m3] = [first(3), first(2), first(1)] as [string, string, string];
    const dayOf = (month: string, day: number) => `${month.slice(0, 8)}${String(day).padStart(2, '0')}`;
    const lastOf = (month: string) => `${new Date(Date.parse(`${month}T00:00:00Z`) + 31 * 86_400_000).toISOString().slice(0, 8)}01`;
    const end1 = new Date(Date.parse(`${lastOf(m1)}T00:00:00Z`) - 86_400_000).toISOString().slice(0, 10);
    const use = (date: string, endUser: string, requests: number) => ({ keyId: record.id, accountId: record.accountId, date, at: new Date(`${date}T00:00:00Z`), requests, refused: 0, promptTokens: requests, completionTokens: 0, costNanos: requests, model: 'p/m', endUser });
    await store.recordUse([use(m1, 'eu_a', 1), use(dayOf(m1, 15), 'eu_a', 2), use(end1, 'eu_b', 4)]);
    await other.recordUse([use(m2, 'eu_a', 8), use(dayOf(m2, 20), 'eu_b', 16)]);
    const shares = async (from: string, to: string) => new Map((await other.usageBreakdown(record.accountId, from, to, { by: 'endUser', keyId: record.id, limit: 10 })).map((share) => [share.group, share.requests]));
    expect(await shares(m1, end1)).toEqual(new Map([['eu_a', 3], ['eu_b', 4]])); // m1 whole
    expect(await shares(m1, new Date(Date.parse(`${m3}T00:00:00Z`) - 86_400_000).toISOString().slice(0, 10))).toEqual(new Map([['eu_a', 11], ['eu_b', 20]])); // m1 and m2 whole
    expect(await shares(dayOf(m1, 2), dayOf(m2, 19))).toEqual(new Map([['eu_a', 10], ['eu_b', 4]])); // both partly
    expect(await shares(dayOf(m1, 15), dayOf(m1, 15))).toEqual(new Map([['eu_a', 2]]));
  });

  test('pruneUsage deletes the months before the one a date is in, at most `limit` rows a call', async () => {
    const { record } = await issueKey(store, { name: 'pruned' });
    const first = (monthsBack: number) => { const now = new Date(); return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - monthsBack, 1)).toISOString().slice(0, 10); };
    const [old, kept] = [first(5), first(4)] as [string, string];
    const next = (day: string) => new Date(Date.parse(`${day}T00:00:00Z`) + 86_400_000).toISOString().slice(0, 10);
    const use = (date: string, endUser: string) => ({ keyId: record.id, accountId: record.accountId, date, at: new Date(`${date}T00:00:00Z`), requests: 1, refused: 0, promptTokens: 1, completionTokens: 1, costNanos: 0, model: 'p/a', endUser });
    await store.recordUse([use(old, 'eu_a'), use(old, 'eu_b'), use(next(old), 'eu_a'), use(kept, 'eu_a'), use(next(kept), 'eu_c')]);
    let calls = 0;
    for (let deleted = -1; deleted !== 0; calls++) {
      deleted = await other.pruneUsage(next(kept), 3);
      expect(deleted).toBeLessThanOrEqual(3);
    }
    expect(calls).toBeGreaterThan(2); // five rows at least were due: in calls of three
    expect((await store.usage(record.accountId, old, next(kept))).map((day) => day.date)).toEqual([kept, next(kept)]);
    // The old month is gone whole, read by day or as a month; the kept month is kept whole.
    const oldEnd = new Date(Date.parse(`${kept}T00:00:00Z`) - 86_400_000).toISOString().slice(0, 10);
    expect(await store.usageBreakdown(record.accountId, old, next(old), { by: 'endUser', limit: 10 })).toEqual([]);
    expect(await store.usageBreakdown(record.accountId, old, oldEnd, { by: 'endUser', limit: 10 })).toEqual([]);
    const keptEnd = new Date(Date.parse(`${first(3)}T00:00:00Z`) - 86_400_000).toISOString().slice(0, 10);
    const share = (group: string) => ({ group, requests: 1, refused: 0, promptTokens: 1, completionTokens: 1, costNanos: 0 });
    expect(await store.usageBreakdown(record.accountId, kept, keptEnd, { by: 'endUser', limit: 10 })).toEqual([share('eu_a'), share('eu_c')]);
    expect(await store.usageBreakdown(record.accountId, kept, next(kept), { by: 'endUser', limit: 10 })).toEqual([share('eu_a'), share('eu_c')]);
  });

  test('recordUse takes a batch: several keys, one key on two days, all added up', async () => {
    const keys = await Promise.all(['zeta-1', 'zeta-2', 'zeta-3'].map(async (name) => (await issueKey(store, { name })).record));
    const uses = (date: string, tokens: number) => keys.map((record, i) => ({ keyId: record.id, accountId: record.accountId, date, at: new Date(`${date}T12:00:00Z`), requests: 1, refused: 0, costNanos: 0, promptTokens: tokens + i, completionTokens: 1, model: '', endUser: '' }));
    await store.recordUse([...uses('2031-05-01', 10), ...uses('2031-05-02', 20)]);
    await other.recordUse(uses('2031-05-02', 100));
    for (const [i, record] of keys.entries()) {
      expect((await store.get(record.id))?.usage).toEqual({ requests: 3, promptTokens: 130 + 3 * i, completionTokens: 3 });
      expect((await store.get(record.id))?.lastUsedAt).toBe('2031-05-02T12:00:00.000Z');
    }
    const days = (await store.usage(keys[0]!.accountId, '2031-05-01', '2031-05-02')).filter((row) => row.keyId === keys[1]!.id);
    expect(days).toEqual([
      { date: '2031-05-01', accountId: keys[1]!.accountId, keyId: keys[1]!.id, requests: 1, refused: 0, costNanos: 0, promptTokens: 11, completionTokens: 1 },
      { date: '2031-05-02', accountId: keys[1]!.accountId, keyId: keys[1]!.id, requests: 2, refused: 0, costNanos: 0, promptTokens: 122, completionTokens: 2 },
    ]);
  });

  test('quota counters: added up across handles, read back as one batch, 0 for one never counted', async () => {
    const today = new Date().toISOString().slice(0, 10);
    const scopes = Array.from({ length: 1000 }, (_, i) => `key:contract_${i}:d:${today}`);
    const month = `account:contract:m:${today.slice(0, 7)}`;
    await store.addQuotaUsage(new Map([...scopes.map((scope, i) => [scope, i + 1] as const), [month, 5]]));
    await other.addQuotaUsage(new Map([[scopes[7]!, 100], [month, 6]]));
    await store.addQuotaUsage(new Map());
    const never = `key:contract_never:d:${today}`;
    const totals = await other.quotaUsage([...scopes, month, never]);
    expect(totals.size).toBe(1002);
    expect(totals.get(scopes[0]!)).toBe(1);
    expect(totals.get(scopes[7]!)).toBe(108);
    expect(totals.get(scopes[999]!)).toBe(1000);
    expect(totals.get(month)).toBe(11);
    expect(totals.get(never)).toBe(0);
    expect(await store.quotaUsage([])).toEqual(new Map());
  });

  test('per-key limits are kept, changed field by field, and announced', async () => {
    const { record } = await issueKey(store, { name: 'limited', rateLimit: { requestsPerMinute: 10 } });
    expect(record.rateLimit).toEqual({ requestsPerMinute: 10, tokensPerMinute: null, maxConcurrent: null });
    const updated = await other.update(record.id, { rateLimit: { tokensPerMinute: 5000 } });
    expect(updated?.rateLimit).toEqual({ requestsPerMinute: 10, tokensPerMinute: 5000, maxConcurrent: null });
    expect((await store.get(record.id))?.rateLimit).toEqual(updated?.rateLimit);
  });

  test('allowed client addresses are kept, replaced whole, emptied, and a change of them is announced', async () => {
    const { key, record } = await issueKey(store, { name: 'fenced', allowedIps: ['10.0.0.0/8', '2001:db8::/32'] });
    expect((await other.findByDigest(digestKey(key)))?.allowedIps).toEqual(['10.0.0.0/8', '2001:db8::/32']);
    const seen: string[] = [];
    const watcher = kind === 'file' ? store : other;
    watcher.onChange((digests) => seen.push(...(digests ?? ['*'])));
    expect((await store.update(record.id, { allowedIps: ['192.0.2.7/32'] }))?.allowedIps).toEqual(['192.0.2.7/32']);
    await eventually(() => (seen.includes(digestKey(key)) ? true : undefined), 2000);
    expect((await other.get(record.id))?.allowedIps).toEqual(['192.0.2.7/32']);
    expect((await store.update(record.id, { allowedIps: [] }))?.allowedIps).toEqual([]);
    expect((await other.get(record.id))?.allowedIps).toEqual([]);
  });

  test('a change through one handle is announced with the changed digest', async () => {
    const { key, record } = await issueKey(store, { name: 'zeta' });
    const seen: string[] = [];
    // The file store announces its own writes; PostgreSQL announces everyone's, to every listener.
    const watcher = kind === 'file' ? store : other;
    watcher.onChange((digests) => seen.push(...(digests ?? ['*'])));
    await store.revoke(record.id, new Date());
    await eventually(() => (seen.includes(digestKey(key)) ? true : undefined), 2000);
    expect(seen).toContain(digestKey(key));
  });

  test('ping answers while the store is readable', async () => {
    await expect(store.ping()).resolves.toBeUndefined();
  });

  test('hasKeys says whether the store holds any key (a revoked one counts); changeFeedLive holds once onChange listens', async () => {
    const fresh = await makeBackend(); // an empty store of its own
    try {
      const [a, b] = await openRecorded(fresh);
      expect(await a.hasKeys()).toBe(false);
      const { record } = await issueKey(b, { name: 'first' });
      expect(await a.hasKeys()).toBe(true);
      await b.revoke(record.id, new Date());
      expect(await a.hasKeys()).toBe(true);
      a.onChange(() => undefined);
      expect(a.changeFeedLive).toBe(true);
      // Closing one handle (one process ending) leaves the store to the others.
      await a.close();
      expect((await b.get(record.id))?.revokedAt).not.toBeNull();
    } finally {
      await fresh.cleanup();
    }
  });

  test('every method this file answers for was called on this backend', () => {
    expect(notCalled('contract', called)).toEqual([]);
  });
});

describe('PostgreSQL migrations', () => {
  test('replicas starting together apply each migration once; a restart applies nothing new', async () => {
    const database = await createTestDatabase();
    try {
      const stores = await Promise.all(Array.from({ length: 4 }, () => PostgresKeyStore.open(database.url)));
      await Promise.all(stores.map((s) => s.close()));
      await (await PostgresKeyStore.open(database.url)).close();
      const client = new pg.Client({ connectionString: database.url });
      await client.connect();
      const { rows } = await client.query('select version from chatgate_schema_migrations');
      const index = await client.query("select indexdef from pg_indexes where tablename = 'chatgate_keys' and indexname = 'chatgate_keys_digest'");
      await client.end();
      expect(rows.map((r) => r.version).sort((a, b) => a - b)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18]);
      expect(index.rows[0]?.indexdef).toMatch(/UNIQUE INDEX .* USING btree \(digest\)/);
    } finally {
      await database.drop();
    }
  });
});

describe('PostgreSQL connections per process', () => {
  let database: TestDatabase;
  let admin: pg.Client;
  beforeAll(async () => {
    database = await createTestDatabase();
    admin = new pg.Client({ connectionString: database.url });
    await admin.connect();
  });
  afterAll(async () => {
    await admin?.end();
    await database?.drop();
  });

  /** Connections to the test database a burst of 40 concurrent lookups opened, besides the test's own. */
  async function connectionsAfterBurst(store: PostgresKeyStore): Promise<number> {
    await Promise.all(Array.from({ length: 40 }, (_, i) => store.findByDigest(digestKey(`cgk_burst_${i}`))));
    const { rows } = await admin.query<{ n: string }>('select count(*) as n from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()');
    return Number(rows[0]!.n);
  }

  test('keyStore.poolSize bounds them: the pool plus the one that listens for key changes', async () => {
    const small = await PostgresKeyStore.open(database.url, undefined, 2);
    const smallCount = await connectionsAfterBurst(small);
    await small.close();
    const standard = await PostgresKeyStore.open(database.url);
    const standardCount = await connectionsAfterBurst(standard);
    await standard.close();
    expect(smallCount).toBeLessThanOrEqual(3);
    expect(standardCount).toBeGreaterThan(3); // the same burst does open more when the pool allows it
  });
});
