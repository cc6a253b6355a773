/**
 * Shared mode: gateway replicas over one PostgreSQL. A key created through one replica works through
 * the other at once; a revocation through one admin API reaches the other within a second (measured,
 * printed); a database restart neither breaks cached keys nor stops revocations from propagating.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { bearer, chatBody, request } from '../helpers/http';
import { createTestDatabase, ThrowawayPostgres, type TestDatabase } from '../helpers/postgres';
import { CLI, startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';
import { sleep } from '../helpers/time';

const TOKEN = 'shared-mode-admin-token-0123456789';
let worker: WorkerProcess;
let dir: string;

beforeAll(async () => {
  worker = await startWorker();
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-shared-'));
});
afterAll(async () => {
  await worker?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const adminCall = (adminUrl: string, method: string, apiPath: string, body?: unknown) =>
  request(adminUrl, { method, path: `/admin/api${apiPath}`, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });

/** Milliseconds until `url` refuses `key` (polling every 10 ms), bounded. */
async function timeUntilRefused(url: string, ca: string, key: string, bound = 5000): Promise<number> {
  const started = performance.now();
  while (performance.now() - started < bound) {
    const response = await request(url, { ca, headers: bearer(key), body: chatBody() });
    if (response.status === 401) return performance.now() - started;
    await sleep(10);
  }
  return Infinity;
}

describe('two gateway processes on one PostgreSQL', () => {
  let database: TestDatabase;
  let replicas: GatewayProcess[];

  beforeAll(async () => {
    database = await createTestDatabase();
    const settings = {
      admin: { host: '127.0.0.1', port: 0, token: TOKEN },
      providers: { mock: { workers: [worker.url] } },
      auth: { createFirstKey: false, cacheTtlMs: 60_000 }, // the TTL is no help here: only NOTIFY can be this fast
    };
    // The URL comes from the environment, as an operator would keep the password out of the file.
    replicas = await Promise.all(['a', 'b'].map((name) => startGatewayProcess(dir, name, settings, { CHATGATE_KEYSTORE_URL: database.url })));
  });
  afterAll(async () => {
    await Promise.all((replicas ?? []).map((r) => stopProcess(r.child)));
    await database?.drop();
  });

  test('a key created through one works through the other at once; revoked through one, refused by the other within 1 s', async () => {
    const [a, b] = replicas as [GatewayProcess, GatewayProcess];
    const created = (await adminCall(a.adminUrl, 'POST', '/keys', { name: 'shared' })).json<{ id: string; key: string }>();
    expect((await request(b.url, { ca: b.ca, headers: bearer(created.key), body: chatBody() })).status).toBe(200);
    expect((await request(a.url, { ca: a.ca, headers: bearer(created.key), body: chatBody() })).status).toBe(200);

    expect((await adminCall(a.adminUrl, 'POST', `/keys/${created.id}/revoke`)).status).toBe(200);
    const elapsed = await timeUntilRefused(b.url, b.ca, created.key);
    process.stdout.write(`revocation through replica a refused by replica b after ${elapsed.toFixed(1)} ms\n`);
    expect(elapsed).toBeLessThan(1000);
  });

  test('chatgate keys works against the PostgreSQL store, and both replicas see the key', async () => {
    const created = spawnSync(process.execPath, [CLI, 'keys', 'create', '--name', 'from-cli', '--json'], {
      encoding: 'utf8',
      env: { ...process.env, CHATGATE_KEYSTORE_URL: database.url },
    });
    expect(created.status).toBe(0);
    const { key, id } = JSON.parse(created.stdout) as { key: string; id: string };
    for (const replica of replicas) expect((await request(replica.url, { ca: replica.ca, headers: bearer(key), body: chatBody() })).status).toBe(200);
    const listed = spawnSync(process.execPath, [CLI, 'keys', 'list', '--json'], { encoding: 'utf8', env: { ...process.env, CHATGATE_KEYSTORE_URL: database.url } });
    expect(JSON.parse(listed.stdout).map((k: { id: string }) => k.id)).toContain(id);
    expect(listed.stdout).not.toContain(key);
  });
});

describe('a database restart while the gateway runs', () => {
  let server: ThrowawayPostgres;
  let gw: TestGateway;

  beforeAll(async () => {
    server = await ThrowawayPostgres.start();
    gw = await startTestGateway({
      keyStore: { type: 'postgres', url: server.url },
      admin: { host: '127.0.0.1', port: 0, token: TOKEN },
      providers: { mock: { workers: [worker.url] } },
      auth: { createFirstKey: false, cacheTtlMs: 60_000 },
    });
  }, 60_000);
  afterAll(async () => {
    await gw?.stop();
    server?.destroy();
  });

  test('cached keys keep working while it is down; after it is back, revocations still propagate', async () => {
    const cached = (await adminCall(gw.adminUrl, 'POST', '/keys', { name: 'cached' })).json<{ id: string; key: string }>();
    const doomed = (await adminCall(gw.adminUrl, 'POST', '/keys', { name: 'doomed' })).json<{ id: string; key: string }>();
    for (const { key } of [cached, doomed]) expect((await request(gw.url, { ca: gw.ca, headers: bearer(key), body: chatBody() })).status).toBe(200);

    server.stopSync();
    expect((await request(gw.url, { ca: gw.ca, headers: bearer(cached.key), body: chatBody() })).status).toBe(200);
    const unknownWhileDown = await request(gw.url, { ca: gw.ca, headers: bearer(`cgk_${'D'.repeat(43)}`), body: chatBody() });
    expect(unknownWhileDown.status).toBe(503);
    expect(unknownWhileDown.json().error.code).toBe('key_store_unavailable');

    server.startSync();
    // The pool reconnects on the next query; the listener on its own schedule. Revoke once both are back.
    let revoked = await adminCall(gw.adminUrl, 'POST', `/keys/${doomed.id}/revoke`);
    for (let i = 0; i < 50 && revoked.status !== 200; i++) {
      await sleep(100);
      revoked = await adminCall(gw.adminUrl, 'POST', `/keys/${doomed.id}/revoke`);
    }
    expect(revoked.status).toBe(200);
    const elapsed = await timeUntilRefused(gw.url, gw.ca, doomed.key);
    process.stdout.write(`after the database restart, a revocation was refused after ${elapsed.toFixed(1)} ms\n`);
    expect(elapsed).toBeLessThan(1000);
    expect((await request(gw.url, { ca: gw.ca, headers: bearer(cached.key), body: chatBody() })).status).toBe(200);

    // Later, with the listener long back (it drops the whole cache once when it returns), NOTIFY itself still works.
    await sleep(1500);
    expect((await request(gw.url, { ca: gw.ca, headers: bearer(cached.key), body: chatBody() })).status).toBe(200);
    expect((await adminCall(gw.adminUrl, 'POST', `/keys/${cached.id}/revoke`)).status).toBe(200);
    const later = await timeUntilRefused(gw.url, gw.ca, cached.key);
    process.stdout.write(`a revocation 1.5 s after the restart was refused after ${later.toFixed(1)} ms\n`);
    expect(later).toBeLessThan(1000);
  }, 60_000);
});
