/**
 * Cluster mode: two serving processes behind the same port, the primary adding up their metrics,
 * and a killed serving process replaced while serving goes on.
 */
import https from 'node:https';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { issueKey } from '../../src/auth/issue';
import { SqliteKeyStore } from '../../src/store/sqlite/store';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { bearer, chatBody } from '../helpers/http';
import { sample, scrape } from '../helpers/metrics';
import { startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';
import { eventually, sleep } from '../helpers/time';

let worker: WorkerProcess;
let dir: string;
let gateway: GatewayProcess;
let key: string;
let storeFile: string;

beforeAll(async () => {
  worker = await startWorker();
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-cluster-'));
  storeFile = path.join(dir, 'chatgate.db');
  ({ key } = await issueKey(new SqliteKeyStore(storeFile), { name: 'cluster' }));
  gateway = await startGatewayProcess(dir, 'cluster', { server: { processes: 2 }, keyStore: { type: 'sqlite', path: storeFile }, providers: { mock: { workers: [worker.url] } } });
}, 30_000);
afterAll(async () => {
  if (gateway) await stopProcess(gateway.child);
  await worker?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const agents: https.Agent[] = [];
function keptAliveConnection(): https.Agent {
  const agent = new https.Agent({ keepAlive: true, maxSockets: 1 });
  agents.push(agent);
  return agent;
}
const sharedAgent = keptAliveConnection();
afterAll(() => {
  for (const agent of agents) agent.destroy();
});

function call(options: { fresh?: boolean; model?: string; agent?: https.Agent } = {}): Promise<number> {
  return new Promise((resolve) => {
    const req = https.request(
      `${gateway.url}/v1/chat/completions`,
      { method: 'POST', ca: gateway.ca, servername: 'localhost', agent: options.fresh ? false : (options.agent ?? sharedAgent), headers: bearer(key) },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', () => resolve(0));
    req.setTimeout(5000, () => {
      req.destroy();
      resolve(-1); // no answer at all: a connection the cluster lost
    });
    req.end(chatBody(options.model ? { model: options.model } : {}));
  });
}

const pidsStarted = () => gateway.log.filter((line) => line.msg === 'serving process started').map((line) => line.pid as number);

test('1,000 requests over two processes: the primary counts exactly 1,000, none lost or doubled', async () => {
  expect(pidsStarted()).toHaveLength(2);
  const statuses: number[] = [];
  // Ten kept-alive connections, each opened once the one before has been answered. The primary hands a
  // connection to a serving process that has taken the one before it; ten opened at once under CI load
  // went 2:8 or 8:2 to one process still busy taking them, which says nothing about serving.
  const loops: Array<Promise<void>> = [];
  for (let connection = 0; connection < 10; connection++) {
    const agent = keptAliveConnection();
    statuses.push(await call({ agent }));
    loops.push(
      (async () => {
        for (let i = 1; i < 100; i++) statuses.push(await call({ agent }));
      })(),
    );
  }
  await Promise.all(loops);
  expect(statuses.filter((s) => s === 200)).toHaveLength(1000);
  const answeredBy = new Map<unknown, number>();
  for (const line of gateway.log) if (line.log === 'access') answeredBy.set(line.pid, (answeredBy.get(line.pid) ?? 0) + 1);
  expect(answeredBy.size).toBe(2);
  expect([...answeredBy.values()].every((count) => count >= 300)).toBe(true); // both processes serve
  const metrics = await scrape(gateway.adminUrl);
  expect(sample(metrics, 'chatgate_requests_total{endpoint="chat",provider="mock",status="200"}')).toBe(1000);
  expect(sample(metrics, `chatgate_worker_up{provider="mock",worker="127.0.0.1:${worker.port}"}`)).toBe(1);
  const readiness = (await (await fetch(`${gateway.adminUrl}/readyz`)).json()) as { checks: { processes: unknown } };
  expect(readiness.checks.processes).toEqual({ wanted: 2, running: 2, ready: 2 });
});

test('a serving process killed: it is replaced, and serving never stops', async () => {
  const [victim] = pidsStarted();
  let running = true;
  const calls: Array<{ startedAt: number; status: number }> = [];
  const load = Promise.all(
    Array.from({ length: 3 }, async () => {
      while (running) {
        const startedAt = Date.now();
        calls.push({ startedAt, status: await call({ fresh: true }) });
      }
    }),
  );
  await sleep(300);
  process.kill(victim!, 'SIGKILL');
  await eventually(() => (pidsStarted().length === 3 ? true : undefined), 10_000);
  const replacedAt = Date.now();
  await sleep(500);
  running = false;
  await load;

  expect(calls.length).toBeGreaterThan(20);
  // At most what the killed process held (one request per client), plus at most one connection the
  // primary was handing to it at that instant (unanswered until the client's timeout, here 5 s).
  const failed = calls.filter((c) => c.status !== 200);
  expect(failed.length).toBeLessThanOrEqual(4);
  expect(failed.filter((c) => c.status === -1).length).toBeLessThanOrEqual(1);
  const afterReplacement = calls.filter((c) => c.startedAt >= replacedAt);
  expect(afterReplacement.length).toBeGreaterThanOrEqual(10);
  expect(afterReplacement.every((c) => c.status === 200)).toBe(true);
  const readiness = (await (await fetch(`${gateway.adminUrl}/readyz`)).json()) as { checks: { processes: unknown } };
  expect(readiness.checks.processes).toEqual({ wanted: 2, running: 2, ready: 2 });
}, 30_000);

test('SIGHUP to the primary reloads every serving process; a bad file is refused by the primary alone', async () => {
  const configFile = path.join(dir, 'cluster.yaml');
  const running = YAML.parse(readFileSync(configFile, 'utf8')) as Record<string, unknown>;
  const reloaded = () => gateway.log.filter((line) => line.msg === 'config reloaded').length;

  writeFileSync(configFile, YAML.stringify({ ...running, providers: { mock: { workers: [worker.url] }, extra: { workers: [worker.url] } } }));
  gateway.child.kill('SIGHUP');
  await eventually(() => (reloaded() === 2 ? true : undefined), 10_000);
  const statuses = await Promise.all(Array.from({ length: 20 }, () => call({ fresh: true, model: 'extra/echo' })));
  expect(statuses).toEqual(Array(20).fill(200));

  const refused = () => gateway.log.filter((line) => line.msg === 'config reload refused: the running config is kept');
  writeFileSync(configFile, YAML.stringify({ ...running, server: { processes: 'many' } }));
  gateway.child.kill('SIGHUP');
  await eventually(() => (refused().length > 0 ? true : undefined), 10_000);
  expect(await call({ model: 'extra/echo' })).toBe(200);
  // The control: the good file back, and a reload that reaches both serving processes. One asked about
  // the bad file would have logged its refusal before this reload's line (its reloads run one at a time).
  writeFileSync(configFile, YAML.stringify({ ...running, providers: { mock: { workers: [worker.url] }, extra: { workers: [worker.url] } } }));
  gateway.child.kill('SIGHUP');
  await eventually(() => (reloaded() === 4 ? true : undefined), 10_000);
  expect(new Set(gateway.log.filter((line) => line.msg === 'config reloaded').slice(2).map((line) => line.pid)).size).toBe(2);
  expect(refused()).toHaveLength(1); // the serving processes were not asked
  expect(refused()[0]!.pid).toBe(gateway.child.pid);
}, 30_000);
