/**
 * `npx chatgate serve` and signals: a SIGTERM sent to the npx wrapper (npm exec) does not reach the
 * gateway, whose shell and npm exit without passing it on; the gateway notices its parent gone and
 * drains and exits by itself, leaving no orphan. Run through the real npm, from the repository.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import YAML from 'yaml';
import { startWorker, type WorkerProcess } from '../helpers/processes';
import { eventually } from '../helpers/time';

const ROOT = path.join(__dirname, '..', '..');
let dir: string;
let worker: WorkerProcess;

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-npx-'));
  worker = await startWorker();
});
afterAll(async () => {
  await worker?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

test('SIGTERM to `npx chatgate serve`: the gateway drains and exits too, no orphan left', async () => {
  const configFile = path.join(dir, 'npx.yaml');
  writeFileSync(
    configFile,
    YAML.stringify({
      listen: { host: '127.0.0.1', port: 0 },
      admin: { host: '127.0.0.1', port: 0 },
      dataDir: path.join(dir, 'data'),
      providers: { mock: { workers: [worker.url] } },
      auth: { createFirstKey: false },
      console: { enabled: false },
    }),
  );
  const npx = spawn('npx', ['--yes', 'chatgate', 'serve', '--config', configFile], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env } });
  const lines: Array<Record<string, unknown>> = [];
  let stderr = '';
  npx.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  readline.createInterface({ input: npx.stdout }).on('line', (line) => {
    try {
      lines.push(JSON.parse(line) as Record<string, unknown>);
    } catch {
      // npm's own output
    }
  });
  try {
    const listening = await eventually(() => lines.find((line) => line.msg === 'chatgate listening'), 60_000).catch((err: Error) => {
      throw new Error(`${err.message}: ${stderr}`);
    });
    const gatewayPid = Number(listening.pid);
    expect(gatewayPid).not.toBe(npx.pid);
    expect(alive(gatewayPid)).toBe(true);

    npx.kill('SIGTERM');
    await eventually(() => (alive(gatewayPid) ? undefined : true), 10_000);
    // It drained and stopped as on its own SIGTERM, rather than being killed.
    expect(lines.some((line) => line.msg === 'stopped' && line.pid === gatewayPid)).toBe(true);
  } finally {
    const gateway = lines.find((line) => line.msg === 'chatgate listening');
    if (gateway && alive(Number(gateway.pid))) process.kill(Number(gateway.pid), 'SIGKILL');
    npx.kill('SIGKILL');
  }
}, 90_000);
