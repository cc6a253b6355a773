/**
 * The mock worker as a child process of the gateway (the embedded defaults): started with the
 * gateway, stopped with it, and gone by itself if the gateway dies (the IPC channel closes).
 */
import { fork, type ChildProcess } from 'node:child_process';
import path from 'node:path';

export interface MockWorkerSettings {
  host: string;
  port: number;
  latencyMs: number;
  tokensPerSecond: number;
}

export interface MockWorkerProcess {
  readonly port: number;
  stop(): Promise<void>;
}

const CLI = path.join(__dirname, '..', 'cli.js');

export function startMockWorkerProcess(settings: MockWorkerSettings): Promise<MockWorkerProcess> {
  const args = ['mock-worker', '--host', settings.host, '--port', String(settings.port), '--latency-ms', String(settings.latencyMs), '--tokens-per-second', String(settings.tokensPerSecond)];
  const child = fork(CLI, args, { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`the mock worker exited with code ${code} before it listened (is port ${settings.port} taken?)`)));
    child.once('message', (message: { port?: number }) => {
      child.removeAllListeners('exit');
      resolve({ port: message.port ?? settings.port, stop: () => stopChild(child) });
    });
  });
}

function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}
