/**
 * The first key: made by a start on an empty store only (asked with hasKeys, one `limit 1` read,
 * never a list of every key), audited by `first-start`, and never again once the store holds a key,
 * even a revoked one. On real PostgreSQL.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { digestKey } from '../../src/auth/keys';
import { issueKey } from '../../src/auth/issue';
import { parseConfig, type Config } from '../../src/config';
import { prepareOnce } from '../../src/process/startup';
import { PostgresKeyStore } from '../../src/store/postgres/store';
import { createLogger } from '../../src/telemetry/log';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres';

const log = createLogger('silent');
let dir: string;
const databases: TestDatabase[] = [];

beforeAll(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-first-key-'));
});
afterAll(async () => {
  await Promise.all(databases.map((database) => database.drop()));
  rmSync(dir, { recursive: true, force: true });
});

async function freshDatabase(): Promise<TestDatabase> {
  const database = await createTestDatabase();
  databases.push(database);
  return database;
}

const configDocument = (url: string) => ({ providers: { mock: { workers: ['http://127.0.0.1:9'] } }, keyStore: { type: 'postgres', url }, dataDir: dir, console: { enabled: false }, log: { level: 'silent' } });
const configOf = (url: string): Config => parseConfig(configDocument(url));

/** A start's preparation, its store closed after; what it made. */
async function start(config: Config) {
  const prepared = await prepareOnce(config, log);
  try {
    return { firstKey: prepared.firstKey, keys: await prepared.keyStore.list(), audit: await prepared.keyStore.listAudit(null, 100) };
  } finally {
    await prepared.keyStore.close();
  }
}

test('an empty store gets one first key, audited; the next start makes none', async () => {
  const config = configOf((await freshDatabase()).url);
  const first = await start(config);
  expect(first.firstKey).toBeDefined();
  expect(first.keys.map((k) => k.digest)).toEqual([digestKey(first.firstKey!.key)]);
  expect(first.audit).toContainEqual(expect.objectContaining({ actor: 'first-start', action: 'key.created', target: first.firstKey!.record.id }));

  const second = await start(config);
  expect(second.firstKey).toBeUndefined();
  expect(second.keys).toHaveLength(1);
});

test('a store holding only a revoked key is not empty: no first key', async () => {
  const database = await freshDatabase();
  const store = await PostgresKeyStore.open(database.url);
  const { record } = await issueKey(store, { name: 'old' });
  await store.revoke(record.id, new Date());
  await store.close();
  const started = await start(configOf(database.url));
  expect(started.firstKey).toBeUndefined();
  expect(started.keys.map((k) => k.id)).toEqual([record.id]);
});

test('auth.createFirstKey: false makes none, even on an empty store', async () => {
  const database = await freshDatabase();
  const config = parseConfig({ ...configDocument(database.url), auth: { createFirstKey: false } });
  const started = await start(config);
  expect(started.firstKey).toBeUndefined();
  expect(started.keys).toEqual([]);
});
