/**
 * The SQLite store as processes share it: the file and its settings (WAL, foreign keys, mode 0600,
 * each migration once), processes writing at once with no change lost (keys, one key's usage, one
 * counter, the CLI besides), the append-only audit trail, and `chatgate store import` of a keys.json
 * holding every record kind, twice (the second adds nothing). The contract suites hold its semantics.
 */
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { issueKey } from '../../src/auth/issue';
import { digestKey } from '../../src/auth/keys';
import { defaultAccountId } from '../../src/store/default-account';
import { immediate, openConnection, sqliteCode, sqliteDriver, unflagged } from '../../src/store/sqlite/driver';
import { SqliteKeyStore } from '../../src/store/sqlite/store';
import type { KeyRecord, Store } from '../../src/store/types';
import { expectReadsBackAs, fileStoreWithEverything, importCounts } from '../helpers/file-store';
import { CLI } from '../helpers/processes';
import { sleep } from '../helpers/time';

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-sqlite-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const opened: Store[] = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((store) => store.close()));
});
function open(file: string): SqliteKeyStore {
  const store = new SqliteKeyStore(file);
  opened.push(store);
  return store;
}

/** A config naming the SQLite file, for the CLI. */
function configFor(file: string): string {
  const configFile = `${file}.yaml`;
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(configFile, YAML.stringify({ providers: { mock: { workers: ['http://127.0.0.1:9'] } }, keyStore: { type: 'sqlite', path: file }, log: { level: 'silent' } }));
  return configFile;
}

function run(command: string, args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    child.once('error', reject);
    child.once('close', (status) => resolve({ status, stdout, stderr }));
  });
}

// better-sqlite3's native part keeps the error class of the first test file that loaded it in a jest
// worker, so a later file's SQLite errors come from another realm: their message is checked, not
// their class (toThrow would say nothing was thrown).
test('one file, mode 0600, in WAL mode with foreign keys on; processes opening it at once apply each migration once', async () => {
  const file = path.join(dir, 'fresh', 'chatgate.db');
  const pair = [open(file), open(file)];
  expect(pair.map((store) => store.created)).toEqual([true, false]);
  expect(statSync(file).mode & 0o777).toBe(0o600);
  expect(statSync(path.dirname(file)).mode & 0o077).toBe(0);
  const { db } = pair[1]!.sql;
  expect(db.prepare('PRAGMA journal_mode').get()).toEqual({ journal_mode: 'wal' });
  expect(db.prepare('PRAGMA foreign_keys').get()).toEqual({ foreign_keys: 1 });
  expect(db.prepare('select version from chatgate_schema_migrations order by version').all().map((row) => ({ ...(row as object) }))).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12].map((version) => ({ version })));
  // Every lookup by something other than the primary key has its index.
  const plan = (sql: string) => JSON.stringify(db.prepare(`explain query plan ${sql}`).all());
  expect(plan("select * from chatgate_keys where digest = 'x'")).toMatch(/USING INDEX/);
  expect(plan("select * from chatgate_keys where account_id = 'x' order by created_at, id")).toMatch(/USING INDEX chatgate_keys_account/);
  expect(plan("select * from chatgate_members where email = 'x'")).toMatch(/USING INDEX chatgate_members_email/);
  expect(plan("select * from chatgate_usage_daily where account_id = 'x' and date between 'a' and 'b'")).toMatch(/USING INDEX chatgate_usage_account_date/);
  // A key of an account that does not exist is refused, as PostgreSQL refuses it.
  const { record } = await issueKey(pair[0]!, { name: 'first' });
  await expect(pair[0]!.insert({ ...record, id: 'key_orphan', digest: digestKey('cgk_orphan'), accountId: 'acc_missing' })).rejects.toHaveProperty('message', expect.stringMatching(/FOREIGN KEY/));
});

test('the driver: node:sqlite on a Node that has it unflagged, better-sqlite3 before; a failed change rolls back whole; SQLite codes read from either', () => {
  const versions = { 'v20.20.2': false, '22.12.0': false, '22.13.0': true, '23.3.0': false, '23.4.0': true, 'v24.21.0': true, '26.0.0': true };
  for (const [version, expected] of Object.entries(versions)) expect({ version, has: unflagged(version) }).toEqual({ version, has: expected });
  expect(sqliteDriver()).toBe(unflagged(process.version) ? 'node:sqlite' : 'better-sqlite3');

  const file = path.join(dir, 'driver', 'plain.db');
  mkdirSync(path.dirname(file), { recursive: true });
  const db = openConnection(file);
  const other = openConnection(file);
  try {
    expect(db.driver).toBe(sqliteDriver());
    db.exec('create table t (id integer primary key, v text not null)');
    immediate(db, () => db.prepare('insert into t (id, v) values (?, ?)').run(1, 'kept'));
    // A change that throws half way leaves nothing of itself, and the connection takes the next one.
    expect(() =>
      immediate(db, () => {
        db.prepare('insert into t (id, v) values (?, ?)').run(2, 'lost');
        db.prepare('insert into t (id, v) values (?, ?)').run(1, 'duplicate');
      }),
    ).toThrow(/UNIQUE constraint failed: t\.id/);
    immediate(db, () => db.prepare('insert into t (id, v) values (@id, @v)').run({ id: 3, v: 'named' }));
    expect(db.prepare('select id, v from t order by id').all().map((row) => ({ ...(row as object) }))).toEqual([
      { id: 1, v: 'kept' },
      { id: 3, v: 'named' },
    ]);
    // A constraint and a lock, as each library reports them, read as the same SQLite codes.
    let constraint: unknown;
    try {
      db.prepare('insert into t (id, v) values (1, null)').run();
    } catch (err) {
      constraint = err;
    }
    expect(sqliteCode(constraint)).toMatch(/^SQLITE_CONSTRAINT/);
    other.exec('PRAGMA busy_timeout = 0');
    db.exec('BEGIN IMMEDIATE');
    let busy: unknown;
    try {
      other.exec('BEGIN IMMEDIATE');
    } catch (err) {
      busy = err;
    }
    db.exec('ROLLBACK');
    expect(sqliteCode(busy)).toBe('SQLITE_BUSY');
    expect(sqliteCode(new Error('not from SQLite'))).toBeUndefined();
  } finally {
    db.close();
    other.close();
  }
  expect(db.open).toBe(false);
});

test('two processes and the CLI writing at once lose no change: every key, every use of one key, every bump of one counter', async () => {
  const file = path.join(dir, 'busy', 'chatgate.db');
  const store = open(file);
  const { record: shared } = await issueKey(store, { name: 'shared' });
  const ROUNDS = 150;
  // Each writer makes a key, adds one request to the shared key and bumps one counter, ROUNDS times.
  const writer = `
    const { SqliteKeyStore } = require(${JSON.stringify(path.resolve('dist/store/sqlite/store.js'))});
    const { issueKey } = require(${JSON.stringify(path.resolve('dist/auth/issue.js'))});
    (async () => {
      const store = new SqliteKeyStore(${JSON.stringify(file)}, 5000);
      const expiresAt = new Date(Date.now() + 3600_000);
      for (let i = 0; i < ${ROUNDS}; i++) {
        await issueKey(store, { name: 'writer-' + process.pid + '-' + i });
        await store.recordUse([{ keyId: ${JSON.stringify(shared.id)}, accountId: ${JSON.stringify(shared.accountId)}, date: '2030-01-01', at: new Date(), requests: 1, promptTokens: 2, completionTokens: 3 }]);
        await store.bumpCounters([{ name: 'shared-counter', expiresAt }], new Date());
      }
      await store.close();
    })().catch((err) => { console.error(err); process.exit(1); });`;
  const configFile = configFor(file);
  const children = [run(process.execPath, ['-e', writer]), run(process.execPath, ['-e', writer])];
  const cliRuns = [1, 2, 3].map((i) => run(process.execPath, [CLI, 'keys', 'create', '--name', `cli-${i}`, '--config', configFile]));
  const expiresAt = new Date(Date.now() + 3600_000);
  for (let i = 0; i < ROUNDS; i++) {
    await issueKey(store, { name: `here-${i}` });
    await store.recordUse([{ keyId: shared.id, accountId: shared.accountId, date: '2030-01-01', at: new Date(), requests: 1, refused: 1, costNanos: 0, promptTokens: 2, completionTokens: 3, model: '', endUser: '' }]);
    await store.bumpCounters([{ name: 'shared-counter', expiresAt }], new Date());
    await new Promise((resolve) => setImmediate(resolve));
  }
  for (const result of await Promise.all([...children, ...cliRuns])) expect({ status: result.status, stderr: result.stderr }).toEqual({ status: 0, stderr: '' });

  const keys = await store.list();
  expect(keys.length).toBe(1 + 3 * ROUNDS + 3);
  expect(new Set(keys.map((k) => k.digest)).size).toBe(keys.length);
  expect(keys.filter((k) => k.name.startsWith('cli-')).length).toBe(3);
  expect((await store.get(shared.id))?.usage).toEqual({ requests: 3 * ROUNDS, promptTokens: 6 * ROUNDS, completionTokens: 9 * ROUNDS });
  expect(await store.usage(shared.accountId, '2030-01-01', '2030-01-01')).toEqual([
    // The two other processes write uses as the release before `refused` did (none named): counted as 0.
    { date: '2030-01-01', accountId: shared.accountId, keyId: shared.id, requests: 3 * ROUNDS, refused: ROUNDS, costNanos: 0, promptTokens: 6 * ROUNDS, completionTokens: 9 * ROUNDS },
  ]);
  expect(await store.bumpCounters([{ name: 'shared-counter', expiresAt }], new Date())).toEqual([3 * ROUNDS + 1]);
}, 60_000);

test('the audit trail is append-only: no statement changes or deletes an event', async () => {
  const store = open(path.join(dir, 'audit', 'chatgate.db'));
  await store.appendAudit({ id: 'aud_1', accountId: null, at: new Date().toISOString(), actor: 'cli', action: 'key.created', target: 'key_1', client: null, details: {} });
  expect(() => store.sql.db.prepare("update chatgate_audit set actor = 'someone else'").run()).toThrow(/append-only/);
  expect(() => store.sql.db.prepare('delete from chatgate_audit').run()).toThrow(/append-only/);
  await expect(store.appendAudit({ id: 'aud_1', accountId: null, at: new Date().toISOString(), actor: 'x', action: 'x', target: 'x', client: null, details: {} })).rejects.toMatchObject({ name: 'DuplicateRecord', kind: 'audit', field: 'id' });
  expect((await store.listAudit(null, 10)).map((e) => e.actor)).toEqual(['cli']);
});

test('the change feed: live while its poll runs, a change by another process announced within a poll, dead after close', async () => {
  const file = path.join(dir, 'feed', 'chatgate.db');
  const watcher = open(file);
  expect(watcher.changeFeedLive).toBe(false); // nobody listens yet
  const seen: Array<string[] | undefined> = [];
  watcher.onChange((digests) => seen.push(digests));
  expect(watcher.changeFeedLive).toBe(true);
  const result = await run(process.execPath, [CLI, 'keys', 'create', '--name', 'from-cli', '--json', '--config', configFor(file)]);
  const { key } = JSON.parse(result.stdout) as { key: string };
  const at = performance.now();
  while (!seen.some((digests) => digests?.includes(digestKey(key))) && performance.now() - at < 5000) await sleep(20);
  expect(seen.some((digests) => digests?.includes(digestKey(key)))).toBe(true);
  expect(performance.now() - at).toBeLessThan(1000);
  await watcher.close();
  expect(watcher.changeFeedLive).toBe(false);
});

test('store import: every record kind of a keys.json, as the file store reads it; a second run adds nothing', async () => {
  const jsonFile = path.join(dir, 'import', 'keys.json');
  const { source, key, record, teamKey } = await fileStoreWithEverything(jsonFile);
  const target = path.join(dir, 'import', 'store.db');
  const configFile = configFor(target);

  const first = spawnSync(process.execPath, [CLI, 'store', 'import', jsonFile, '--config', configFile], { encoding: 'utf8' });
  expect({ status: first.status, stderr: first.stderr }).toEqual({ status: 0, stderr: '' });
  const counts = importCounts;
  expect(counts(first.stdout)).toEqual({
    accounts: [2, 0],
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

  const second = spawnSync(process.execPath, [CLI, 'store', 'import', jsonFile, '--config', configFile], { encoding: 'utf8' });
  expect(second.status).toBe(0);
  expect(Object.values(counts(second.stdout)).every(([imported, present]) => imported === 0 && present > 0)).toBe(true);

  // What SQLite holds now reads as what the file store holds, kind by kind (once, not twice).
  const store = open(target);
  // findByDigest reads the key row alone (the hot path); its usage reads back through get().
  const { usage: _usage, lastUsedAt: _lastUsedAt, ...authenticating } = (await source.findByDigest(digestKey(key))) as KeyRecord;
  expect(await store.findByDigest(digestKey(key))).toEqual(authenticating);
  expect(await store.listAccounts()).toEqual(await source.listAccounts());
  await expectReadsBackAs(store, source, { record, teamKey });
  expect(await defaultAccountId(store)).toBe(record.accountId);
});

test('store import refuses a file the file store would refuse, naming the record, and writes nothing', async () => {
  const jsonFile = path.join(dir, 'import-bad', 'keys.json');
  const { record } = await fileStoreWithEverything(jsonFile);
  const text = readFileSync(jsonFile, 'utf8').replace(`"${record.digest}"`, '"not-a-digest"');
  writeFileSync(jsonFile, text);
  const target = path.join(dir, 'import-bad', 'store.db');
  const result = spawnSync(process.execPath, [CLI, 'store', 'import', jsonFile, '--config', configFor(target)], { encoding: 'utf8' });
  expect(result.status).toBe(1);
  expect(result.stderr).toMatch(/keys\[0\]\.digest: not a SHA-256 digest/);
  expect(result.stderr).not.toContain(record.digest);
  expect(await open(target).listAccounts()).toEqual([]);
});

test('store import usage: one FILE, a known action, and a sqlite store to write into (exit 2, saying which)', () => {
  const cliRun = (...args: string[]) => spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8' });
  const sqliteConfig = configFor(path.join(dir, 'usage', 'chatgate.db'));
  expect(cliRun('store', 'import', '--config', sqliteConfig)).toMatchObject({ status: 2, stderr: expect.stringContaining('store import needs one FILE') });
  expect(cliRun('store', 'export', 'x.json', '--config', sqliteConfig)).toMatchObject({ status: 2, stderr: expect.stringContaining("unknown store action 'export'") });
  const fileConfig = path.join(dir, 'usage', 'file.yaml');
  writeFileSync(fileConfig, YAML.stringify({ providers: { mock: { workers: ['http://127.0.0.1:9'] } }, keyStore: { type: 'file', path: path.join(dir, 'usage', 'keys.json') } }));
  expect(cliRun('store', 'import', 'keys.json', '--config', fileConfig)).toMatchObject({ status: 1, stderr: expect.stringContaining("type 'file' (a JSON file rewritten whole on every change) is no longer a key store") });
  expect(cliRun('store', 'import', path.join(dir, 'usage', 'missing.json'), '--config', sqliteConfig)).toMatchObject({ status: 1, stderr: expect.stringContaining('ENOENT') });
  // A sqlite store pointed at a file store's keys.json: refused, naming the import, the file left as it was.
  const keysJson = path.join(dir, 'usage', 'keys.json');
  writeFileSync(keysJson, '{"version":2,"keys":[]}\n');
  const wrongPath = path.join(dir, 'usage', 'wrong.yaml');
  writeFileSync(wrongPath, YAML.stringify({ providers: { mock: { workers: ['http://127.0.0.1:9'] } }, keyStore: { type: 'sqlite', path: keysJson } }));
  expect(cliRun('keys', 'list', '--config', wrongPath)).toMatchObject({ status: 1, stderr: expect.stringMatching(/SQLITE_NOTADB.*not a SQLite database.*chatgate store import/) });
  expect(readFileSync(keysJson, 'utf8')).toBe('{"version":2,"keys":[]}\n');
});
