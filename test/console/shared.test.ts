/**
 * The console on two gateway replicas over one PostgreSQL: a session made through one replica is
 * used, and ended, through the other (it lives in the store, which both read); a key an owner
 * creates through one works through both; and a dump of the database holds no password, no session
 * token, no one-time link and no key in clear.
 */
import { execFileSync } from 'node:child_process';
import { startReplicas, type GatewayProcess, type Replicas } from '../helpers/gateway-process';
import { bearer, chatBody, request, type RawResponse } from '../helpers/http';
import { startWorker, type WorkerProcess } from '../helpers/processes';
import { eventually } from '../helpers/time';

const TOKEN = 'console-shared-admin-token-0123456789';
const PASSWORD = 'a password for both replicas';
let worker: WorkerProcess;
let replicas: Replicas;
let a: GatewayProcess;
let b: GatewayProcess;

beforeAll(async () => {
  worker = await startWorker();
  replicas = await startReplicas('console-shared', TOKEN, { providers: { mock: { workers: [worker.url] } } });
  ({ a, b } = replicas);
});
afterAll(async () => {
  await replicas?.stop();
  await worker?.stop();
});

const call = (replica: GatewayProcess, cookie: string | undefined, method: string, apiPath: string, body?: unknown): Promise<RawResponse> =>
  request(replica.url, {
    ca: replica.ca,
    method,
    path: `/console/api${apiPath}`,
    headers: { origin: `https://${new URL(replica.url).host}`, 'content-type': 'application/json', ...(cookie ? { cookie } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });

test('a session made on one replica works on the other, and signing out on the other ends it on both', async () => {
  const account = (await replicas.admin('POST', '/accounts', { name: 'shared-team' })).json<{ id: string }>().id;
  expect((await replicas.admin('POST', `/accounts/${account}/members`, { email: 'owner@example.com', role: 'owner', password: PASSWORD })).status).toBe(201);

  const signedIn = await call(a, undefined, 'POST', '/session', { email: 'owner@example.com', password: PASSWORD });
  expect(signedIn.status).toBe(200);
  const cookie = String(signedIn.headers['set-cookie']).split(';')[0]!;
  const sessionToken = cookie.split('=')[1]!;

  const created = await call(b, cookie, 'POST', '/keys', { name: 'made on b' });
  expect(created.status).toBe(201);
  const { key } = created.json<{ key: string }>();
  for (const replica of [a, b]) expect((await request(replica.url, { ca: replica.ca, headers: bearer(key), body: chatBody() })).status).toBe(200);
  expect((await call(a, cookie, 'GET', '/keys')).json<{ data: unknown[] }>().data).toHaveLength(1);

  const link = (await call(a, cookie, 'POST', '/members', { email: 'invited@example.com', role: 'member' })).json<{ passwordLink: string }>().passwordLink;
  const linkToken = link.split('#set-password=')[1]!;

  expect((await call(b, cookie, 'DELETE', '/session')).status).toBe(204);
  for (const replica of [a, b]) expect((await call(replica, cookie, 'GET', '/session')).status).toBe(401);

  // Each change is a log line too ("log":"audit"), for the operator's pipeline, written by the replica that made it.
  const auditLines = await eventually(() => {
    const lines = [...a.log, ...b.log].filter((line) => line.log === 'audit');
    return lines.some((line) => line.action === 'session.ended') ? lines : undefined;
  });
  expect(auditLines.map((line) => line.action)).toEqual(expect.arrayContaining(['member.added', 'session.created', 'key.created', 'password.link_created', 'session.ended']));
  expect(auditLines.find((line) => line.action === 'key.created')).toMatchObject({ actor: 'owner@example.com', accountId: account, client: '127.0.0.1' });
  const logs = JSON.stringify([...a.log, ...b.log]);
  for (const secret of [PASSWORD, key, sessionToken, linkToken]) expect(logs).not.toContain(secret);

  // What the database holds: digests and scrypt hashes only.
  const dump = execFileSync('pg_dump', ['--data-only', replicas.database.url], { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  expect(dump).toContain('owner@example.com'); // the dump is the right one
  expect(dump).toContain('scrypt$');
  for (const secret of [PASSWORD, key, key.slice(4), sessionToken, linkToken]) expect(dump).not.toContain(secret);
});
