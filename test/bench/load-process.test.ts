/**
 * The load generator's own process (bench/load-process.ts) against a real HTTPS listener on loopback:
 * what the runner does with each result, thrown at once or later, ends the run with that error
 * instead of escaping the line handler (an uncaught exception, and a run that carries on as if heard),
 * and the last result's, which the process's exit overtakes, is waited for.
 */
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadInSequence } from '../../bench/load-process';
import type { Task } from '../../bench/load';
import { loadOrCreateDevCertificate } from '../../src/process/dev-certificate';

let dir: string;
let server: https.Server;
let tasks: Task[];
let served = 0;

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-load-process-'));
  const tls = await loadOrCreateDevCertificate(dir);
  server = https.createServer({ cert: tls.cert, key: tls.key }, (_req, res) => {
    served++;
    res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const target = { url: `https://127.0.0.1:${(server.address() as AddressInfo).port}/v1/chat/completions`, ca: tls.cert, headers: {}, body: '{}' };
  tasks = [
    { kind: 'sequential', target, count: 1 },
    { kind: 'sequential', target, count: 1, afterGo: true },
  ];
}, 30_000);

afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
  rmSync(dir, { recursive: true, force: true });
});

test('both tasks run and are heard in turn when nothing fails', async () => {
  const heard: number[] = [];
  const results = await loadInSequence(tasks, (index) => void heard.push(index));
  expect(heard).toEqual([0, 1]);
  expect(results).toHaveLength(2);
  expect(results.every((result) => (result as { failures: number }).failures === 0)).toBe(true);
}, 30_000);

test.each([
  ['throws at once', () => { throw new Error('the runner could not read its figures'); }],
  ['rejects later', () => Promise.reject(new Error('the runner could not read its figures'))],
])('a runner that %s on the first result: the run rejects with its error, the next task never starts', async (_how, failing) => {
  served = 0;
  const heard: number[] = [];
  const run = loadInSequence(tasks, (index) => {
    heard.push(index);
    return failing();
  });
  await expect(run).rejects.toThrow('the runner could not read its figures');
  expect(heard).toEqual([0]);
  expect(served).toBe(51); // the first task's 50 warm-ups and its one request; the second waited for a go that never came
}, 30_000);

/** Resolves once the load generator has exited: this process then holds no child process's handle. */
async function afterTheExit(): Promise<void> {
  while (process.getActiveResourcesInfo().includes('ProcessWrap')) await new Promise((resolve) => setTimeout(resolve, 10));
}

test("the last result's runner, still at work when the process exits: the run waits for it and rejects with its error", async () => {
  const heard: number[] = [];
  const run = loadInSequence(tasks, async (index) => {
    heard.push(index);
    if (index === tasks.length - 1) {
      await afterTheExit();
      throw new Error('the runner could not read the last figures');
    }
  });
  await expect(run).rejects.toThrow('the runner could not read the last figures');
  expect(heard).toEqual([0, 1]);
}, 30_000);

test("the run resolves only once the last result's runner is done with it", async () => {
  let lastDone = false;
  const run = loadInSequence(tasks, async (index) => {
    if (index !== tasks.length - 1) return;
    await afterTheExit();
    lastDone = true;
  });
  await expect(run).resolves.toHaveLength(2);
  expect(lastDone).toBe(true);
}, 30_000);
