/**
 * PostgreSQL keeps what keys used in usage rows (chatgate_key_usage, chatgate_usage_daily), never in
 * the key rows: a usage flush every 10 s for every key in use rewrote (and bloated) the key table.
 * The key rows stay as they were (same xmin and ctid: not a single new row version), the key-changed
 * trigger stays silent, and get/list still answer each key's totals and last use.
 */
import pg from 'pg';
import { issueKey } from '../../src/auth/issue';
import { UsageRecorder } from '../../src/auth/usage-recorder';
import { PostgresKeyStore } from '../../src/store/postgres/store';
import type { KeyRecord } from '../../src/store/types';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres';
import { eventually } from '../helpers/time';

let database: TestDatabase;
let store: PostgresKeyStore;
let other: PostgresKeyStore;
let client: pg.Client;

beforeAll(async () => {
  database = await createTestDatabase();
  [store, other] = await Promise.all([PostgresKeyStore.open(database.url), PostgresKeyStore.open(database.url)]);
  client = new pg.Client({ connectionString: database.url });
  await client.connect();
});
afterAll(async () => {
  await client?.end();
  await Promise.all([store?.close(), other?.close()]);
  await database?.drop();
});

/** Each key row's physical identity: a new row version (any update) changes both. */
async function rowVersions(ids: string[]): Promise<Map<string, string>> {
  const { rows } = await client.query<{ id: string; version: string }>("select id, xmin::text || '/' || ctid::text as version from chatgate_keys where id = any($1)", [ids]);
  return new Map(rows.map((row) => [row.id, row.version]));
}

test('a usage flush writes usage rows only: the key rows keep their row version, the trigger stays silent, the totals add up', async () => {
  const keys = await Promise.all(['a', 'b', 'c'].map((name) => issueKey(store, { name })));
  const ids = keys.map(({ record }) => record.id);
  const before = await rowVersions(ids);

  const heard: string[] = [];
  const listener = new pg.Client({ connectionString: database.url });
  await listener.connect();
  listener.on('notification', (message) => heard.push(message.payload ?? ''));
  await listener.query('listen chatgate_keys');

  const recorder = new UsageRecorder(store);
  const at = new Date('2030-03-04T05:06:07Z');
  for (const { record } of keys) {
    recorder.used(record, at);
    recorder.ended(record, true, at);
    recorder.used(record, new Date(at.getTime() + 1000));
    recorder.ended(record, true, new Date(at.getTime() + 1000));
    recorder.tokens(record, 100, 20, at);
  }
  await recorder.flush();
  const second = new UsageRecorder(other); // the next day, through the other replica
  second.used(keys[0]!.record, new Date('2030-03-05T00:00:00Z'));
  second.ended(keys[0]!.record, true, new Date('2030-03-05T00:00:00Z'));
  await second.flush();

  expect(await rowVersions(ids)).toEqual(before);

  // Notifications arrive in commit order: once a later key's insert is heard, any the flush made would have been too.
  const marker = await issueKey(store, { name: 'marker' });
  await eventually(() => (heard.includes(marker.record.digest) ? true : undefined));
  await listener.end();
  expect(heard).toEqual([marker.record.digest]);

  const first = await other.get(ids[0]!);
  expect(first?.usage).toEqual({ requests: 3, promptTokens: 100, completionTokens: 20 });
  expect(first?.lastUsedAt).toBe('2030-03-05T00:00:00.000Z');
  const listed = new Map((await store.list()).map((record) => [record.id, record]));
  expect(listed.get(ids[1]!)).toMatchObject({ usage: { requests: 2, promptTokens: 100, completionTokens: 20 }, lastUsedAt: '2030-03-04T05:06:08.000Z' });
  expect(listed.get(marker.record.id)).toMatchObject({ usage: { requests: 0, promptTokens: 0, completionTokens: 0 }, lastUsedAt: null });
  expect(await store.usage(keys[0]!.record.accountId, '2030-03-04', '2030-03-05')).toEqual(
    expect.arrayContaining([
      { date: '2030-03-04', accountId: keys[0]!.record.accountId, keyId: ids[0], requests: 2, refused: 0, costNanos: 0, promptTokens: 100, completionTokens: 20 },
      { date: '2030-03-05', accountId: keys[0]!.record.accountId, keyId: ids[0], requests: 1, refused: 0, costNanos: 0, promptTokens: 0, completionTokens: 0 },
    ]),
  );
});

test('a thousand flushes update no key row: pg_stat_user_tables counts only the one rename made beside them', async () => {
  const { record } = await issueKey(store, { name: 'busy' });
  const updates = async () => {
    const { rows } = await client.query<{ n: string }>("select n_tup_upd::text as n from pg_stat_user_tables where relname = 'chatgate_keys'");
    return Number(rows[0]!.n);
  };
  // A replica of its own, closed afterwards: a server process reports its statistics as it exits,
  // before it leaves pg_stat_activity, so once its connections are gone its counts are all in.
  const flusher = await PostgresKeyStore.open(`${database.url}?application_name=usage-flusher`);
  const before = await updates();
  const recorder = new UsageRecorder(flusher);
  for (let i = 0; i < 1000; i++) {
    recorder.used(record, new Date(Date.UTC(2030, 0, 1, 0, 0, i)));
    recorder.ended(record, true, new Date(Date.UTC(2030, 0, 1, 0, 0, i)));
    recorder.tokens(record, 3, 4);
    await recorder.flush();
  }
  await flusher.update(record.id, { name: 'busy, renamed' }); // the measure's own check: this one counts
  await flusher.close();
  await eventually(async () => ((await client.query("select 1 from pg_stat_activity where application_name = 'usage-flusher'")).rowCount === 0 ? true : undefined));
  await client.query('select pg_stat_clear_snapshot()');
  expect((await updates()) - before).toBe(1);
  expect((await store.get(record.id))?.usage).toEqual({ requests: 1000, promptTokens: 3000, completionTokens: 4000 });
}, 30_000);

test('findByDigest, the hot path, reads the key row alone: no usage figures', async () => {
  const { record } = await issueKey(store, { name: 'hot' });
  await store.recordUse([{ keyId: record.id, accountId: record.accountId, date: '2030-01-01', at: new Date('2030-01-01T00:00:00Z'), requests: 1, refused: 0, costNanos: 0, promptTokens: 2, completionTokens: 3, model: '', endUser: '' }]);
  const found = await store.findByDigest(record.digest);
  expect(found).toMatchObject({ id: record.id, name: 'hot', revokedAt: null });
  expect(found).not.toHaveProperty('usage');
  expect(found).not.toHaveProperty('lastUsedAt');
});

test('two replicas flushing the same keys at once, in opposite orders, both land: no deadlock, nothing lost', async () => {
  const keys = await Promise.all(Array.from({ length: 30 }, (_, i) => issueKey(store, { name: `pair-${i}` })));
  const use = (record: KeyRecord) => ({ keyId: record.id, accountId: record.accountId, date: '2030-02-02', at: new Date('2030-02-02T02:02:02Z'), requests: 1, refused: 0, costNanos: 0, promptTokens: 1, completionTokens: 1, model: '', endUser: '' });
  const forward = keys.map(({ record }) => use(record));
  const backward = [...forward].reverse();
  await Promise.all(Array.from({ length: 10 }, (_, i) => (i % 2 ? store : other).recordUse(i % 2 ? forward : backward)));
  for (const { record } of keys) expect((await store.get(record.id))?.usage).toEqual({ requests: 10, promptTokens: 10, completionTokens: 10 });
});

test('use of an id that names no key is dropped from the totals, as before', async () => {
  await store.recordUse([{ keyId: 'key_gone', accountId: 'acc_default', date: '2030-01-01', at: new Date(), requests: 1, refused: 0, costNanos: 0, promptTokens: 1, completionTokens: 1, model: '', endUser: '' }]);
  const { rows } = await client.query("select 1 from chatgate_key_usage where key_id = 'key_gone'");
  expect(rows).toEqual([]);
});

test('a key inserted with usage (an import) keeps it; changing, revoking and rotating it keep it too', async () => {
  const { record } = await issueKey(store, { name: 'imported' });
  const imported: KeyRecord = { ...record, id: `${record.id}_i`, digest: record.digest.replace(/^./, (c) => (c === 'f' ? 'e' : 'f')), usage: { requests: 7, promptTokens: 70, completionTokens: 7 }, lastUsedAt: '2029-12-31T00:00:00.000Z' };
  await store.insert(imported);
  expect(await other.get(imported.id)).toEqual(imported);
  expect(await store.update(imported.id, { name: 'renamed' })).toEqual({ ...imported, name: 'renamed' });
  expect((await store.revoke(imported.id, new Date('2030-01-01T00:00:00Z')))?.usage).toEqual(imported.usage);
  expect((await store.rotate(imported.id, 'a'.repeat(64), 'cgk_rot'))?.lastUsedAt).toBe(imported.lastUsedAt);
});

describe('migration 6', () => {
  test('carries the totals and last use kept on key rows into usage rows, once', async () => {
    const old = await createTestDatabase();
    try {
      const first = await PostgresKeyStore.open(old.url);
      const { record } = await issueKey(first, { name: 'from before' });
      const { record: unused } = await issueKey(first, { name: 'never used' });
      await first.close();
      // As a database of the previous release holds it: totals on the key row, no usage table yet.
      const setup = new pg.Client({ connectionString: old.url });
      await setup.connect();
      await setup.query(`
        drop table chatgate_key_usage;
        delete from chatgate_schema_migrations where version = 6;
        update chatgate_keys set requests_total = 12, prompt_tokens_total = 340, completion_tokens_total = 56, last_used_at = '2029-06-01T00:00:00Z' where id = '${record.id}';`);
      await setup.end();
      const [a, b] = await Promise.all([PostgresKeyStore.open(old.url), PostgresKeyStore.open(old.url)]);
      expect((await a.get(record.id))?.usage).toEqual({ requests: 12, promptTokens: 340, completionTokens: 56 });
      expect((await b.get(record.id))?.lastUsedAt).toBe('2029-06-01T00:00:00.000Z');
      expect((await a.get(unused.id))?.usage).toEqual({ requests: 0, promptTokens: 0, completionTokens: 0 });
      await a.recordUse([{ keyId: record.id, accountId: record.accountId, date: '2030-01-01', at: new Date('2030-01-01T00:00:00Z'), requests: 1, refused: 0, costNanos: 0, promptTokens: 0, completionTokens: 0, model: '', endUser: '' }]);
      expect((await b.get(record.id))?.usage.requests).toBe(13);
      await Promise.all([a.close(), b.close()]);
    } finally {
      await old.drop();
    }
  });
});
