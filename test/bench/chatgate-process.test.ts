/**
 * How the benchmark starts chatgate (bench/chatgate-process.ts): the URL it gives is chatgate's own,
 * with one serving process or two, and a gateway that exits before serving fails the start with its
 * reason instead of leaving the benchmark to measure whatever answers.
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { spawnChatgate, type ChatgateSetup } from '../../bench/chatgate-process';
import { issueKey } from '../../src/auth/issue';
import { SqliteKeyStore } from '../../src/store/sqlite/store';
import { loadOrCreateDevCertificate } from '../../src/process/dev-certificate';
import { bearer, chatBody, request } from '../helpers/http';
import { CLI, startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';

let worker: WorkerProcess;
let dir: string;
let key: string;
let ca: string;
let setup: Omit<ChatgateSetup, 'name' | 'processes'>;
const started: ChildProcess[] = [];

beforeAll(async () => {
  worker = await startWorker();
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-bench-start-'));
  const tls = await loadOrCreateDevCertificate(path.join(dir, 'tls'));
  ca = readFileSync(tls.certFile, 'utf8');
  ({ key } = await issueKey(new SqliteKeyStore(path.join(dir, 'chatgate.db')), { name: 'bench-start' }));
  setup = { cli: CLI, dir, upstream: worker.url, certFile: tls.certFile, keyFile: tls.keyFile, maxSocketsPerWorker: 16 };
});
afterAll(async () => {
  await Promise.all(started.map((child) => stopProcess(child)));
  await worker?.stop();
  rmSync(dir, { recursive: true, force: true });
});

test.each([1, 2])('with %i serving process(es), the URL it gives answers as chatgate: the key gets the worker, no key gets 401', async (processes) => {
  const { child, serving, admin } = spawnChatgate({ ...setup, name: `processes-${processes}`, processes });
  started.push(child);
  const url = await serving;
  expect(url).toMatch(/^https:\/\/127\.0\.0\.1:\d+\/v1\/chat\/completions$/);
  // The admin listener's URL is this gateway's too: its /metrics counts the requests below.
  const adminUrl = await admin;
  expect(adminUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
  expect(adminUrl).not.toContain(`:${new URL(url).port}`);

  const answered = await request(url, { headers: { ...bearer(key), 'content-type': 'application/json' }, body: chatBody({ model: 'bench/echo' }), ca });
  expect(answered.status).toBe(200);
  expect(answered.json<{ choices: Array<{ message: { content: string } }> }>().choices[0]!.message.content).toContain('Hello there');

  const refused = await request(url, { headers: { 'content-type': 'application/json' }, body: chatBody({ model: 'bench/echo' }), ca });
  expect(refused.status).toBe(401);
  expect(refused.json().error.code).toBe('missing_api_key');
  const metrics = await request(adminUrl, { method: 'GET', path: '/metrics' });
  expect(metrics.body).toMatch(/^chatgate_key_cache_misses_total 1$/m); // the key's one lookup
  expect(metrics.body).toMatch(/^chatgate_auth_failures_total\{reason="missing"\} 1$/m);
});

test('a gateway that exits before serving fails the start with its own reason', async () => {
  const { child, serving } = spawnChatgate({ ...setup, name: 'no-worker', processes: 1, upstream: 'not a worker url' });
  started.push(child);
  await expect(serving).rejects.toThrow(/chatgate no-worker exited with 1 before serving:\n[\s\S]*not valid/);
});
