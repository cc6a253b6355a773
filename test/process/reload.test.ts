/**
 * SIGHUP re-reads the config file: providers, workers and limits change while requests in flight
 * finish on the workers they started on; a bad file is refused with a log line and the old config kept.
 * A SIGHUP that arrives while the gateway starts is acted on once it is up.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { issueKey } from '../../src/auth/issue';
import { SqliteKeyStore } from '../../src/store/sqlite/store';
import { spawnGatewayProcess, startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { bearer, chatBody, request } from '../helpers/http';
import { createTestDatabase, heldRelay } from '../helpers/postgres';
import { startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';
import { eventually } from '../helpers/time';

let slowWorker: WorkerProcess;
let newWorker: WorkerProcess;
let dir: string;
let gateway: GatewayProcess;
let key: string;
let storeFile: string;

const configFile = () => path.join(dir, 'reload.yaml');
const base = () => ({ listen: { host: '127.0.0.1', port: gateway.port }, admin: { host: '127.0.0.1', port: Number(new URL(gateway.adminUrl).port) }, dataDir: path.join(dir, 'reload'), auth: { createFirstKey: false }, keyStore: { type: 'sqlite', path: storeFile } });

beforeAll(async () => {
  [slowWorker, newWorker] = await Promise.all([startWorker({ latencyMs: 800 }), startWorker()]);
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-reload-'));
  storeFile = path.join(dir, 'chatgate.db');
  ({ key } = await issueKey(new SqliteKeyStore(storeFile), { name: 'reload' }));
  gateway = await startGatewayProcess(dir, 'reload', { keyStore: { type: 'sqlite', path: storeFile }, providers: { mock: { workers: [slowWorker.url] } } });
}, 30_000);
afterAll(async () => {
  if (gateway) await stopProcess(gateway.child);
  await Promise.all([slowWorker?.stop(), newWorker?.stop()]);
  rmSync(dir, { recursive: true, force: true });
});

const send = (model = 'mock/echo') => request(gateway.url, { ca: gateway.ca, headers: bearer(key), body: chatBody({ model }) });
const logged = (msg: string) => gateway.log.filter((line) => line.msg === msg);

async function hangUp(): Promise<void> {
  const before = logged('config reloaded').length + logged('config reload refused: the running config is kept').length;
  gateway.child.kill('SIGHUP');
  await eventually(() => (logged('config reloaded').length + logged('config reload refused: the running config is kept').length > before ? true : undefined), 10_000);
}

test('new providers, workers and limits take effect; requests in flight finish where they started; a bad file changes nothing', async () => {
  const inFlight = Promise.all(Array.from({ length: 5 }, () => send()));
  await slowWorker.reported(5);

  const reloaded = { ...base(), rateLimit: { requestsPerMinute: 3, timeoutMs: 150 }, shutdown: { drainTimeoutMs: 1234 }, usage: { retentionDays: 90, drainAfterDisconnectMs: 1000 }, providers: { mock: { workers: [newWorker.url] }, extra: { workers: [newWorker.url] } } };
  writeFileSync(configFile(), YAML.stringify(reloaded));
  await hangUp();
  expect(logged('config reloaded')).toHaveLength(1);
  const [kept] = logged('these settings change only on restart; the running values are kept');
  expect(kept!.settings).toEqual(expect.arrayContaining(['shutdown', 'rateLimit.timeoutMs']));
  expect(kept!.settings).not.toContain('providers');
  // The usage recorder outlives a reload: its retention is kept; the drain (read per request) changes.
  expect(kept!.settings).toContain('usage.retentionDays');
  expect(kept!.settings).not.toContain('usage.drainAfterDisconnectMs');

  expect((await inFlight).map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
  expect(slowWorker.received).toHaveLength(5);

  expect((await send()).status).toBe(200);
  expect((await send('extra/echo')).status).toBe(200);
  expect(await newWorker.reported(2)).toHaveLength(2);
  expect(slowWorker.received).toHaveLength(5);

  writeFileSync(configFile(), YAML.stringify({ ...base(), providers: { mock: { workers: ['not a url'] } } }));
  await hangUp();
  const [refused] = logged('config reload refused: the running config is kept');
  expect(String(refused!.err)).toContain('providers.mock.workers');

  expect((await send('extra/echo')).status).toBe(200); // the kept config: extra still exists...
  const limited = await send();
  expect(limited.status).toBe(429); // ...and so does its limit of 3 requests a minute
  expect(limited.json().error.code).toBe('rate_limit_exceeded');
  expect(await newWorker.reported(3)).toHaveLength(3);

  writeFileSync(configFile(), YAML.stringify(reloaded));
  await hangUp();
  expect(logged('config reloaded')).toHaveLength(2);
  expect((await send()).status).toBe(429); // the counters carried over the reload
}, 30_000);

test('a file that loads but cannot be served is refused and the gateway lives on; restart-only settings keep their running values', async () => {
  writeFileSync(configFile(), YAML.stringify({ ...base(), providers: { mock: { workers: [newWorker.url], apiKeyEnv: 'CHATGATE_TEST_UNSET_VARIABLE' } } }));
  await hangUp();
  expect(String(logged('config reload refused: the running config is kept').at(-1)!.err)).toContain('CHATGATE_TEST_UNSET_VARIABLE');
  expect(gateway.child.exitCode).toBeNull();

  writeFileSync(configFile(), YAML.stringify({ ...base(), limits: { maxBodyBytes: 10 }, providers: { mock: { workers: [newWorker.url] } } }));
  const reloads = logged('config reloaded').length;
  await hangUp();
  expect(logged('config reloaded')).toHaveLength(reloads + 1);
  expect(logged('these settings change only on restart; the running values are kept').at(-1)).toEqual(expect.objectContaining({ settings: expect.arrayContaining(['limits']) }));
  expect((await send()).status).toBe(200); // a body of more than 10 bytes: the running limit still applies
}, 30_000);

test('a SIGHUP while the gateway starts: it is not killed, and reloads once it is up', async () => {
  const database = await createTestDatabase();
  const relay = await heldRelay(database.url);
  const { child, listening } = spawnGatewayProcess(dir, 'hung-up-while-starting', {
    keyStore: { type: 'postgres', url: relay.url },
    providers: { mock: { workers: [newWorker.url] } },
  });
  try {
    await relay.firstConnection;
    child.kill('SIGHUP');
    relay.release();
    const started = await listening;
    await eventually(() => (started.log.some((line) => line.msg === 'config reloaded') ? true : undefined), 10_000);
    expect({ code: child.exitCode, signal: child.signalCode }).toEqual({ code: null, signal: null }); // still running
  } finally {
    await stopProcess(child);
    relay.close();
    await database.drop();
  }
});
