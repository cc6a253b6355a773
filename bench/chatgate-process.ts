/**
 * chatgate as the benchmark runs it: the way operators do (`chatgate serve --config FILE`), on ports
 * the OS picks, its access log on and written to /dev/null.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import YAML from 'yaml';
import { DEFAULT_FORWARD_HEADERS } from '../src/config';

export interface ChatgateSetup {
  /** dist/cli.js */
  cli: string;
  /** Holds the config, the data directory and the key store (`chatgate.db`). */
  dir: string;
  name: string;
  processes: number;
  /** The worker every `bench/<model>` request goes to. */
  upstream: string;
  certFile: string;
  keyFile: string;
  maxSocketsPerWorker: number;
  nodeFlags?: string[];
  /** Sections laid over the benchmark's own, each replacing its section whole (the scale run's key stores, cache sizes, admin token). */
  settings?: Record<string, unknown>;
}

/** The process at once (to stop it whatever happens), and its chat completions URL and admin listener's URL once it serves. */
export function spawnChatgate(setup: ChatgateSetup): { child: ChildProcess; serving: Promise<string>; admin: Promise<string> } {
  const configFile = path.join(setup.dir, `${setup.name}.yaml`);
  writeFileSync(
    configFile,
    YAML.stringify({
      listen: { host: '127.0.0.1', port: 0 },
      admin: { host: '127.0.0.1', port: 0 },
      tls: { cert: setup.certFile, key: setup.keyFile },
      dataDir: path.join(setup.dir, setup.name),
      keyStore: { type: 'sqlite', path: path.join(setup.dir, 'chatgate.db') },
      auth: { createFirstKey: false },
      server: { processes: setup.processes },
      log: { level: 'info', destination: '/dev/null' },
      // The mock worker's x-mock-* headers steer it (x-mock-hold, x-mock-tokens): passed on besides the defaults.
      upstream: { maxSocketsPerWorker: setup.maxSocketsPerWorker, forwardHeaders: [...DEFAULT_FORWARD_HEADERS, 'x-mock-*'] },
      providers: { bench: { workers: [setup.upstream] } },
      ...setup.settings,
    }),
  );
  const child = spawn(process.execPath, [...(setup.nodeFlags ?? []), setup.cli, 'serve', '--config', configFile], { stdio: ['ignore', 'ignore', 'pipe'] });
  const ports = servingPorts(child, setup.name);
  const admin = ports.then(({ adminPort }) => `http://127.0.0.1:${adminPort}`);
  admin.catch(() => undefined); // a failed start is told by `serving`, which every caller awaits
  return { child, serving: ports.then(({ port }) => `https://127.0.0.1:${port}/v1/chat/completions`), admin };
}

/**
 * The public and admin ports the OS gave chatgate, from the banner it prints once every serving process
 * listens, or the reason it exited. The benchmark used to pick ports it had found free and wait until
 * something listened there, which can be another process that took the port meanwhile, while the
 * gateway has exited unseen: at 22:49 on 2026-11-25 every request to one gateway failed, and
 * nothing said why.
 */
function servingPorts(child: ChildProcess, name: string): Promise<{ port: number; adminPort: number }> {
  return new Promise((resolve, reject) => {
    let said = '';
    let port: number | undefined;
    let serving = false;
    // Read to the end even once serving: a gateway whose stderr pipe filled up would block on its next write.
    readline.createInterface({ input: child.stderr! }).on('line', (line) => {
      if (serving) return;
      said += `${line}\n`;
      // The banner's first line names the public port, a later one the admin listener's.
      const publicPort = /chatgate is serving https:\/\/[^/]+:(\d+)\//.exec(line)?.[1];
      if (publicPort !== undefined) port = Number(publicPort);
      const adminPort = port === undefined ? undefined : /metrics and health on http:\/\/[^/ ]+:(\d+)/.exec(line)?.[1];
      serving = adminPort !== undefined;
      if (serving) resolve({ port: port!, adminPort: Number(adminPort) });
    });
    child.once('exit', (code, signal) => reject(new Error(`chatgate ${name} exited with ${code ?? signal} before serving:\n${said}`)));
  });
}
