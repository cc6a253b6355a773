/**
 * A gateway as its own process (`node dist/cli.js serve --config FILE`), for what needs a process:
 * signals, exit codes, several replicas (startReplicas: two on one PostgreSQL database).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import YAML from 'yaml';
import { withMockControls } from './gateway';
import { request, type RawResponse } from './http';
import { createTestDatabase, type TestDatabase } from './postgres';
import { CLI, stopProcess } from './processes';

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

/** Two replicas of the gateway, each its own process, sharing one PostgreSQL database. */
export interface Replicas {
  a: GatewayProcess;
  b: GatewayProcess;
  database: TestDatabase;
  /** A call to the admin API (`/admin/api` and `apiPath`) through replica a, with the admin token and a JSON body. */
  admin(method: string, apiPath: string, body?: unknown): Promise<RawResponse>;
  /** Ends both processes, drops the database and removes their directory. */
  stop(): Promise<void>;
}

/**
 * Two gateway replicas, `a` and `b`, on a fresh PostgreSQL database of their own (shared mode), each
 * with its data directory in a new temporary one named after `name`, and the admin API on with
 * `token`; `settings` go into both configs as they are (providers, console, ...). Should either fail
 * to start, what was started is stopped and removed before the failure is thrown.
 */
export async function startReplicas(name: string, token: string, settings: Record<string, unknown> = {}): Promise<Replicas> {
  const dir = mkdtempSync(path.join(os.tmpdir(), `chatgate-${name}-`));
  let database: TestDatabase | undefined;
  const started: GatewayProcess[] = [];
  const stop = async () => {
    await Promise.all(started.map((replica) => stopProcess(replica.child)));
    await database?.drop();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    database = await createTestDatabase();
    const config = { admin: { host: '127.0.0.1', port: 0, token }, keyStore: { type: 'postgres', url: database.url }, ...settings };
    const results = await Promise.allSettled(['a', 'b'].map((replica) => startGatewayProcess(dir, replica, config)));
    for (const result of results) if (result.status === 'fulfilled') started.push(result.value);
    const failed = results.find((result) => result.status === 'rejected');
    if (failed) throw failed.reason;
  } catch (err) {
    await stop();
    throw err;
  }
  const [a, b] = started as [GatewayProcess, GatewayProcess];
  const admin = (method: string, apiPath: string, body?: unknown) =>
    request(a.adminUrl, { method, path: `/admin/api${apiPath}`, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  return { a, b, database, admin, stop };
}
