/**
 * A replica started while its PostgreSQL is away: behind a relay that refuses connections (nothing
 * listens on its port), then cuts them as they come, then accepts them (it listens and forwards), the gateway process stays up
 * (never exits), answers `/healthz` 200 and `/readyz` 503 on its admin port meanwhile, logs the wait
 * once, and serves within 5 s of the store's return. With `store.startupTimeoutMs` it gives up, exit 1.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { spawnGatewayProcess } from '../helpers/gateway-process';
import { bearer, chatBody, request } from '../helpers/http';
import { freePort } from '../helpers/net';
import { createTestDatabase, relayTo, type TestDatabase } from '../helpers/postgres';
import { startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';
import { eventually } from '../helpers/time';

const TOKEN = 'startup-wait-admin-token-0123456789';
let dir: string;
let database: TestDatabase;
let worker: WorkerProcess;

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-startup-wait-'));
  [database, worker] = await Promise.all([createTestDatabase(), startWorker()]);
});
afterAll(async () => {
  await worker?.stop();
  await database?.drop();
  rmSync(dir, { recursive: true, force: true });
});

const probe = async (adminPort: number, probePath: string) => {
  const response = await fetch(`http://127.0.0.1:${adminPort}${probePath}`);
  return { status: response.status, body: (await response.json()) as { status: string } };
};

test('PostgreSQL refusing at start: up, alive but not ready, then serving within 5 s of its return, never exiting', async () => {
  const [relayPort, adminPort] = [await freePort(), await freePort()];
  const relay = relayTo(database.url, relayPort);
  const { child, listening } = spawnGatewayProcess(dir, 'waits', {
    admin: { host: '127.0.0.1', port: adminPort, token: TOKEN },
    providers: { mock: { workers: [worker.url] } },
    keyStore: { type: 'postgres', url: relay.url, timeoutMs: 500 },
  });
  let exited: number | string | null = null;
  child.once('exit', (code, signal) => (exited = code ?? signal));
  listening.catch(() => undefined);
  try {
    // Waiting: alive, not ready.
    const alive = await eventually(async () => {
      const answer = await probe(adminPort, '/healthz').catch(() => undefined);
      return answer?.status === 200 ? answer : undefined;
    }, 10_000);
    expect(alive.body.status).toBe('ok');
    expect(await probe(adminPort, '/readyz')).toMatchObject({ status: 503, body: { status: 'not_ready' } });
    // Tries later it is still there, still waiting: counted as connections to the relay's port, which
    // now takes each one and cuts it at once (the database going away again as the gateway reaches it).
    // A second connection means the first try failed whole and the next began.
    let tries = 0;
    const cutter = net.createServer((socket) => {
      tries++;
      socket.destroy();
    });
    await new Promise<void>((resolve) => cutter.listen(relayPort, '127.0.0.1', resolve));
    try {
      await eventually(() => (tries >= 2 ? true : undefined), 10_000);
    } finally {
      await new Promise((resolve) => cutter.close(resolve));
    }
    expect(exited).toBeNull();
    expect((await probe(adminPort, '/readyz')).status).toBe(503);

    await relay.open();
    const returned = Date.now();
    const gateway = await listening;
    expect(Date.now() - returned).toBeLessThan(5000);
    expect(exited).toBeNull();
    expect(gateway.adminUrl).toBe(`http://127.0.0.1:${adminPort}`);
    const waited = gateway.log.filter((entry) => entry.msg === 'key store unreachable at start: waiting for it (/healthz 200, /readyz 503 meanwhile)');
    expect(waited).toHaveLength(1);
    expect(gateway.log.filter((entry) => entry.msg === 'key store answers: starting')).toHaveLength(1);
    // Serving: a key made now answers.
    const made = await request(gateway.adminUrl, { path: '/admin/api/keys', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify({ name: 'after the wait' }) });
    expect(made.status).toBe(201);
    const answer = await request(gateway.url, { ca: gateway.ca, headers: bearer(made.json<{ key: string }>().key), body: chatBody() });
    expect(answer.status).toBe(200);
    await eventually(async () => ((await probe(adminPort, '/readyz')).status === 200 ? true : undefined), 5000);
  } finally {
    if (exited === null) await stopProcess(child);
    relay.close();
  }
});

test('store.startupTimeoutMs: a start that waited that long gives up, exit 1, naming the store', async () => {
  const relay = relayTo(database.url, await freePort()); // never opened
  const { child, listening } = spawnGatewayProcess(dir, 'gives-up', {
    providers: { mock: { workers: [worker.url] } },
    keyStore: { type: 'postgres', url: relay.url, timeoutMs: 500 },
    store: { startupTimeoutMs: 1000 },
  });
  const exit = new Promise<number | string | null>((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal)));
  await expect(listening).rejects.toThrow(/exited with 1: [\s\S]*key store: cannot connect to postgres/);
  expect(await exit).toBe(1);
});

test('a database that does not exist is no outage: the start fails at once, saying so, without waiting', async () => {
  const missing = new URL(database.url);
  missing.pathname = '/chatgate_no_such_database';
  const started = Date.now();
  const { child, listening } = spawnGatewayProcess(dir, 'no-database', { providers: { mock: { workers: [worker.url] } }, keyStore: { type: 'postgres', url: missing.href, timeoutMs: 500 } });
  const exit = new Promise<number | string | null>((resolve) => child.once('exit', (code, signal) => resolve(code ?? signal)));
  await expect(listening).rejects.toThrow(/exited with 1: [\s\S]*chatgate_no_such_database \(3D000\)/);
  expect(await exit).toBe(1);
  expect(Date.now() - started).toBeLessThan(10_000); // a wait would never have ended (no startupTimeoutMs)
});
