/**
 * A gateway as its own process (`node dist/cli.js serve --config FILE`), for what needs a process:
 * signals, exit codes, several replicas.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import YAML from 'yaml';
import { withMockControls } from './gateway';
import { CLI } from './processes';

export interface GatewayProcess {
  child: ChildProcess;
  url: string;
  port: number;
  adminUrl: string;
  ca: string;
  /** Every log line the process wrote on stdout, parsed. */
  log: Array<Record<string, unknown>>;
  /** What the process wrote on stderr so far. */
  stderr: () => string;
}

/** `dir` holds the config and the data directory; the config listens on ports the OS picks. */
export function startGatewayProcess(dir: string, name: string, settings: Record<string, unknown>, env: NodeJS.ProcessEnv = {}): Promise<GatewayProcess> {
  return spawnGatewayProcess(dir, name, settings, env).listening;
}

/** The process at once, for what must reach it while it starts; `listening` as startGatewayProcess. */
export function spawnGatewayProcess(dir: string, name: string, settings: Record<string, unknown>, env: NodeJS.ProcessEnv = {}): { child: ChildProcess; listening: Promise<GatewayProcess> } {
  const dataDir = path.join(dir, name);
  const configFile = path.join(dir, `${name}.yaml`);
  writeFileSync(
    configFile,
    YAML.stringify({
      listen: { host: '127.0.0.1', port: 0 },
      admin: { host: '127.0.0.1', port: 0 },
      dataDir,
      // The key store of its own data directory, never ./data/chatgate.db of the working directory.
      keyStore: { type: 'sqlite', path: path.join(dataDir, 'chatgate.db') },
      auth: { createFirstKey: false },
      ...withMockControls(settings),
    }),
  );
  const child = spawn(process.execPath, [CLI, 'serve', '--config', configFile], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  let stderr = '';
  child.stderr!.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  const log: Array<Record<string, unknown>> = [];
  const listening = new Promise<{ https: string; admin: string }>((resolve, reject) => {
    readline.createInterface({ input: child.stdout! }).on('line', (line) => {
      const entry = JSON.parse(line) as Record<string, unknown>;
      log.push(entry);
      if (entry.msg === 'chatgate listening' && entry.role !== 'worker') resolve(entry as { https: string; admin: string }); // serving processes of a cluster log it too
    });
    child.once('exit', (code, signal) => reject(new Error(`gateway ${name} exited with ${code ?? signal}: ${stderr}`)));
  }).then((addresses) => {
    const port = Number(addresses.https.split(':').pop());
    return {
      child,
      port,
      url: `https://127.0.0.1:${port}`,
      adminUrl: `http://127.0.0.1:${Number(addresses.admin.split(':').pop())}`,
      ca: readFileSync(path.join(dataDir, 'tls', 'cert.pem'), 'utf8'),
      log,
      stderr: () => stderr,
    };
  });
  return { child, listening };
}
