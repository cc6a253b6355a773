/**
 * Rotation with grace through the admin API, on two gateway replicas sharing one PostgreSQL: the
 * replaced secret keeps working on both for `graceSeconds`, then stops on both (its end is in the
 * record, so no cache keeps it longer); a revocation during the grace stops both secrets on both
 * replicas within a second; a bad `graceSeconds` or an unknown field is refused 400 and rotates
 * nothing; the audit trail says how long the grace was.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { bearer, chatBody, request } from '../helpers/http';
import { sample, scrape } from '../helpers/metrics';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres';
import { startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';
import { eventually } from '../helpers/time';

const TOKEN = 'rotation-grace-admin-token-0123456789';
let worker: WorkerProcess;
let database: TestDatabase;
let dir: string;
let replicas: GatewayProcess[] = [];

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-grace-'));
  [worker, database] = await Promise.all([startWorker(), createTestDatabase()]);
  const settings = {
    admin: { host: '127.0.0.1', port: 0, token: TOKEN },
    providers: { mock: { workers: [worker.url] } },
    keyStore: { type: 'postgres', url: database.url },
  };
  replicas = await Promise.all(['a', 'b'].map((name) => startGatewayProcess(dir, name, settings)));
});
afterAll(async () => {
  await Promise.all(replicas.map((replica) => stopProcess(replica.child)));
  await worker?.stop();
  await database?.drop();
  rmSync(dir, { recursive: true, force: true });
});

const admin = (method: string, apiPath: string, body?: unknown) =>
  request(replicas[0]!.adminUrl, { method, path: `/admin/api${apiPath}`, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
const chat = (replica: GatewayProcess, key: string) => request(replica.url, { ca: replica.ca, headers: bearer(key), body: chatBody() }).then((answer) => answer.status);
/** The status each replica answers the key with. */
const onBoth = (key: string) => Promise.all(replicas.map((replica) => chat(replica, key)));

async function newKey(name: string) {
  const made = (await admin('POST', '/keys', { name })).json<{ id: string; key: string }>();
  expect(await onBoth(made.key)).toEqual([200, 200]); // cached on both replicas before the rotation
  return made;
}

test('the replaced secret works on both replicas for graceSeconds, then on neither; the new one throughout', async () => {
  const { id, key: old } = await newKey('graceful');
  const rotated = await admin('POST', `/keys/${id}/rotate`, { graceSeconds: 3 });
  expect(rotated.status).toBe(200);
  const body = rotated.json<{ key: string; previousKeyExpiresAt: string }>();
  const ends = Date.parse(body.previousKeyExpiresAt);
  expect(ends - Date.now()).toBeGreaterThan(2000);
  expect(ends - Date.now()).toBeLessThanOrEqual(3000);
  expect(await onBoth(old)).toEqual([200, 200]);
  expect(await onBoth(body.key)).toEqual([200, 200]);
  expect((await admin('GET', `/keys/${id}`)).json<{ previousKeyExpiresAt: string | null }>().previousKeyExpiresAt).toBe(body.previousKeyExpiresAt);
  await eventually(async () => (Date.now() >= ends ? true : undefined), 5000);
  expect(await onBoth(old)).toEqual([401, 401]); // at its end, on both, with no cache in the way
  expect(await onBoth(body.key)).toEqual([200, 200]);
  expect((await admin('GET', `/keys/${id}`)).json<{ previousKeyExpiresAt: string | null }>().previousKeyExpiresAt).toBeNull();
  for (const replica of replicas) expect(sample(await scrape(replica.adminUrl), 'chatgate_auth_failures_total{reason="rotated"}')).toBeGreaterThanOrEqual(1);
  const account = (await admin('GET', `/keys/${id}`)).json<{ accountId: string }>().accountId;
  const audit = (await admin('GET', `/accounts/${account}/audit`)).json<{ data: Array<{ action: string; target: string; details?: { graceSeconds?: number } }> }>().data;
  expect(audit.find((event) => event.action === 'key.rotated' && event.target === id)?.details).toEqual({ graceSeconds: 3 });
});

test('revoked during its grace: both secrets stop on both replicas within a second', async () => {
  const { id, key: old } = await newKey('revoked in grace');
  const { key: fresh } = (await admin('POST', `/keys/${id}/rotate`, { graceSeconds: 600 })).json<{ key: string }>();
  expect(await onBoth(old)).toEqual([200, 200]);
  expect(await onBoth(fresh)).toEqual([200, 200]);
  expect((await admin('POST', `/keys/${id}/revoke`)).status).toBe(200);
  const revokedAt = Date.now();
  await eventually(async () => ((await onBoth(old)).every((status) => status === 401) && (await onBoth(fresh)).every((status) => status === 401) ? true : undefined), 3000);
  expect(Date.now() - revokedAt).toBeLessThan(1000);
});

test('a rotation without grace stops the old secret at once, everywhere', async () => {
  const { id, key: old } = await newKey('no grace');
  const rotated = (await admin('POST', `/keys/${id}/rotate`)).json<{ key: string; previousKeyExpiresAt: string | null }>();
  expect(rotated.previousKeyExpiresAt).toBeNull();
  await eventually(async () => ((await onBoth(old)).every((status) => status === 401) ? true : undefined), 1000);
  expect(await onBoth(rotated.key)).toEqual([200, 200]);
});

test('a bad graceSeconds or an unknown field: 400 naming it, and the key is not rotated', async () => {
  const { id, key } = await newKey('bad bodies');
  for (const [body, param] of [
    [{ graceSeconds: 604_801 }, 'graceSeconds'],
    [{ graceSeconds: -1 }, 'graceSeconds'],
    [{ graceSeconds: 1.5 }, 'graceSeconds'],
    [{ graceSeconds: '60' }, 'graceSeconds'],
    [{ graceSeconds: null }, 'graceSeconds'],
    [{ grace: 60 }, 'grace'],
  ] as const) {
    const answer = await admin('POST', `/keys/${id}/rotate`, body);
    expect({ body, status: answer.status, param: answer.json<{ error: { param: string } }>().error.param }).toEqual({ body, status: 400, param });
  }
  expect(await onBoth(key)).toEqual([200, 200]);
  expect((await admin('POST', `/keys/${id}/rotate`, { graceSeconds: 604_800 })).status).toBe(200); // 7 days is allowed
});
