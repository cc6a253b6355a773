/**
 * Real worker processes for tests: the built mock worker (`node dist/cli.js mock-worker`), on a port
 * the OS picks. `npm test` builds dist/ first (pretest).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import readline from 'node:readline';
import type { RecordedRequest } from '../../src/mock-worker/server';
import { eventually } from './time';

export const CLI = path.join(__dirname, '..', '..', 'dist', 'cli.js');

export interface WorkerProcess {
  readonly url: string;
  readonly port: number;
  readonly child: ChildProcess;
  /** X-Request-Ids of the chat requests this process received, as it reported them (kept after it dies). */
  readonly received: string[];
  /**
   * `received` once at least `count` reports have come. A report travels on the worker's stdout and
   * can trail the answer it sent, so a count checked right after an answer is a race.
   */
  reported(count: number, bound?: number): Promise<string[]>;
  requests(): Promise<RecordedRequest[]>;
  clear(): Promise<void>;
  stop(): Promise<void>;
}

export async function startWorker(options: { latencyMs?: number; tokensPerSecond?: number; port?: number } = {}): Promise<WorkerProcess> {
  const args = [
    CLI,
    'mock-worker',
    '--port',
    String(options.port ?? 0),
    '--latency-ms',
    String(options.latencyMs ?? 0),
    '--tokens-per-second',
    String(options.tokensPerSecond ?? 100000),
    '--log-requests',
  ];
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  const received: string[] = [];
  const port = await new Promise<number>((resolve, reject) => {
    readline.createInterface({ input: child.stdout! }).on('line', (line) => {
      const event = JSON.parse(line) as { msg: string; port?: number; requestId?: string };
      if (event.msg === 'mock worker listening') resolve(event.port!);
      else if (event.msg === 'request' && event.requestId) received.push(event.requestId);
    });
    child.once('exit', (code) => reject(new Error(`mock worker exited with ${code} before it listened`)));
  });
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    port,
    child,
    received,
    reported: (count, bound = 5000) => eventually(() => (received.length >= count ? received : undefined), bound),
    requests: async () => ((await (await fetch(`${url}/_mock/requests`)).json()) as { requests: RecordedRequest[] }).requests,
    clear: async () => {
      await fetch(`${url}/_mock/requests`, { method: 'DELETE' });
    },
    stop: () => stopProcess(child),
  };
}

export function stopProcess(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGCONT'); // a stopped process handles no other signal
    child.kill(signal);
  });
}
