/**
 * `chatgate store import` into PostgreSQL, through the real CLI and a real database: every record
 * kind of a keys.json reads back as the file store reads it, a second run adds nothing, a running
 * gateway's store sees the imported key through the change feed, and a file the file store would
 * refuse writes nothing.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { digestKey } from '../../src/auth/keys';
import { PostgresKeyStore } from '../../src/store/postgres/store';
import { expectReadsBackAs, fileStoreWithEverything, importCounts } from '../helpers/file-store';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres';
import { CLI } from '../helpers/processes';
import { eventually } from '../helpers/time';

let dir: string;
let database: TestDatabase;
const opened: PostgresKeyStore[] = [];
beforeEach(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-pg-import-'));
  database = await createTestDatabase();
});
afterEach(async () => {
  await Promise.all(opened.splice(0).map((store) => store.close()));
  await database.drop();
  rmSync(dir, { recursive: true, force: true });
});

const configFor = (url: string) => {
  const file = path.join(dir, 'chatgate.yaml');
  writeFileSync(file, YAML.stringify({ providers: { mock: { workers: ['http://127.0.0.1:9'] } }, keyStore: { type: 'postgres', url } }));
  return file;
};
const importWithCli = (jsonFile: string, configFile: string) => spawnSync(process.execPath, [CLI, 'store', 'import', jsonFile, '--config', configFile], { encoding: 'utf8' });
const counts = importCounts;
const open = async () => {
  const store = await PostgresKeyStore.open(database.url);
  opened.push(store);
  return store;
};

test('store import into PostgreSQL: every record kind, read back as the file store reads it; a running store sees the key; a second run adds nothing', async () => {
  const jsonFile = path.join(dir, 'keys.json');
  const { source, key, record, teamKey } = await fileStoreWithEverything(jsonFile);
  // A session and a link that expired while the file lay there: left behind, not brought back.
  const file = JSON.parse(readFileSync(jsonFile, 'utf8')) as { sessions: Array<Record<string, string>>; tokens: Array<Record<string, string>> };
  file.sessions.push({ ...file.sessions[0]!, digest: 'e'.repeat(64), expiresAt: '2020-01-01T00:00:00.000Z' });
  file.tokens.push({ ...file.tokens[0]!, digest: 'f'.repeat(64), expiresAt: '2020-01-01T00:00:00.000Z' });
  writeFileSync(jsonFile, JSON.stringify(file));
  const configFile = configFor(database.url);
  const running = await open(); // a gateway's store, migrated and listening before the import
  const announced: string[] = [];
  running.onChange((digests) => announced.push(...(digests ?? [])));

  const first = importWithCli(jsonFile, configFile);
  expect({ status: first.status, stderr: first.stderr }).toEqual({ status: 0, stderr: '' });
  expect(counts(first.stdout)).toEqual({
    accounts: [1, 1], // the key's account is the database's own default account (same id): kept as it is
    keys: [2, 0],
    people: [2, 0],
    identities: [1, 0],
    members: [2, 0],
    sessions: [1, 0],
    tokens: [1, 0],
    counters: [1, 0],
    audit: [3, 0],
    usage: [2, 0],
    quotaUsage: [1, 0],
  });
  expect(first.stdout).not.toContain(key);
  expect(first.stdout).not.toContain(record.digest);
  await eventually(async () => (announced.includes(digestKey(key)) ? true : undefined), 5000);

  const second = importWithCli(jsonFile, configFile);
  expect(second.status).toBe(0);
  expect(Object.values(counts(second.stdout)).every(([imported, present]) => imported === 0 && present > 0)).toBe(true);

  const store = await open();
  // The hot path's read (the key row alone, no usage figures) finds it by the key's digest.
  expect(await store.findByDigest(digestKey(key))).toMatchObject({ id: record.id, digest: record.digest, models: ['mock/*'], endpoints: ['chat'] });
  await expectReadsBackAs(store, source, { record, teamKey });
  const { rows: expired } = await (store as unknown as { pool: { query(sql: string): Promise<{ rows: unknown[] }> } }).pool.query(
    `select digest from chatgate_sessions where digest = '${'e'.repeat(64)}' union all select digest from chatgate_tokens where digest = '${'f'.repeat(64)}'`,
  );
  expect(expired).toEqual([]);
}, 60_000);

test('a keys.json the file store would refuse: exit 1 naming the record, no digest quoted, nothing written', async () => {
  const jsonFile = path.join(dir, 'keys.json');
  const { record } = await fileStoreWithEverything(jsonFile);
  // The last key broken: were the import not one transaction, the accounts and the first key would stay.
  const text = readFileSync(jsonFile, 'utf8');
  const broken = JSON.parse(text) as { keys: Array<{ digest: string }> };
  broken.keys[1]!.digest = 'not-a-digest';
  writeFileSync(jsonFile, JSON.stringify(broken));
  const result = importWithCli(jsonFile, configFor(database.url));
  expect(result.status).toBe(1);
  expect(result.stderr).toMatch(/keys\[1\]\.digest: not a SHA-256 digest/);
  expect(result.stderr).not.toContain(record.digest);
  const store = await open();
  expect(await store.list()).toEqual([]);
  expect((await store.listAccounts()).map((a) => a.id)).toEqual(['acc_default']);
});

test('a statement PostgreSQL does not take mid-import rolls the whole import back', async () => {
  const jsonFile = path.join(dir, 'keys.json');
  await fileStoreWithEverything(jsonFile);
  // A record the database refuses where the file store does not (a check added to this database only):
  // the last audit event, written after the keys, people and members.
  const store = await open();
  await (store as unknown as { pool: { query(sql: string): Promise<unknown> } }).pool.query(
    "alter table chatgate_audit add constraint no_key_revoked check (action <> 'key.revoked')",
  );
  const result = importWithCli(jsonFile, configFor(database.url));
  expect(result.status).toBe(1);
  expect(result.stderr).toMatch(/no_key_revoked/);
  expect(result.stderr).not.toMatch(/Failing row/); // the row's values are not quoted
  expect(await store.list()).toEqual([]);
  expect(await store.listAudit(null, 10)).toEqual([]);
  expect(await store.getPerson('owner@example.com')).toBeUndefined();
});
