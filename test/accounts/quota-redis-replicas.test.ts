/**
 * Quota counters that survive Redis, on two gateway replicas sharing one PostgreSQL and a Redis of the
 * test's own (no persistence): a daily quota spent through both stays spent when Redis is killed and
 * restarted empty (every request meanwhile refused), and while Redis is frozen the replicas keep
 * counting each other's use through the store instead of each counting only its own; thawed, Redis
 * and the store both hold exactly what was served.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Redis from 'ioredis';
import pg from 'pg';
import { estimatePromptTokens } from '../../src/common/estimate';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { bearer, chatBody, request } from '../helpers/http';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres';
import { startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';
import { ThrowawayRedis } from '../helpers/redis';
import { eventually } from '../helpers/time';

const TOKEN = 'quota-redis-admin-token-0123456789';
let worker: WorkerProcess;
let redis: ThrowawayRedis;
let inspect: Redis;
let database: TestDatabase;
let replicas: [GatewayProcess, GatewayProcess];
let dir: string;

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-quota-redis-'));
  [worker, redis, database] = await Promise.all([startWorker(), ThrowawayRedis.start(), createTestDatabase()]);
  inspect = new Redis(redis.url, { maxRetriesPerRequest: 1 });
  inspect.on('error', () => undefined);
  const settings = {
    admin: { host: '127.0.0.1', port: 0, token: TOKEN },
    providers: { mock: { workers: [worker.url] } },
    keyStore: { type: 'postgres', url: database.url },
    auth: { lastUsedFlushMs: 1000 },
    quota: { syncMs: 200 },
    // 1 s for Redis calls: with 200 ms, on a loaded CI machine a replica's add to Redis timed out
    // while its write to the store went through, and the other replica, finding the counter in the
    // store and not in Redis, took Redis for emptied and reseeded it from the store, without the
    // first replica's unwritten use (a loss bounded by auth.lastUsedFlushMs, issue 51's notes).
    rateLimit: { store: 'redis', url: redis.url, timeoutMs: 1000 },
  };
  replicas = (await Promise.all(['a', 'b'].map((name) => startGatewayProcess(dir, name, settings)))) as [GatewayProcess, GatewayProcess];
});
afterAll(async () => {
  inspect?.disconnect();
  await Promise.all((replicas ?? []).map((replica) => stopProcess(replica.child)));
  await worker?.stop();
  redis?.child?.kill('SIGCONT');
  await redis?.stop();
  await database?.drop();
  rmSync(dir, { recursive: true, force: true });
});

const admin = (method: string, apiPath: string, body?: unknown) =>
  request(replicas[0].adminUrl, { method, path: `/admin/api${apiPath}`, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
// max_tokens bounds what each request reserves (quota.defaultReserveTokens, 1024, would not fit these quotas).
const chat = (replica: GatewayProcess, key: string, headers: Record<string, string> = {}) => request(replica.url, { ca: replica.ca, headers: { ...bearer(key), 'x-mock-tokens': '20', ...headers }, body: chatBody({ max_tokens: 20 }) });
const today = () => new Date().toISOString().slice(0, 10);
const ready = async (replica: GatewayProcess) => ((await (await fetch(`${replica.adminUrl}/readyz`)).json()) as { status: string }).status === 'ready';

async function meteredAccount(name: string, tokensPerDay: number) {
  const account = (await admin('POST', '/accounts', { name, quota: { tokensPerDay } })).json<{ id: string }>().id;
  const keys = await Promise.all(['first', 'second'].map(async (keyName) => (await admin('POST', '/keys', { name: keyName, account })).json<{ key: string }>().key));
  return { account, keys: keys as [string, string], scope: `account:${account}:d:${today()}` };
}

async function storeTotal(scope: string): Promise<number> {
  const client = new pg.Client({ connectionString: database.url });
  await client.connect();
  try {
    const { rows } = await client.query<{ tokens: string }>('select tokens from chatgate_quota_usage where scope = $1', [scope]);
    return Number(rows[0]?.tokens ?? 0);
  } finally {
    await client.end();
  }
}

test('a daily quota spent through both replicas stays spent when Redis is killed and restarted empty: every request meanwhile refused', async () => {
  const QUOTA = 400;
  const [a, b] = replicas;
  // Both replicas up and warm (connections made, scripts loaded) first: this test is about a restart,
  // not about a cold start's first Redis calls running past the deadline.
  await eventually(async () => ((await ready(a)) && (await ready(b)) ? true : undefined), 10_000);
  const warm = await meteredAccount('warm-up', 1_000_000);
  for (const replica of replicas) for (const key of warm.keys) expect((await chat(replica, key)).status).toBe(200);
  const { keys, scope } = await meteredAccount('restarted', QUOTA);
  let served = 0;
  const count = (response: Awaited<ReturnType<typeof chat>>) => {
    if (response.status === 200) served += response.json<{ usage: { total_tokens: number } }>().usage.total_tokens;
    return response;
  };
  // The counter made through one replica first, and in Redis, before both use it: two replicas making
  // a new counter at once is a race of its own (issue 51, open: one may reseed it and leave out a use
  // that ends meanwhile), not this test's subject, which is a restart.
  expect(count(await chat(a, keys[0])).status).toBe(200);
  await eventually(async () => (Number(await inspect.get(`chatgate:quota:${scope}`)) === served ? true : undefined), 10_000);
  let refused = false;
  for (let i = 0; i < 200 && !refused; i++) refused = count(await chat(i % 2 ? b : a, keys[i % 3 ? 0 : 1])).status === 429;
  expect(refused).toBe(true);
  // Refused on each replica one after the other, no request in flight: the quota, not a lease another
  // replica held for a request in flight (quota-leases.ts), is what refuses them.
  await eventually(async () => {
    const answers = [count(await chat(a, keys[0])), count(await chat(b, keys[1]))];
    return answers.every((response) => response.status === 429) ? true : undefined;
  });
  // Each replica's last use reaches Redis within a sync (or, an add cut by the deadline on a
  // loaded host, a later one: the bound is the frozen test's).
  let seen = 0;
  const spent = await eventually(async () => {
    seen = Number(await inspect.get(`chatgate:quota:${scope}`));
    return seen === served ? served : undefined;
  }, 10_000).catch((err: Error) => {
    throw new Error(`${err.message}: Redis holds ${seen}, served ${served}`);
  });
  // Spent to within one request's reservation (its prompt estimate, about 25 tokens, and its max_tokens
  // of 20): past that a request no longer fits, so the refusals may begin a little under the quota.
  const reservation = estimatePromptTokens(chatBody({ max_tokens: 20 })) + 20;
  expect(spent).toBeGreaterThan(QUOTA - reservation);

  const epoch = await inspect.get('chatgate:quota:epoch');
  await redis.stop();
  await redis.resume(); // empty: no persistence (the replicas seed it again within a sync or two)

  // Until both replicas are back on the new Redis and it holds the spent count again, every request is refused.
  const statuses: number[] = [];
  const codes = new Set<string>();
  await eventually(async () => {
    for (const [replica, key] of [[a, keys[0]], [b, keys[1]], [a, keys[1]], [b, keys[0]]] as const) {
      const response = await chat(replica, key);
      statuses.push(response.status);
      if (response.status === 429) codes.add(response.json().error.code);
    }
    if (statuses.some((status) => status !== 429)) return true; // served: failed below
    const seeded = Number(await inspect.get(`chatgate:quota:${scope}`).catch(() => 0));
    return seeded >= spent && (await ready(a)) && (await ready(b)) ? true : undefined;
  }, 15_000);
  expect(statuses.filter((status) => status !== 429)).toEqual([]);
  // Then a few more syncs (200 ms each) on the seeded counters.
  const seededAt = performance.now();
  await eventually(async () => {
    const answers = await Promise.all([chat(a, keys[0]), chat(b, keys[1])]);
    statuses.push(...answers.map((response) => response.status));
    return performance.now() - seededAt > 1000 ? true : undefined;
  });
  expect(statuses.filter((status) => status !== 429)).toEqual([]);
  expect([...codes]).toEqual(['insufficient_quota']);
  expect(epoch).toBeTruthy();
  expect(await inspect.get('chatgate:quota:epoch')).not.toBe(epoch); // it was empty: a new epoch
  expect(Number(await inspect.get(`chatgate:quota:${scope}`))).toBe(spent); // seeded once, not once per replica
  expect(await storeTotal(scope)).toBe(spent); // the truth in PostgreSQL
}, 60_000);

test("while Redis is frozen the replicas count each other's use through the store; thawed, Redis and the store hold exactly what was served", async () => {
  const QUOTA = 1000;
  const { keys, scope } = await meteredAccount('frozen', QUOTA);
  const [a, b] = replicas;
  await eventually(async () => ((await ready(a)) && (await ready(b)) ? true : undefined), 10_000);
  redis.child!.kill('SIGSTOP');
  let served = 0;
  try {
    // Sequential, alternating replicas, until both refuse: with each replica counting only its own
    // use, about twice the quota gets through.
    let bothRefused = false;
    for (let i = 0; i < 400 && !bothRefused; i += 2) {
      const answers = [await chat(a, keys[0], { 'x-mock-latency-ms': '100' }), await chat(b, keys[1], { 'x-mock-latency-ms': '100' })];
      for (const response of answers) if (response.status === 200) served += response.json<{ usage: { total_tokens: number } }>().usage.total_tokens;
      bothRefused = answers.every((response) => response.status === 429);
    }
    expect(bothRefused).toBe(true);
  } finally {
    redis.child!.kill('SIGCONT');
  }
  console.log(`quota ${QUOTA} tokens across two replicas with Redis frozen: ${served} served (${Math.round((served / QUOTA - 1) * 100)} % over)`);
  expect(served).toBeGreaterThanOrEqual(QUOTA);
  expect(served).toBeLessThanOrEqual(QUOTA * 1.35);
  // Thawed: each replica adds what it used meanwhile, once (a batch Redis ran late is not added again).
  await eventually(async () => (Number(await inspect.get(`chatgate:quota:${scope}`)) === served ? true : undefined), 10_000);
  await eventually(async () => ((await storeTotal(scope)) === served ? true : undefined), 10_000);
  expect(Number(await inspect.get(`chatgate:quota:${scope}`))).toBe(served);
}, 90_000);
