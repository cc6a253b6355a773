/**
 * Client tokens across replicas: two gateway processes on one PostgreSQL. A token minted on one works
 * on the other (one signing secret a day, in the store, the first made winning), two replicas minting
 * at once agree on it, and a revocation of the parent key on one stops the token on both within a
 * second (the change feed, as for the key itself).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { bearer, chatBody, request } from '../helpers/http';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres';
import { startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';
import { eventually } from '../helpers/time';

const TOKEN = 'client-token-admin-token-0123456789';
let worker: WorkerProcess;
let database: TestDatabase;
let replicas: [GatewayProcess, GatewayProcess];
let dir: string;

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-client-tokens-'));
  [worker, database] = await Promise.all([startWorker(), createTestDatabase()]);
  const settings = { admin: { host: '127.0.0.1', port: 0, token: TOKEN }, providers: { mock: { workers: [worker.url] } }, keyStore: { type: 'postgres', url: database.url } };
  replicas = (await Promise.all(['a', 'b'].map((name) => startGatewayProcess(dir, name, settings)))) as [GatewayProcess, GatewayProcess];
});
afterAll(async () => {
  await Promise.all((replicas ?? []).map((replica) => stopProcess(replica.child)));
  await worker?.stop();
  await database?.drop();
  rmSync(dir, { recursive: true, force: true });
});

const admin = (apiPath: string, body: unknown) => request(replicas[0].adminUrl, { path: `/admin/api${apiPath}`, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
const mint = (replica: GatewayProcess, key: string) => request(replica.url, { path: '/v1/client-tokens', ca: replica.ca, headers: { ...bearer(key), 'content-type': 'application/json' }, body: '{"ttlSeconds": 600}' });
const chat = (replica: GatewayProcess, token: string) => request(replica.url, { ca: replica.ca, headers: bearer(token), body: chatBody() });

test('minted on either replica at once, a token works on both; revoking its key on one stops it on both within a second', async () => {
  const created = (await admin('/keys', { name: 'browser-app' })).json<{ id: string; key: string }>();
  // Both replicas mint their first token of the day at once: each makes a signing secret, one is kept.
  const [onA, onB] = await Promise.all(replicas.map(async (replica) => (await mint(replica, created.key)).json<{ token: string }>().token));
  for (const token of [onA!, onB!]) for (const replica of replicas) expect((await chat(replica, token)).status).toBe(200);

  const revokedAt = Date.now();
  expect((await admin(`/keys/${created.id}/revoke`, {})).status).toBe(200);
  const stoppedAfter = await Promise.all(
    replicas.map((replica) => eventually(async () => ((await chat(replica, onA!)).status === 401 ? Date.now() - revokedAt : undefined), 5000)),
  );
  process.stderr.write(`client token refused on both replicas ${Math.max(...stoppedAfter)} ms after its key was revoked\n`);
  expect(Math.max(...stoppedAfter)).toBeLessThan(1000);
}, 60_000);
