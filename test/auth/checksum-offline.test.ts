/**
 * A made-up key costs no store lookup: a gateway on PostgreSQL behind a relay the test cuts. With the
 * store unreachable, a key of today's form whose checksum does not hold is refused 401 invalid_api_key
 * (it never needed the store), while an unknown key of the old form, which only the store can judge,
 * gets 503 key_store_unavailable; a flood of 300 made-up keys is all 401; the key in use is still
 * served from the cache, and so is a client token it minted.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { BASE62 } from '../../src/common/key-shape';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { bearer, chatBody, request } from '../helpers/http';
import { freePort } from '../helpers/net';
import { createTestDatabase, relayTo, type TestDatabase } from '../helpers/postgres';
import { startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';

const TOKEN = 'checksum-offline-admin-token-0123456789';
let dir: string;
let database: TestDatabase;
let worker: WorkerProcess;
let gateway: GatewayProcess;
let relay: ReturnType<typeof relayTo>;

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-checksum-'));
  [database, worker] = await Promise.all([createTestDatabase(), startWorker()]);
  relay = relayTo(database.url, await freePort());
  await relay.open();
  gateway = await startGatewayProcess(dir, 'checksum', {
    admin: { host: '127.0.0.1', port: 0, token: TOKEN },
    providers: { mock: { workers: [worker.url] } },
    keyStore: { type: 'postgres', url: relay.url, timeoutMs: 300 },
  });
});
afterAll(async () => {
  if (gateway) await stopProcess(gateway.child);
  relay?.close();
  await worker?.stop();
  await database?.drop();
  rmSync(dir, { recursive: true, force: true });
});

const chat = (key: string) => request(gateway.url, { ca: gateway.ca, headers: bearer(key), body: chatBody() });
type Failure = { error: { code: string; type: string } };

test('the store cut: a key whose checksum does not hold is 401 without it; an unknown key of the old form is 503; the key in use still serves', async () => {
  const made = await request(gateway.adminUrl, { path: '/admin/api/keys', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify({ name: 'in use' }) });
  const key = made.json<{ key: string }>().key;
  expect((await chat(key)).status).toBe(200);
  const last = key.at(-1)!;
  const corrupted = key.slice(0, -1) + BASE62[(BASE62.indexOf(last) + 1) % 62];
  const mint = () => request(gateway.url, { path: '/v1/client-tokens', ca: gateway.ca, headers: bearer(key), body: '{}' });
  const { token } = (await mint()).json<{ token: string }>();
  expect((await chat(token)).status).toBe(200);

  relay.close();
  // A client token: its day's secret and its key known here, it is served and minted without the
  // store; one of a day whose secret only the store could give is 503, never a 500 or a 401.
  expect((await chat(token)).status).toBe(200);
  expect((await mint()).status).toBe(201);
  const yesterday = new Date(Date.now() - 86_400_000).toISOString().slice(0, 10).replaceAll('-', '');
  const unread = await chat(`cgt_${yesterday}.${token.split('.')[1]}.${'A'.repeat(43)}`);
  expect(unread.status).toBe(503);
  expect(unread.json<Failure>().error.code).toBe('key_store_unavailable');
  const refused = await chat(corrupted);
  expect(refused.status).toBe(401);
  expect(refused.json<Failure>().error.code).toBe('invalid_api_key');
  const oldForm = await chat(`cgk_${randomBytes(32).toString('base64url')}`);
  expect(oldForm.status).toBe(503);
  expect(oldForm.json<Failure>().error.code).toBe('key_store_unavailable');
  // A flood of made-up keys of today's shape: every one 401, none waits for the store.
  const flood = await Promise.all(Array.from({ length: 300 }, () => chat(`cgk_${[...randomBytes(49)].map((b) => BASE62[b % 62]).join('')}`)));
  expect(flood.map((answer) => answer.status).filter((status) => status !== 401)).toEqual([]);
  expect((await chat(key)).status).toBe(200);
});
