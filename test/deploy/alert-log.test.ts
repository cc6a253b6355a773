/**
 * deploy/alertmanager/webhook-logger.js, compose's Alertmanager receiver: it answers its health check,
 * prints one line per alert it is sent (firing and resolved), takes what is not JSON without failing,
 * and stops on SIGTERM.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import path from 'node:path';
import { DEPLOY } from './tools';
import { sleep } from '../helpers/time';

let child: ChildProcess;
let output = '';
let base = '';

beforeAll(async () => {
  child = spawn(process.execPath, [path.join(DEPLOY, 'alertmanager', 'webhook-logger.js')], {
    env: { ...process.env, PORT: '0', HOST: '127.0.0.1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
  const port = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the logger did not start:\n${output}`)), 10_000);
    const check = () => {
      const found = /listening on 127\.0\.0\.1:(\d+)/.exec(output);
      if (found) {
        clearTimeout(timer);
        child.stdout!.off('data', check);
        resolve(found[1]!);
      }
    };
    child.stdout!.on('data', check);
    child.once('exit', (code) => reject(new Error(`the logger exited (${code}):\n${output}`)));
  });
  base = `http://127.0.0.1:${port}`;
});

afterAll(() => {
  if (child.exitCode === null) child.kill('SIGKILL');
});

const waitFor = async (text: string) => {
  for (let i = 0; i < 100 && !output.includes(text); i++) await sleep(20);
  return output;
};

test('answers its health check', async () => {
  const answer = await fetch(`${base}/healthz`);
  expect(answer.status).toBe(200);
});

test("prints one line per alert of an Alertmanager notification, with its labels and summary", async () => {
  const notification = {
    version: '4',
    status: 'firing',
    receiver: 'log',
    alerts: [
      {
        status: 'firing',
        labels: { alertname: 'ChatgateDown', severity: 'page', job: 'chatgate', instance: '10.0.0.7:9464' },
        annotations: { summary: 'chatgate: 10.0.0.7:9464 cannot be scraped', description: 'it is down' },
        startsAt: '2026-01-01T00:00:00Z',
        endsAt: '0001-01-01T00:00:00Z',
      },
      {
        status: 'resolved',
        labels: { alertname: 'ChatgateDependencyDown', severity: 'page', dependency: 'key_store' },
        annotations: { summary: 'chatgate: key_store unreachable' },
        startsAt: '2026-01-01T00:00:00Z',
        endsAt: '2026-01-01T00:05:00Z',
      },
    ],
  };
  const answer = await fetch(`${base}/`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(notification) });
  expect(answer.status).toBe(200);
  const printed = await waitFor('RESOLVED ChatgateDependencyDown');
  expect(printed).toMatch(/FIRING ChatgateDown severity=page job=chatgate instance=10\.0\.0\.7:9464 \(since 2026-01-01T00:00:00Z\): chatgate: 10\.0\.0\.7:9464 cannot be scraped \| it is down/);
  expect(printed).toMatch(/RESOLVED ChatgateDependencyDown severity=page dependency=key_store \(ended 2026-01-01T00:05:00Z\): chatgate: key_store unreachable/);
});

test('logs a body that is not JSON instead of failing', async () => {
  const answer = await fetch(`${base}/`, { method: 'POST', body: 'hello {' });
  expect(answer.status).toBe(200);
  expect(await waitFor('not JSON: hello {')).toContain('not JSON: hello {');
});

test('stops on SIGTERM', async () => {
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  expect(await exited).toBe(0);
});
