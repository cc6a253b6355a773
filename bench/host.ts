/**
 * What the benchmark's runs stand on: the repository, this machine and its processes (/proc), a
 * PostgreSQL database of a run's own, and the mock worker in a process.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import pg from 'pg';

/** User + system CPU seconds of one process (the gateway runs as one: server.processes 1). */
export function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks (USER_HZ 100)
}

export function rssKiB(pid: number): number {
  return Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN);
}

export function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}

/** The repository: from bench/ (a test) or dist/bench/bench/ (npm run bench), the folder with chatgate's package.json. */
export function repositoryRoot(): string {
  for (let dir = __dirname; dir !== path.dirname(dir); dir = path.dirname(dir)) {
    const file = path.join(dir, 'package.json');
    if (existsSync(file) && (JSON.parse(readFileSync(file, 'utf8')) as { name?: string }).name === 'chatgate') return dir;
  }
  throw new Error(`no chatgate repository above ${__dirname}`);
}

export function machine() {
  return { cpus: os.cpus().length, cpu: os.cpus()[0]?.model, memoryGiB: Math.round(os.totalmem() / 2 ** 30), node: process.version, platform: `${os.type()} ${os.release()}`, loadAverage: os.loadavg() };
}

/** A database of its own on the benchmark's PostgreSQL server, or why there is none. */
export async function scaleDatabase(): Promise<{ url: string; drop: () => Promise<void> } | { notMeasured: string }> {
  const server = (process.env.CHATGATE_BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/chatgate_bench').replace(/\/[^/]*$/, '/postgres');
  const name = `chatgate_scale_${randomBytes(6).toString('hex')}`;
  const admin = async (text: string) => {
    const client = new pg.Client({ connectionString: server, connectionTimeoutMillis: 2000 });
    await client.connect();
    try {
      await client.query(text);
    } finally {
      await client.end();
    }
  };
  try {
    await admin(`create database ${name}`);
  } catch (err) {
    return { notMeasured: `no PostgreSQL at ${server.replace(/\/\/[^@/]*@/, '//')}: ${(err as Error).message}` };
  }
  return { url: server.replace(/\/[^/]*$/, `/${name}`), drop: () => admin(`drop database if exists ${name} with (force)`) };
}

/** The mock worker in its own process, over HTTP (for the gateway) and HTTPS (for the direct baseline), from dist/. */
export function startWorker(root: string, certificate: { certFile: string; keyFile: string }, children: ChildProcess[]): Promise<{ http: number; https: number }> {
  const code = `
    const http = require('node:http'), https = require('node:https'), fs = require('node:fs');
    require(${JSON.stringify(path.join(root, 'dist', 'tuning', 'pretenuring.js'))}).turnOffPretenuring();
    const handler = require(${JSON.stringify(path.join(root, 'dist', 'mock-worker', 'server.js'))}).mockWorkerHandler({ latencyMs: 0, tokensPerSecond: 1e6 });
    const servers = [http.createServer({ keepAliveTimeout: 60000 }, handler),
      https.createServer({ cert: fs.readFileSync(${JSON.stringify(certificate.certFile)}), key: fs.readFileSync(${JSON.stringify(certificate.keyFile)}), keepAliveTimeout: 60000 }, handler)];
    let listening = 0;
    for (const server of servers) server.listen(0, '127.0.0.1', () => {
      if (++listening === 2) process.stdout.write(JSON.stringify({ http: servers[0].address().port, https: servers[1].address().port }) + '\\n');
    });
    process.on('SIGTERM', () => process.exit(0));`;
  const child = spawn(process.execPath, ['-e', code], { stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(child);
  return new Promise((resolve, reject) => {
    readline.createInterface({ input: child.stdout! }).once('line', (line) => resolve(JSON.parse(line) as { http: number; https: number }));
    child.once('exit', (code) => reject(new Error(`the mock worker exited with ${code}`)));
  });
}
