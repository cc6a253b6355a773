/**
 * PostgreSQL with 300,000 key rows: a replica on default settings (the first key on, a 1 s store
 * deadline) starts within 10 s and serves a real key. Start-up asks whether the store is empty with
 * one `limit 1` read; listing every key to count them took past the deadline here, and the process
 * exited with "The key store cannot be read right now".
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { issueKey } from '../../src/auth/issue';
import { PostgresKeyStore } from '../../src/store/postgres/store';
import { spawnGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { bearer, chatBody, request } from '../helpers/http';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres';
import { startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';

const SEEDED = 300_000;

let worker: WorkerProcess;
let dir: string;
let database: TestDatabase;
let replica: GatewayProcess | undefined;
let realKey: string;

/** One statement on a fresh connection. */
async function sql<R extends pg.QueryResultRow>(text: string, params: unknown[] = []): Promise<R[]> {
  const client = new pg.Client({ connectionString: database.url });
  await client.connect();
  try {
    return (await client.query<R>(text, params)).rows;
  } finally {
    await client.end();
  }
}

beforeAll(async () => {
  worker = await startWorker();
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-scale-'));
  database = await createTestDatabase();
  const store = await PostgresKeyStore.open(database.url); // the schema, as a first replica makes it
  ({ key: realKey } = await issueKey(store, { name: 'real', createdBy: 'admin-token' }));
  await store.close();
  // The seed in one statement: rows as the gateway writes them (a SHA-256 digest each, unique),
  // without 300,000 notifications nobody listens to.
  const started = performance.now();
  await sql(`
    alter table chatgate_keys disable trigger chatgate_keys_changed;
    insert into chatgate_keys (id, name, digest, prefix, created_at, account_id, created_by)
      select 'key_seed_' || i, 'seeded ' || i, encode(sha256(('seed-' || i)::bytea), 'hex'), 'cgk_seed' || (i % 1000),
             now() - make_interval(secs => i), 'acc_default', 'admin-token'
      from generate_series(1, ${SEEDED}) as i;
    alter table chatgate_keys enable trigger chatgate_keys_changed;
    analyze chatgate_keys;`);
  process.stdout.write(`seeded ${SEEDED} key rows in ${((performance.now() - started) / 1000).toFixed(1)} s\n`);
}, 120_000);

afterAll(async () => {
  if (replica) await stopProcess(replica.child);
  await worker?.stop();
  await database?.drop();
  rmSync(dir, { recursive: true, force: true });
});

test(`a replica on default settings starts within 10 s over ${SEEDED.toLocaleString('en')} keys, makes no first key, and serves a real one`, async () => {
  const started = performance.now();
  // Default settings: the first key on (as it is by default), the store's 1 s deadline, the cache as shipped.
  const spawned = spawnGatewayProcess(dir, 'replica', { providers: { mock: { workers: [worker.url] } }, auth: { createFirstKey: true } }, { CHATGATE_KEYSTORE_URL: database.url });
  replica = await spawned.listening;
  const startMs = performance.now() - started;
  process.stdout.write(`replica listening ${(startMs / 1000).toFixed(2)} s after spawn, over ${SEEDED} keys\n`);
  expect(startMs).toBeLessThan(10_000);

  const response = await request(replica.url, { ca: replica.ca, headers: bearer(realKey), body: chatBody() });
  expect(response.status).toBe(200);
  expect((await request(replica.url, { ca: replica.ca, headers: bearer(`${realKey.slice(0, -4)}AAAA`), body: chatBody() })).status).toBe(401);

  // The store was not empty: no first key, nothing but the seed and the real key.
  expect(replica.stderr()).not.toContain('The key store was empty');
  const [row] = await sql<{ count: string }>('select count(*) from chatgate_keys');
  expect(Number(row?.count)).toBe(SEEDED + 1);
  expect(await sql("select 1 from chatgate_audit where actor = 'first-start' and action = 'key.created'")).toEqual([]);
}, 60_000);
