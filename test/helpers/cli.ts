/**
 * The `chatgate` command as an operator runs it, for the CLI's tests (test/cli/): the built CLI as
 * real processes, on the store of a gateway running in the test's process (with a mock worker), so
 * that what the CLI changes is seen by a gateway that serves.
 */
import { spawn, spawnSync } from 'node:child_process';
import path from 'node:path';
import { startTestGateway, type TestGateway } from './gateway';
import { CLI, startWorker, type WorkerProcess } from './processes';

export interface CliFixture {
  gw: TestGateway;
  worker: WorkerProcess;
  /** The gateway's own config: the CLI reads it, so it works on the same store. */
  configFile: string;
}

/** A mock worker and a gateway for the file's tests, started before them and stopped after. */
export function cliGateway(): CliFixture {
  const fixture = {} as CliFixture;
  beforeAll(async () => {
    fixture.worker = await startWorker();
    // A long cache TTL: a revocation by the CLI must reach the running gateway through the store's change feed.
    fixture.gw = await startTestGateway({ auth: { cacheTtlMs: 600_000, createFirstKey: false }, providers: { mock: { workers: [fixture.worker.url] } } });
    fixture.configFile = path.join(fixture.gw.dir, 'config.yaml');
  });
  afterAll(async () => {
    await fixture.gw?.stop();
    await fixture.worker?.stop();
  });
  return fixture;
}

/** The CLI, waited for (it blocks this process: only for commands that need no gateway in it). */
export function chatgate(args: string[], env: NodeJS.ProcessEnv = {}) {
  const result = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 20000 });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

/**
 * The CLI on the running gateway's key store. Not spawnSync: the gateway runs in this process, and
 * must go on answering (and announcing changes) while the CLI works.
 */
export function cli(args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    const timer = setTimeout(() => child.kill('SIGKILL'), 20000);
    child.once('error', reject);
    child.once('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}
