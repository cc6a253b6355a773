/**
 * Real Redis for tests: the server on 127.0.0.1:6379 when it answers, otherwise (and whenever a test
 * must stop and start it) a throwaway redis-server of the test's own on a free port.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import net from 'node:net';
import Redis from 'ioredis';
import { freePort } from './net';
import { sleep } from './time';

export async function sharedRedisUrl(): Promise<string> {
  if (await answers('redis://127.0.0.1:6379')) return 'redis://127.0.0.1:6379';
  const throwaway = await ThrowawayRedis.start();
  process.once('exit', () => throwaway.child?.kill('SIGKILL'));
  return throwaway.url;
}

async function answers(url: string): Promise<boolean> {
  const client = new Redis(url, { lazyConnect: true, connectTimeout: 1000, maxRetriesPerRequest: 0, retryStrategy: () => null });
  client.on('error', () => undefined);
  try {
    await client.connect();
    return (await client.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    client.disconnect();
  }
}

export class ThrowawayRedis {
  child: ChildProcess | undefined;

  /** `dataDir`: keep the data across stop() and resume() (every write fsynced to an append-only file there), as a Redis with persistence does. */
  private constructor(
    readonly port: number,
    private readonly dataDir?: string,
  ) {}

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  static async start(options: { dataDir?: string } = {}): Promise<ThrowawayRedis> {
    const redis = new ThrowawayRedis(await freePort(), options.dataDir);
    await redis.resume();
    return redis;
  }

  /** Start (again) on the same port; resolves once it answers. */
  async resume(): Promise<void> {
    const persistence = this.dataDir ? ['--appendonly', 'yes', '--appendfsync', 'always', '--dir', this.dataDir] : ['--appendonly', 'no'];
    this.child = spawn('redis-server', ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', ...persistence], { stdio: 'ignore' });
    for (let i = 0; i < 100 && !(await answers(this.url)); i++) await sleep(50);
  }

  async stop(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null) return;
    await new Promise((resolve) => {
      child.once('exit', resolve);
      child.kill('SIGKILL');
    });
  }
}

/** A MONITOR session: each command Redis runs, as its arguments (what MONITOR prints, unquoted). */
export interface RedisMonitor {
  on(listener: (args: string[]) => void): void;
  close(): void;
}

/**
 * MONITOR over a plain socket (a line of text per command), not ioredis's monitor(): its duplicated
 * connection's handshake could take a command's line for a reply ("Command queue state error") when
 * a busy Redis printed one first. Resolves once Redis answered +OK: every command after is seen.
 */
export function monitorRedis(url: string): Promise<RedisMonitor> {
  const { hostname, port } = new URL(url);
  const listeners: Array<(args: string[]) => void> = [];
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port || 6379), hostname, () => socket.write('MONITOR\r\n'));
    let buffered = '';
    let started = false;
    socket.setEncoding('utf8');
    socket.once('error', reject);
    socket.on('data', (chunk: string) => {
      buffered += chunk;
      for (let end = buffered.indexOf('\r\n'); end !== -1; end = buffered.indexOf('\r\n')) {
        const line = buffered.slice(0, end);
        buffered = buffered.slice(end + 2);
        if (!started) {
          if (line !== '+OK') return reject(new Error(`MONITOR answered ${line}`));
          started = true;
          resolve({ on: (listener) => listeners.push(listener), close: () => socket.destroy() });
          continue;
        }
        // +1700000000.123456 [0 127.0.0.1:50000] "EVALSHA" "abc..." "1" ...
        const args = [...line.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((match) => match[1]!.replace(/\\(.)/g, '$1'));
        for (const listener of listeners) listener(args);
      }
    });
  });
}
