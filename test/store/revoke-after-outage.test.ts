/**
 * A revocation right after the key store returns, on two gateway processes over a PostgreSQL of the
 * test's own, stopped for 4 s (long enough that each replica's listening connection backs off to
 * its longest reconnect delay, 5 s): the revoking replica refuses the key at once (its own change
 * needs no notification), the other within a second (it reads the key change log while it cannot
 * LISTEN), well before LISTEN is back.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { bearer, chatBody, request } from '../helpers/http';
import { ThrowawayPostgres } from '../helpers/postgres';
import { startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';
import { eventually, sleep } from '../helpers/time';

const TOKEN = 'revoke-outage-admin-token-0123456789';
let worker: WorkerProcess;
let dir: string;
let database: ThrowawayPostgres;
let replicas: [GatewayProcess, GatewayProcess];

beforeAll(async () => {
  worker = await startWorker();
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-revoke-outage-'));
  database = await ThrowawayPostgres.start();
  const settings = {
    admin: { host: '127.0.0.1', port: 0, token: TOKEN },
    providers: { mock: { workers: [worker.url] } },
    keyStore: { type: 'postgres', url: database.url, timeoutMs: 400 },
  };
  replicas = (await Promise.all(['a', 'b'].map((name) => startGatewayProcess(dir, name, settings)))) as [GatewayProcess, GatewayProcess];
}, 60_000);
afterAll(async () => {
  await Promise.all((replicas ?? []).map((replica) => stopProcess(replica.child)));
  await worker?.stop();
  database?.destroy();
  rmSync(dir, { recursive: true, force: true });
});

const admin = (replica: GatewayProcess, method: string, apiPath: string, body?: unknown) =>
  request(replica.adminUrl, { method, path: `/admin/api${apiPath}`, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
const chat = (replica: GatewayProcess, key: string) => request(replica.url, { ca: replica.ca, headers: bearer(key), body: chatBody() });

test('revoked 0.3 s after PostgreSQL returns: refused at once by the revoking replica, within a second by the other', async () => {
  const [a, b] = replicas;
  const made = (await admin(a, 'POST', '/keys', { name: 'in use' })).json<{ key: string; id: string }>();
  // Both replicas know (cache) the key.
  expect((await chat(a, made.key)).status).toBe(200);
  expect((await chat(b, made.key)).status).toBe(200);

  database.stopSync();
  await sleep(4000);
  database.startSync();
  await sleep(300);
  const revoked = await eventually(async () => {
    const answer = await admin(a, 'POST', `/keys/${made.id}/revoke`);
    return answer.status === 200 ? answer : undefined;
  }, 5000);
  const revokedAt = Date.now();
  expect(revoked.json<{ revokedAt: string | null }>().revokedAt).not.toBeNull();

  expect((await chat(a, made.key)).status).toBe(401);
  await eventually(async () => ((await chat(b, made.key)).status === 401 ? true : undefined), 3000);
  const tookMs = Date.now() - revokedAt;
  expect(tookMs).toBeLessThan(1000);
}, 30_000);
