/**
 * A key store outage under load, on two gateway processes over a PostgreSQL of the test's own: the
 * database stopped, then frozen (SIGSTOP on every one of its processes: a partition, a stuck
 * primary). Known keys keep serving (stale-if-error, past their cache TTL), unknown keys get 503
 * within the store's deadline, nothing waits past it, /readyz answers in time and says degraded (200),
 * the admin API answers 503 key_store_unavailable with a request id, and each replica logs the outage
 * once and its end once. After it, a revocation reaches both replicas again.
 */
import { execFileSync } from 'node:child_process';
import https from 'node:https';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { issueKey } from '../../src/auth/issue';
import { generateKey } from '../../src/auth/keys';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { bearer, chatBody, request } from '../helpers/http';
import { sample, scrape } from '../helpers/metrics';
import { ThrowawayPostgres } from '../helpers/postgres';
import { startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';
import { PostgresKeyStore } from '../../src/store/postgres/store';
import { eventually, sleep } from '../helpers/time';

const TOKEN = 'outage-test-admin-token-0123456789';
const STORE_TIMEOUT_MS = 400;
const CACHE_TTL_MS = 1000;
/** An outage longer than the cache TTL: the keys in use expire in the middle of it. */
const OUTAGE_MS = 3 * CACHE_TTL_MS;

let worker: WorkerProcess;
let dir: string;
let database: ThrowawayPostgres;
let replicas: [GatewayProcess, GatewayProcess];
let key: string;
let keyId: string;

beforeAll(async () => {
  worker = await startWorker();
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-outage-'));
  database = await ThrowawayPostgres.start();
  const settings = {
    admin: { host: '127.0.0.1', port: 0, token: TOKEN },
    providers: { mock: { workers: [worker.url] } },
    keyStore: { type: 'postgres', url: database.url, timeoutMs: STORE_TIMEOUT_MS },
    auth: { createFirstKey: false, cacheTtlMs: CACHE_TTL_MS },
  };
  replicas = (await Promise.all(['a', 'b'].map((name) => startGatewayProcess(dir, name, settings)))) as [GatewayProcess, GatewayProcess];
  const store = await PostgresKeyStore.open(database.url);
  ({ key, record: { id: keyId } } = await issueKey(store, { name: 'in use' }));
  await store.close();
}, 60_000);
afterAll(async () => {
  await Promise.all((replicas ?? []).map((replica) => stopProcess(replica.child)));
  await worker?.stop();
  database?.destroy();
  rmSync(dir, { recursive: true, force: true });
});

interface Outcome {
  replica: number;
  status: number | string;
  ms: number;
}

/** Requests with `key` through both replicas, on keep-alive connections, until `stop()`: what each got. */
function load(useKey: string, concurrency = 4) {
  const agents = replicas.map((replica) => new https.Agent({ keepAlive: true, ca: replica.ca, maxSockets: concurrency }));
  const outcomes: Outcome[] = [];
  let running = true;
  const send = (index: number) =>
    new Promise<number | string>((resolve) => {
      const replica = replicas[index]!;
      const started = performance.now();
      const record = (status: number | string) => {
        outcomes.push({ replica: index, status, ms: performance.now() - started });
        resolve(status);
      };
      const req = https.request(`${replica.url}/v1/chat/completions`, { method: 'POST', agent: agents[index], servername: 'localhost', headers: bearer(useKey) }, (res) => {
        res.resume();
        res.on('end', () => record(res.statusCode ?? 0));
        res.on('error', (err) => record(err.message));
      });
      req.on('error', (err) => record((err as NodeJS.ErrnoException).code ?? err.message));
      req.end(chatBody());
    });
  const loops = replicas.flatMap((_, index) =>
    Array.from({ length: concurrency }, async () => {
      // A replica that no longer accepts connections ends its loops (a failed test must not spin here).
      while (running) if ((await send(index)) === 'ECONNREFUSED') return;
    }),
  );
  return {
    outcomes,
    async stop() {
      running = false;
      await Promise.all(loops);
      for (const agent of agents) agent.destroy();
      return outcomes;
    },
  };
}

const timed = async <T>(work: () => Promise<T>) => {
  const started = performance.now();
  const value = await work();
  return { value, ms: performance.now() - started };
};

/** What every replica must show while the store is away. */
async function duringOutage() {
  for (const replica of replicas) {
    const unknown = await timed(() => request(replica.url, { ca: replica.ca, headers: bearer(generateKey()), body: chatBody() }));
    expect(unknown.value.status).toBe(503);
    expect(unknown.value.json().error.code).toBe('key_store_unavailable');
    expect(unknown.ms).toBeLessThan(STORE_TIMEOUT_MS + 1000);

    const readiness = await timed(() => fetch(`${replica.adminUrl}/readyz`));
    expect(readiness.ms).toBeLessThan(2000);
    expect(readiness.value.status).toBe(200);
    expect(await readiness.value.json()).toEqual(expect.objectContaining({ status: 'degraded', checks: expect.objectContaining({ keyStore: 'degraded' }) }));

    const admin = await request(replica.adminUrl, { method: 'GET', path: '/admin/api/keys', headers: { authorization: `Bearer ${TOKEN}` } });
    expect(admin.status).toBe(503);
    expect(admin.json().error.code).toBe('key_store_unavailable');
    expect(admin.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
  }
}

function outageLines(replica: GatewayProcess) {
  return {
    down: replica.log.filter((line) => line.msg === String(line.msg) && (line.msg as string).startsWith('key store unreachable')).length,
    up: replica.log.filter((line) => line.msg === 'key store reachable again').length,
    failedRequests: replica.log.filter((line) => line.msg === 'request failed').length,
  };
}

async function expectRecovered(before: Array<ReturnType<typeof outageLines>>) {
  for (const [index, replica] of replicas.entries()) {
    await eventually(async () => ((await fetch(`${replica.adminUrl}/readyz`).then((r) => r.json() as Promise<{ status: string }>)).status === 'ready' ? true : undefined), 15_000);
    expect(sample(await scrape(replica.adminUrl), 'chatgate_dependency_up{dependency="key_store"}')).toBe(1);
    // Log lines reach stdout in batches (within 100 ms): wait for the end of the outage to be written.
    await eventually(() => (outageLines(replica).up > before[index]!.up ? true : undefined), 2000).catch(() => undefined);
    const after = outageLines(replica);
    expect({ down: after.down - before[index]!.down, up: after.up - before[index]!.up, failedRequests: after.failedRequests }).toEqual({ down: 1, up: 1, failedRequests: 0 });
  }
}

test('PostgreSQL stopped for longer than the cache TTL: the key in use keeps working on both replicas, nothing else gets in, one log line each way', async () => {
  const traffic = load(key);
  let outcomes: Outcome[];
  try {
    await sleep(500); // the key is in both caches
    const before = replicas.map(outageLines);
    database.stopSync();
    try {
      const outageStarted = performance.now();
      await duringOutage();
      const stillDown = OUTAGE_MS - (performance.now() - outageStarted);
      if (stillDown > 0) await sleep(stillDown);
      for (const replica of replicas) expect(sample(await scrape(replica.adminUrl), 'chatgate_dependency_up{dependency="key_store"}')).toBe(0);
    } finally {
      database.startSync();
    }
    await expectRecovered(before);
  } finally {
    outcomes = await traffic.stop();
  }

  expect(outcomes.filter((outcome) => outcome.status !== 200)).toEqual([]);
  for (const index of [0, 1]) expect(outcomes.filter((outcome) => outcome.replica === index).length).toBeGreaterThan(20);
  for (const replica of replicas) expect(sample(await scrape(replica.adminUrl), 'chatgate_key_cache_stale_served_total')).toBeGreaterThan(0);
}, 60_000);

test('PostgreSQL frozen (SIGSTOP): no request waits past the store deadline, known keys serve, unknown ones get 503 in time', async () => {
  const traffic = load(key);
  let outcomes: Outcome[];
  try {
    await sleep(500);
    const before = replicas.map(outageLines);
    const frozen = postgresProcesses(database);
    for (const pid of frozen) process.kill(pid, 'SIGSTOP');
    try {
      const outageStarted = performance.now();
      await duringOutage();
      const stillDown = OUTAGE_MS - (performance.now() - outageStarted);
      if (stillDown > 0) await sleep(stillDown);
    } finally {
      for (const pid of frozen) process.kill(pid, 'SIGCONT');
    }
    await expectRecovered(before);
  } finally {
    outcomes = await traffic.stop();
  }

  expect(outcomes.filter((outcome) => outcome.status !== 200)).toEqual([]);
  // No request waited for the freeze (3 s): the slowest waited a store deadline (the one that found the
  // store gone) and this host's scheduling, which on two busy cores reached 2.0 s once.
  expect(Math.max(...outcomes.map((outcome) => outcome.ms))).toBeLessThan(OUTAGE_MS);
}, 60_000);

test('after the outages, a revocation through one replica is refused by both', async () => {
  const [a, b] = replicas;
  const revoked = await request(a.adminUrl, { method: 'POST', path: `/admin/api/keys/${keyId}/revoke`, headers: { authorization: `Bearer ${TOKEN}` } });
  expect(revoked.status).toBe(200);
  for (const replica of [a, b]) {
    await eventually(async () => ((await request(replica.url, { ca: replica.ca, headers: bearer(key), body: chatBody() })).status === 401 ? true : undefined), 3000);
  }
});

/** The postmaster and every backend and helper it started: what a frozen server is made of. */
function postgresProcesses(server: ThrowawayPostgres): number[] {
  const postmaster = Number(readFileSync(path.join(server.dir, 'data', 'postmaster.pid'), 'utf8').split('\n')[0]);
  const children = execFileSync('pgrep', ['-P', String(postmaster)], { encoding: 'utf8' }).trim().split('\n').filter(Boolean).map(Number);
  return [postmaster, ...children];
}
