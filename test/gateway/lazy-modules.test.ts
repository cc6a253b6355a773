/**
 * A serving process loads an optional integration's library only when its config uses it: the
 * OpenTelemetry SDK for tracing, pg for the PostgreSQL key store, better-sqlite3 for the SQLite one,
 * ioredis for Redis rate limits and selfsigned for a first start's certificate. Together they were half of a process's 986 modules and
 * 19 MiB of its RSS. Each process here reports the files it loaded when it exits.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { startGatewayProcess } from '../helpers/gateway-process';
import { bearer, chatBody, request, type RawResponse } from '../helpers/http';
import { listenOnLoopback } from '../helpers/net';
import { createTestDatabase } from '../helpers/postgres';
import { startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';
import { sharedRedisUrl } from '../helpers/redis';
import { issueKey } from '../../src/auth/issue';
import { sqliteDriver } from '../../src/store/sqlite/driver';
import { SqliteKeyStore } from '../../src/store/sqlite/store';
import { PostgresKeyStore } from '../../src/store/postgres/store';

const OPTIONAL_LIBRARIES = ['@opentelemetry/sdk-trace', '@opentelemetry/exporter-trace-otlp-http', 'pg', 'ioredis', 'selfsigned', 'better-sqlite3'];

let worker: WorkerProcess;
let dir: string;
let reporter: string;

beforeAll(async () => {
  worker = await startWorker();
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-lazy-'));
  reporter = path.join(dir, 'report-modules.js');
  writeFileSync(
    reporter,
    `process.on('exit', () => require('node:fs').writeFileSync(${JSON.stringify(dir)} + '/modules-' + process.pid + '.json', JSON.stringify(Object.keys(require.cache))));\n`,
  );
});
afterAll(async () => {
  await worker?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** Starts a gateway, sends it one chat request with `key` (answered 200), stops it, and names the optional libraries it had loaded. */
async function optionalLibrariesLoaded(name: string, key: string, settings: Record<string, unknown>, env: NodeJS.ProcessEnv = {}): Promise<{ loaded: string[]; answer: RawResponse }> {
  const gateway = await startGatewayProcess(dir, name, { providers: { mock: { workers: [worker.url] } }, ...settings }, { ...env, NODE_OPTIONS: `--require ${reporter}` });
  const answer = await request(gateway.url, { ca: gateway.ca, headers: bearer(key), body: chatBody() });
  await stopProcess(gateway.child);
  expect(answer.status).toBe(200);
  const files = JSON.parse(readFileSync(path.join(dir, `modules-${gateway.child.pid}.json`), 'utf8')) as string[];
  return { loaded: OPTIONAL_LIBRARIES.filter((library) => files.some((file) => file.includes(`${path.sep}node_modules${path.sep}${library}${path.sep}`))), answer };
}

/** An OTLP/HTTP endpoint that takes every export and counts them. */
async function traceReceiver(): Promise<{ url: string; server: http.Server; exports: number }> {
  let exports = 0;
  const server = http.createServer((req, res) => {
    req.resume().on('end', () => {
      exports++;
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  const url = await listenOnLoopback(server);
  return {
    url,
    server,
    get exports() {
      return exports;
    },
  };
}

async function sqliteStoreWithKey(name: string): Promise<{ key: string; keyStore: Record<string, string> }> {
  const storeFile = path.join(dir, `${name}.db`);
  const { key } = await issueKey(new SqliteKeyStore(storeFile), { name });
  return { key, keyStore: { type: 'sqlite', path: storeFile } };
}

/** The embedded store's library: better-sqlite3 on a Node without its own node:sqlite (20), none on one with it (24). */
const SQLITE_LIBRARY = sqliteDriver() === 'better-sqlite3' ? ['better-sqlite3'] : [];

test("with the embedded defaults and its certificate already made, none is loaded but SQLite's", async () => {
  const { key, keyStore } = await sqliteStoreWithKey('defaults');
  await optionalLibrariesLoaded('defaults', key, { keyStore }); // the first start makes the certificate
  expect((await optionalLibrariesLoaded('defaults', key, { keyStore })).loaded).toEqual(SQLITE_LIBRARY);
});

test('a first start loads selfsigned to make its certificate', async () => {
  const { key, keyStore } = await sqliteStoreWithKey('first-start');
  expect((await optionalLibrariesLoaded('first-start', key, { keyStore })).loaded).toEqual(['selfsigned', ...SQLITE_LIBRARY]);
});

test('tracing, the PostgreSQL key store and Redis rate limits load their libraries, and work', async () => {
  const database = await createTestDatabase();
  const receiver = await traceReceiver();
  try {
    const store = await PostgresKeyStore.open(database.url);
    const { key } = await issueKey(store, { name: 'integrations', rateLimit: { requestsPerMinute: 100 } });
    await store.close();
    const settings = { keyStore: { type: 'postgres', url: database.url }, tracing: { otlpEndpoint: `${receiver.url}/v1/traces` }, rateLimit: { store: 'redis', url: await sharedRedisUrl() } };
    await optionalLibrariesLoaded('integrations', key, settings); // the first start makes the certificate
    const { loaded, answer } = await optionalLibrariesLoaded('integrations', key, settings);
    expect(loaded).toEqual(['@opentelemetry/sdk-trace', '@opentelemetry/exporter-trace-otlp-http', 'pg', 'ioredis']);
    // The key came from PostgreSQL (200); Redis answered the limiter (quota headers are only sent then:
    // with Redis away the request is admitted without them); each process exported its span as it stopped.
    expect(answer.headers['x-ratelimit-remaining-requests']).toMatch(/^9\d$/);
    expect(receiver.exports).toBe(2);
  } finally {
    await database.drop();
    receiver.server.close();
  }
});
