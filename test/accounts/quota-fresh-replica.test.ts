/**
 * A replica that just started does not judge a spent quota at 0. Two gateway processes share one
 * PostgreSQL and a Redis of the test's own, with a slow sync (5 s) so that the window is wide: a
 * quota spent through the first replica, then a burst of concurrent requests at a second replica
 * started afterwards (a restart, a scale-up). Its first requests wait for one read of the shared
 * totals, so the whole burst is refused; before, it admitted what fitted beside a count of 0 until
 * its first sync. The key's quota and its account's are both covered.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { bearer, chatBody, request } from '../helpers/http';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres';
import { startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';
import { ThrowawayRedis } from '../helpers/redis';

const TOKEN = 'quota-fresh-replica-admin-token-0123';
const QUOTA = 200;
let worker: WorkerProcess;
let redis: ThrowawayRedis;
let database: TestDatabase;
let dir: string;
const started: GatewayProcess[] = [];
let settings: Record<string, unknown>;

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-quota-fresh-'));
  [worker, redis, database] = await Promise.all([startWorker(), ThrowawayRedis.start(), createTestDatabase()]);
  settings = {
    admin: { host: '127.0.0.1', port: 0, token: TOKEN },
    providers: { mock: { workers: [worker.url] } },
    keyStore: { type: 'postgres', url: database.url },
    auth: { lastUsedFlushMs: 1000 },
    quota: { syncMs: 5000 },
    rateLimit: { store: 'redis', url: redis.url, timeoutMs: 1000 },
  };
});
afterAll(async () => {
  await Promise.all(started.map((replica) => stopProcess(replica.child)));
  await worker?.stop();
  await redis?.stop();
  await database?.drop();
  rmSync(dir, { recursive: true, force: true });
});

const start = async (name: string) => {
  const replica = await startGatewayProcess(dir, name, settings);
  started.push(replica);
  return replica;
};
const admin = (replica: GatewayProcess, method: string, apiPath: string, body?: unknown) =>
  request(replica.adminUrl, { method, path: `/admin/api${apiPath}`, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
const chat = (replica: GatewayProcess, key: string) => request(replica.url, { ca: replica.ca, headers: { ...bearer(key), 'x-mock-tokens': '20' }, body: chatBody({ max_tokens: 20 }) });

/** Spends the quota through `replica` (until refused) and waits until its use is in the shared counters. */
async function spend(replica: GatewayProcess, key: string): Promise<number> {
  let served = 0;
  for (let i = 0; i < 40; i++) {
    const answer = await chat(replica, key);
    if (answer.status === 429) break;
    expect(answer.status).toBe(200);
    served++;
  }
  expect(served).toBeGreaterThan(0);
  return served;
}

async function burst(replica: GatewayProcess, key: string) {
  const answers = await Promise.all(Array.from({ length: 20 }, () => chat(replica, key)));
  return { served: answers.filter((a) => a.status === 200).length, refused: answers.filter((a) => a.status === 429 && a.json<{ error: { code: string } }>().error.code === 'insufficient_quota').length };
}

test('a quota spent through one replica is refused whole by a replica started afterwards, at its first burst', async () => {
  const a = await start('a');
  const account = (await admin(a, 'POST', '/accounts', { name: 'spent by key' })).json<{ id: string }>().id;
  const keyed = (await admin(a, 'POST', '/keys', { name: 'keyed', account, quota: { tokensPerDay: QUOTA } })).json<{ key: string }>().key;
  const metered = (await admin(a, 'POST', '/accounts', { name: 'spent by account', quota: { tokensPerDay: QUOTA } })).json<{ id: string }>().id;
  const underAccount = (await admin(a, 'POST', '/keys', { name: 'under the account', account: metered })).json<{ key: string }>().key;
  await spend(a, keyed);
  await spend(a, underAccount);
  // a's use reaches the shared counters at its next sync (every 5 s) or its stop: stopped here, so the
  // counters hold all of it before the second replica starts.
  await stopProcess(a.child);
  started.splice(started.indexOf(a), 1);

  const b = await start('b');
  expect(await burst(b, keyed)).toEqual({ served: 0, refused: 20 });
  expect(await burst(b, underAccount)).toEqual({ served: 0, refused: 20 });
});

test('a quota with room left is not refused by the wait: the fresh replica serves what fits', async () => {
  const c = await start('c');
  const account = (await admin(c, 'POST', '/accounts', { name: 'room left' })).json<{ id: string }>().id;
  const key = (await admin(c, 'POST', '/keys', { name: 'roomy', account, quota: { tokensPerDay: 100_000 } })).json<{ key: string }>().key;
  const answers = await Promise.all(Array.from({ length: 10 }, () => chat(c, key)));
  expect(answers.map((answer) => answer.status)).toEqual(Array(10).fill(200));
});
