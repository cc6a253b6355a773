/**
 * An idle gateway lets its process sleep. Its main thread used to be woken about 113 times a second
 * with nothing to do: prom-client's event loop sampler every 10 ms and the log's gathering timer every
 * 100 ms, whether or not a line was pending. The count is the kernel's (voluntary context switches of
 * the main thread), after the gateway has served requests and written their access lines.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { bearer, chatBody, request } from '../helpers/http';
import { eventually, startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';
import { issueKey } from '../../src/auth/issue';
import { FileKeyStore } from '../../src/auth/store/file';

/** What an idle gateway still does: sample the event loop (10/s), sweep idle worker connections (4/s), check workers' health. */
const MAX_WAKES_PER_SECOND = 20;
const IDLE_SECONDS = 3;

let worker: WorkerProcess;
let dir: string;
let gateway: GatewayProcess;
let key: string;

beforeAll(async () => {
  worker = await startWorker();
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-idle-'));
  const keyFile = path.join(dir, 'keys.json');
  ({ key } = await issueKey(new FileKeyStore(keyFile), { name: 'idle' }));
  gateway = await startGatewayProcess(dir, 'idle', { keyStore: { type: 'file', path: keyFile }, providers: { mock: { workers: [worker.url] } } });
});
afterAll(async () => {
  if (gateway) await stopProcess(gateway.child);
  await worker?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** Times the kernel has woken the process's main thread from a sleep so far. */
function mainThreadWakes(pid: number): number {
  const status = readFileSync(`/proc/${pid}/task/${pid}/status`, 'utf8');
  return Number(/^voluntary_ctxt_switches:\s+(\d+)$/m.exec(status)![1]);
}

test('after serving, an idle gateway is woken at most a few times a second', async () => {
  const requests = 20;
  for (let i = 0; i < requests; i++) {
    const answer = await request(gateway.url, { ca: gateway.ca, headers: bearer(key), body: chatBody() });
    expect(answer.status).toBe(200);
  }
  await eventually(() => (gateway.log.filter((line) => line.log === 'access').length === requests ? true : undefined));
  await new Promise((resolve) => setTimeout(resolve, 500)); // the last request's timers run out

  const pid = gateway.child.pid!;
  const before = mainThreadWakes(pid);
  await new Promise((resolve) => setTimeout(resolve, IDLE_SECONDS * 1000));
  const wakesPerSecond = (mainThreadWakes(pid) - before) / IDLE_SECONDS;

  expect(wakesPerSecond).toBeLessThanOrEqual(MAX_WAKES_PER_SECOND);
});
