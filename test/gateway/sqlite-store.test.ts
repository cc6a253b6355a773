/**
 * The gateway on its default store, SQLite, as its own process: a key the CLI revokes is refused
 * within 2 s whatever the cache TTL; keys survive a restart; a key create costs the same at 5,000
 * keys as at 500 (the JSON file store's grew with every key); a start on the deprecated file store
 * is refused with how to move off it, and a new SQLite file beside a keys.json imports it.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { issueKey } from '../../src/auth/issue';
import { FileKeyStore } from '../fakes/file-store';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { bearer, chatBody, request } from '../helpers/http';
import { CLI, startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';
import { eventually } from '../helpers/time';

const TOKEN = 'admin-token-for-sqlite-tests-0123';
let worker: WorkerProcess;
let dir: string;

beforeAll(async () => {
  worker = await startWorker();
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-sqlite-gateway-'));
});
afterAll(async () => {
  await worker?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** The settings of a gateway on the SQLite file `file` (a long cache TTL: only the change feed can tell it of a revocation). */
const onSqlite = (file: string, extra: Record<string, unknown> = {}) => ({
  providers: { mock: { workers: [worker.url] } },
  keyStore: { type: 'sqlite', path: file },
  auth: { createFirstKey: false, cacheTtlMs: 600_000 },
  ...extra,
});

function cli(args: string[], configFile: string): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args, '--config', configFile], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    child.once('error', reject);
    child.once('close', (status) => resolve({ status, stdout, stderr }));
  });
}

const chat = (gateway: GatewayProcess, key: string) => request(gateway.url, { ca: gateway.ca, headers: bearer(key), body: chatBody() });

test('a key the CLI revokes is refused by the running gateway within 2 s; keys survive a restart', async () => {
  const file = path.join(dir, 'cli', 'chatgate.db');
  const settings = onSqlite(file);
  let gateway = await startGatewayProcess(dir, 'cli', settings);
  const configFile = path.join(dir, 'cli.yaml'); // the gateway's own config: the CLI works on the same file
  try {
    const made = await Promise.all(['kept', 'revoked'].map((name) => cli(['keys', 'create', '--name', name, '--json'], configFile)));
    const [kept, revoked] = made.map((result) => JSON.parse(result.stdout) as { id: string; key: string });
    expect((await chat(gateway, kept!.key)).status).toBe(200);
    expect((await chat(gateway, revoked!.key)).status).toBe(200); // now cached, for ten minutes
    expect((await cli(['keys', 'revoke', revoked!.id], configFile)).status).toBe(0);
    const revokedAt = performance.now();
    await eventually(async () => ((await chat(gateway, revoked!.key)).status === 401 ? true : undefined), 5000);
    expect(performance.now() - revokedAt).toBeLessThan(2000);
    expect(gateway.log.some((line) => /deprecated/.test(String(line.msg)))).toBe(false);

    await stopProcess(gateway.child);
    gateway = await startGatewayProcess(dir, 'cli', settings);
    expect((await chat(gateway, kept!.key)).status).toBe(200);
    expect((await chat(gateway, revoked!.key)).status).toBe(401);
  } finally {
    await stopProcess(gateway.child);
  }
}, 60_000);

test('server.processes: 2 share the file: a CLI key works in both, and its revocation reaches both within 2 s', async () => {
  const file = path.join(dir, 'cluster', 'chatgate.db');
  const gateway = await startGatewayProcess(dir, 'cluster', onSqlite(file, { server: { processes: 2 } }));
  try {
    const { key, id } = JSON.parse((await cli(['keys', 'create', '--name', 'both', '--json'], path.join(dir, 'cluster.yaml'))).stdout) as { id: string; key: string };
    // Fresh connections, spread over the processes by the kernel: each caches the key.
    const statuses = await Promise.all(Array.from({ length: 12 }, () => chat(gateway, key).then((response) => response.status)));
    expect(statuses.every((status) => status === 200)).toBe(true);
    expect((await cli(['keys', 'revoke', id], path.join(dir, 'cluster.yaml'))).status).toBe(0);
    const revokedAt = performance.now();
    await eventually(async () => {
      const after = await Promise.all(Array.from({ length: 12 }, () => chat(gateway, key).then((response) => response.status)));
      return after.every((status) => status === 401) ? true : undefined;
    }, 5000);
    expect(performance.now() - revokedAt).toBeLessThan(2000);
  } finally {
    await stopProcess(gateway.child);
  }
}, 60_000);

test('5,000 keys created through the admin API, four at a time: the last 500 cost no more than twice the first 500', async () => {
  const gateway = await startGatewayProcess(dir, 'scale', onSqlite(path.join(dir, 'scale', 'chatgate.db'), { admin: { host: '127.0.0.1', port: 0, token: TOKEN } }));
  try {
    const create = async (i: number) => {
      const response = await request(gateway.adminUrl, {
        method: 'POST',
        path: '/admin/api/keys',
        headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
        body: JSON.stringify({ name: `scale-${i}` }),
      });
      if (response.status !== 201 && response.status !== 200) throw new Error(`create ${i}: ${response.status} ${response.body}`);
    };
    /** Creates keys from..from+count, four at a time; the time it took, in ms. */
    const batch = async (from: number, count: number) => {
      const started = process.hrtime.bigint();
      let next = from;
      await Promise.all(Array.from({ length: 4 }, async () => {
        while (next < from + count) await create(next++);
      }));
      return Number(process.hrtime.bigint() - started) / 1e6;
    };
    const times: number[] = [];
    for (let from = 0; from < 5000; from += 500) times.push(await batch(from, 500));
    const first = times[0]!;
    const last = times.at(-1)!;
    process.stdout.write(`5,000 keys through the admin API, ms per 500: ${times.map((t) => t.toFixed(0)).join(' ')}; last/first ${(last / first).toFixed(2)}\n`);
    expect(last).toBeLessThanOrEqual(2 * first);
    const listed = await request(gateway.adminUrl, { method: 'GET', path: '/admin/api/keys', headers: { authorization: `Bearer ${TOKEN}` } });
    expect(listed.body.match(/"name":"scale-\d+"/g)?.length).toBe(5000);
  } finally {
    await stopProcess(gateway.child);
  }
}, 180_000);

test('a start on the retired file store is refused, naming the import; a new SQLite file beside a keys.json imports it', async () => {
  const legacyDir = path.join(dir, 'legacy');
  mkdirSync(legacyDir, { recursive: true });
  const keysJson = path.join(legacyDir, 'keys.json');
  const { key } = await issueKey(new FileKeyStore(keysJson), { name: 'from the file store' });
  const before = readFileSync(keysJson, 'utf8');

  await expect(startGatewayProcess(dir, 'on-file', { providers: { mock: { workers: [worker.url] } }, keyStore: { type: 'file', path: keysJson } })).rejects.toThrow(
    /keyStore: type 'file' .* is no longer a key store: set keyStore to \{type: sqlite\}.*chatgate store import \S*keys\.json/,
  );
  expect(readFileSync(keysJson, 'utf8')).toBe(before);

  const upgraded = await startGatewayProcess(dir, 'upgraded', onSqlite(path.join(legacyDir, 'chatgate.db'), { auth: { createFirstKey: true } }));
  try {
    expect((await chat(upgraded, key)).status).toBe(200);
    expect(upgraded.log.find((line) => /imported the file store/.test(String(line.msg)))).toEqual(expect.objectContaining({ file: keysJson, imported: expect.objectContaining({ keys: 1 }) }));
    expect(upgraded.stderr()).not.toMatch(/cgk_/); // the store was not empty: no first key made
    expect(JSON.stringify(upgraded.log)).not.toContain(key);
  } finally {
    await stopProcess(upgraded.child);
  }
  // A keys.json the file store would refuse fails the start that made the SQLite file, and takes the
  // new file with it: the start after the file is mended imports it (it is not skipped as done).
  const brokenDir = path.join(dir, 'broken');
  mkdirSync(brokenDir, { recursive: true });
  const { key: brokenKey } = await issueKey(new FileKeyStore(path.join(brokenDir, 'keys.json')), { name: 'mended later' });
  const good = readFileSync(path.join(brokenDir, 'keys.json'), 'utf8');
  writeFileSync(path.join(brokenDir, 'keys.json'), good.replace('"models": []', '"models": "all"'));
  await expect(startGatewayProcess(dir, 'broken', onSqlite(path.join(brokenDir, 'chatgate.db')))).rejects.toThrow(/could not import .*keys\.json.*models/);
  expect(existsSync(path.join(brokenDir, 'chatgate.db'))).toBe(false);
  writeFileSync(path.join(brokenDir, 'keys.json'), good);
  const mended = await startGatewayProcess(dir, 'broken', onSqlite(path.join(brokenDir, 'chatgate.db')));
  try {
    expect((await chat(mended, brokenKey)).status).toBe(200);
  } finally {
    await stopProcess(mended.child);
  }

  // A config for the CLI on the same file: the import ran once, at the start that made the file.
  const configFile = path.join(dir, 'upgraded-cli.yaml');
  writeFileSync(configFile, YAML.stringify({ providers: { mock: { workers: [worker.url] } }, keyStore: { type: 'sqlite', path: path.join(legacyDir, 'chatgate.db') } }));
  const again = await cli(['store', 'import', keysJson], configFile);
  expect(again.stdout).toMatch(/keys +0 imported, 1 already there/);
}, 60_000);
