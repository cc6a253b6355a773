/**
 * `npm run bench`: the gateway against the floor and the ceilings of its stack, on this machine, in
 * one run. Servers and the load generator are separate processes; rounds alternate the order of the
 * targets, and each figure is the median of its rounds. `--smoke` runs everything briefly (CI).
 * `--scale` runs bench/scale.ts instead: chatgate over a million keys in PostgreSQL and SQLite;
 * `--ledger` bench/ledger.ts: the console's Usage tab over 10 million requests.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { Client } from 'pg';
import { KeyCache } from '../src/auth/cache';
import { issueKey } from '../src/auth/issue';
import { SqliteKeyStore } from '../src/store/sqlite/store';
import { PostgresKeyStore } from '../src/store/postgres/store';
import type { Store } from '../src/store/types';
import { decodeUtf8Strict } from '../src/common/text';
import { GatewayError } from '../src/errors';
import { JsonBoundsScanner } from '../src/pipeline/json-bounds';
import { validateChatRequest } from '../src/pipeline/validate';
import { loadOrCreateDevCertificate } from '../src/process/dev-certificate';
import { spawnChatgate } from './chatgate-process';
import { failedRequests, judgeTargets, kibPerFurtherStream, medianOf, report, throughputRatios, type Rounds, type StreamFigure } from './figures';
import { load, loadInSequence } from './load-process';
import type { Target } from './load';

const SMOKE = process.argv.includes('--smoke');
/**
 * 10 tokens/s is how a fast model streams. 5,000 such streams are 50,000 events/s to relay, which two
 * cores shared with the load generator and the worker cannot also do while opening 1,000 TLS
 * connections a second (fewer than half were ever open at once): the 5,000 run is paced to the same
 * 10,000 events/s as the 1,000 run (what an open stream holds between events is the same at either pace).
 */
const STREAM_RUNS = [
  { n: 1000, tokensPerSecond: 10 },
  { n: 5000, tokensPerSecond: 2 },
];
/** Connections to the worker for held streams: one per stream (chatgate's `upstream.maxSocketsPerWorker` likewise). */
const STREAM_SOCKETS = 8192;
/** --streams: only the concurrent-stream runs (to look at them alone). */
const STREAMS_ONLY = process.argv.includes('--streams');
const PLAN = SMOKE
  ? { rounds: 1, warmupSeconds: 0, saturateSeconds: 1, rateSeconds: 1, rate: 100, sequential: 100, streams: [{ n: 50, tokensPerSecond: 10 }, { n: 100, tokensPerSecond: 10 }], streamHoldSeconds: 1, opensPerSecond: 1000, authIterations: 2_000 }
  : { rounds: 3, warmupSeconds: 2, saturateSeconds: 4, rateSeconds: 2, rate: 500, sequential: 500, streams: STREAM_RUNS, streamHoldSeconds: 2, opensPerSecond: 1000, authIterations: 200_000 };
/**
 * The order in which a round measures the targets (every other round reversed); the table keeps its
 * own. chatgate and the bare proxy run back to back, their ratio being the one at its target's line:
 * this host's speed drifts within seconds (rounds of one build side by side differed by up to 1.4×),
 * and with both Express targets between them the two were measured some 24 s apart.
 */
const MEASUREMENT_ORDER = ['direct', 'bare Express', 'tuned Express', 'bare proxy', 'chatgate', 'chatgate ×2'];
const ROOT = path.join(__dirname, '..', '..', '..'); // dist/bench/bench -> repository
const CLI = path.join(ROOT, 'dist', 'cli.js');
const HERE = __dirname;
const CHAT_BODY = JSON.stringify({ model: 'bench/echo', messages: [{ role: 'user', content: 'Say hello to the benchmark.' }] });
const started = performance.now();
const progress = (line: string) => process.stderr.write(`[bench +${Math.round((performance.now() - started) / 1000)}s] ${line}\n`);

interface Server {
  name: string;
  child: ChildProcess;
  url: string;
  headers: Record<string, string>;
}

async function main() {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-bench-'));
  const children: ChildProcess[] = [];
  try {
    const tls = await loadOrCreateDevCertificate(path.join(dir, 'tls'));
    const { keyFile } = tls;
    const serverArgs = (role: string, upstream = '', maxSockets?: number) => [path.join(HERE, 'servers.js'), role, tls.certFile, keyFile, upstream, ...(maxSockets ? [String(maxSockets)] : [])];

    progress('starting the mock worker, the bare proxies and chatgate (1 and 2 processes)');
    const worker = await startJsonProcess(serverArgs('worker'), children);
    const upstream = `http://127.0.0.1:${worker.ports.http}`;
    const { key } = await issueKey(new SqliteKeyStore(path.join(dir, 'chatgate.db')), { name: 'bench' });
    const auth = { authorization: `Bearer ${key}` };
    const servers: Server[] = [
      { name: 'direct', child: worker.child, url: `https://127.0.0.1:${worker.ports.https}/v1/chat/completions`, headers: {} },
      { name: 'bare proxy', ...(await proxyServer(serverArgs('bare', upstream), children)) },
      { name: 'bare Express', ...(await proxyServer(serverArgs('express', upstream), children)) },
      { name: 'tuned Express', ...(await proxyServer(serverArgs('tuned-express', upstream), children)) },
      { name: 'chatgate', ...(await chatgate(dir, 'one', 1, upstream, keyFile, tls.certFile, children)), headers: auth },
      { name: 'chatgate ×2', ...(await chatgate(dir, 'two', 2, upstream, keyFile, tls.certFile, children)), headers: auth },
    ];
    const ca = readFileSync(tls.certFile, 'utf8');
    const target = (server: Server, body = CHAT_BODY, extra: Record<string, string> = {}): Target => ({ url: server.url, ca, headers: { ...server.headers, ...extra }, body });

    // Round 1 would otherwise also measure the JIT compiling the request path and pools filling up.
    for (const server of STREAMS_ONLY || PLAN.warmupSeconds === 0 ? [] : servers) {
      progress(`warm-up: ${server.name}`);
      await load({ kind: 'saturate', target: target(server), connections: 64, seconds: PLAN.warmupSeconds });
    }
    const rounds: Rounds = Object.fromEntries(servers.map((s) => [s.name, []]));
    const measured = MEASUREMENT_ORDER.map((name) => servers.find((s) => s.name === name) ?? fail(`no target named ${name}`));
    if (measured.length !== servers.length) fail('every target needs its place in MEASUREMENT_ORDER');
    for (let round = 1; round <= (STREAMS_ONLY ? 0 : PLAN.rounds); round++) {
      const order = round % 2 === 1 ? measured : [...measured].reverse();
      for (const server of order) {
        progress(`round ${round}/${PLAN.rounds}: ${server.name}`);
        const cpuBefore = cpuSeconds(server.child.pid!);
        let cpuPerRequestUs = NaN;
        let rssMiB = NaN;
        const [saturated, rated, sequential] = (await loadInSequence(
          [
            { kind: 'saturate', target: target(server), connections: 64, seconds: PLAN.saturateSeconds },
            { kind: 'rate', target: target(server), rate: PLAN.rate, seconds: PLAN.rateSeconds },
            { kind: 'sequential', target: target(server), count: PLAN.sequential },
          ],
          (index, result) => {
            if (index !== 0) return;
            cpuPerRequestUs = ((cpuSeconds(server.child.pid!) - cpuBefore) / Math.max((result as { requests: number }).requests, 1)) * 1e6;
            rssMiB = rssKiB(server.child.pid!) / 1024;
          },
        )) as [{ requestsPerSecond: number; requests: number; non2xx: number; errors: number }, { p50: number; p99: number; p999: number; failures: number }, { p50: number; mean: number; failures: number }];
        const failures = saturated.non2xx + saturated.errors + rated.failures + sequential.failures;
        rounds[server.name]!.push({ rps: saturated.requestsPerSecond, p50: rated.p50, p99: rated.p99, p999: rated.p999, seqP50: sequential.p50, seqMean: sequential.mean, cpuPerRequestUs, rssMiB, failures });
      }
    }
    const figures = Object.fromEntries(Object.entries(rounds).filter(([, list]) => list.length > 0).map(([name, list]) => [name, medianOf(list)]));
    const ratios = throughputRatios(rounds);

    const streamFigures: StreamFigure[] = [];
    for (const { n, tokensPerSecond } of PLAN.streams) {
      const streamBody = JSON.stringify({ model: 'bench/echo', stream: true, messages: [{ role: 'user', content: 'Stream to the benchmark.' }] });
      // Every stream is held open until all n are (the memory figure needs them open at once) and
      // streamHoldSeconds more, then the worker is told to finish them. A length fixed in advance was
      // too short on a slow machine: the TLS handshakes fell behind the opening pace, and the first
      // of 5,000 streams ended before the last had opened. The cap ends them if that never happens.
      const tokenCap = Math.round(tokensPerSecond * ((4 * n) / PLAN.opensPerSecond + PLAN.streamHoldSeconds + 90));
      const pacing = (group: string) => ({ 'x-mock-tokens': String(tokenCap), 'x-mock-tokens-per-second': String(tokensPerSecond), 'x-mock-hold': `${group}-${n}` });
      const releaseLater = (group: string) => () => void setTimeout(() => release(upstream, `${group}-${n}`), PLAN.streamHoldSeconds * 1000);
      progress(`${n} concurrent streams, direct`);
      const direct = await load<StreamResult>({ kind: 'streams', target: target(servers[0]!, streamBody, pacing('direct')), streams: n, opensPerSecond: PLAN.opensPerSecond }, releaseLater('direct'));
      // Each proxy in a process of its own: one that ran the saturated rounds holds a heap grown for
      // them, which new streams would fill before its RSS moved (memory per stream read 7 KiB that
      // way). A few streams first, so that compiled code and pools count as idle, not as the streams'
      // memory. The bare proxy is the floor of Node's stack, as in the throughput rounds.
      const heldStreams = async (server: Server, group: string) => {
        await load<StreamResult>({ kind: 'streams', target: target(server, streamBody, { 'x-mock-tokens': '3', 'x-mock-tokens-per-second': '100' }), streams: 50, opensPerSecond: PLAN.opensPerSecond });
        const idleKiB = rssKiB(server.child.pid!);
        let plateauKiB: number | undefined;
        progress(`${n} concurrent streams, ${server.name}`);
        const releaseHeld = releaseLater(group);
        const result = await load<StreamResult>({ kind: 'streams', target: target(server, streamBody, pacing(group)), streams: n, opensPerSecond: PLAN.opensPerSecond }, () => {
          plateauKiB = rssKiB(server.child.pid!);
          releaseHeld();
        });
        await stop(server.child);
        // Only when all n were open at once; otherwise the figure would divide by streams already gone.
        return { result, kibPerStream: plateauKiB === undefined ? NaN : (plateauKiB - idleKiB) / n, allOpenMiB: plateauKiB === undefined ? NaN : plateauKiB / 1024 };
      };
      const bare = await heldStreams({ name: 'bare proxy', ...(await proxyServer(serverArgs('bare', upstream, STREAM_SOCKETS), children)) }, 'bare');
      const gateway = await heldStreams({ name: 'chatgate', ...(await chatgate(dir, `streams-${n}`, 1, upstream, keyFile, tls.certFile, children)), headers: auth }, 'chatgate');
      const through = gateway.result;
      streamFigures.push({
        streams: n,
        tokensPerSecond,
        intact: through.intact,
        broken: through.broken,
        directIntact: direct.intact,
        kibPerStream: gateway.kibPerStream,
        bareProxyKibPerStream: bare.kibPerStream,
        rssMiBAllOpen: gateway.allOpenMiB,
        bareProxyRssMiBAllOpen: bare.allOpenMiB,
        bareProxyIntact: bare.result.intact,
        peakOpen: through.peakOpen,
        addedFirstTokenP50Ms: through.firstTokenMs.p50 - direct.firstTokenMs.p50,
        addedFirstTokenP99Ms: through.firstTokenMs.p99 - direct.firstTokenMs.p99,
        betweenTokensP50Ms: through.betweenTokensMs.p50,
        betweenTokensP99Ms: through.betweenTokensMs.p99,
        directBetweenTokensP99Ms: direct.betweenTokensMs.p99,
      });
    }

    progress('key check cost (in this process)');
    const authFigures = STREAMS_ONLY ? {} : await authCost(dir);
    progress('request body cost per MiB (in this process)');
    const bodyFigures = STREAMS_ONLY ? {} : bodyCost();

    const furtherStream = { chatgate: kibPerFurtherStream(streamFigures, 'rssMiBAllOpen'), bareProxy: kibPerFurtherStream(streamFigures, 'bareProxyRssMiBAllOpen') };
    const run = { at: new Date().toISOString(), smoke: SMOKE, machine: machine(), plan: PLAN, figures, ratios, rounds, streams: streamFigures, furtherStream, auth: authFigures, body: bodyFigures };
    const results = { ...run, targets: judgeTargets(run) };
    const resultsDir = path.join(ROOT, 'bench', 'results');
    mkdirSync(resultsDir, { recursive: true });
    const file = path.join(resultsDir, `${results.at.replace(/[:.]/g, '-')}${SMOKE ? '-smoke' : ''}.json`);
    writeFileSync(file, `${JSON.stringify(results, null, 2)}\n`);
    process.stdout.write(`${report(results)}\nfigures written to ${path.relative(process.cwd(), file)}\n`);
    const failed = failedRequests(rounds);
    if (failed.length > 0) {
      // A smoke run in CI must not pass on a gateway that answers errors.
      progress(`requests failed (${failed.map(([name, failures]) => `${name}: ${failures}`).join(', ')}): those rows are not figures of a working target`);
      process.exitCode = 1;
    }
  } finally {
    await Promise.all(children.map(stop));
    rmSync(dir, { recursive: true, force: true });
  }
}

interface StreamResult {
  intact: number;
  broken: Record<string, number>;
  peakOpen: number;
  firstTokenMs: { p50: number; p99: number };
  betweenTokensMs: { p50: number; p99: number };
}

/** Tells the mock worker to finish a group of held streams (src/mock-worker/server.ts); if it cannot, their token cap ends them. */
function release(worker: string, group: string): void {
  fetch(`${worker}/_mock/release?group=${encodeURIComponent(group)}`, { method: 'POST' }).then(
    (answer) => answer.ok || progress(`the mock worker did not release ${group} (${answer.status}): the streams run to their token cap`),
    (err: Error) => progress(`the mock worker did not release ${group} (${err.message}): the streams run to their token cap`),
  );
}

function startJsonProcess(args: string[], children: ChildProcess[]): Promise<{ child: ChildProcess; ports: Record<string, number> }> {
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit', 'ipc'] });
  children.push(child);
  return new Promise((resolve, reject) => {
    readline.createInterface({ input: child.stdout! }).once('line', (line) => resolve({ child, ports: (JSON.parse(line) as { ports: Record<string, number> }).ports }));
    child.once('exit', (code) => reject(new Error(`${args[1]} exited with ${code}`)));
  });
}

async function proxyServer(args: string[], children: ChildProcess[]) {
  const { child, ports } = await startJsonProcess(args, children);
  return { child, url: `https://127.0.0.1:${ports.https}/v1/chat/completions`, headers: {} };
}

/** chatgate as operators run it (`npm start`'s command with a config file). */
async function chatgate(dir: string, name: string, processes: number, upstream: string, keyFile: string, certFile: string, children: ChildProcess[]) {
  // CHATGATE_BENCH_PROFILE=DIR writes a CPU profile of each chatgate process there (--cpu-prof).
  const nodeFlags = process.env.CHATGATE_BENCH_PROFILE ? ['--cpu-prof', `--cpu-prof-dir=${process.env.CHATGATE_BENCH_PROFILE}`] : [];
  // Thousands of concurrent streams need as many connections to the worker (the default, 256, queues the rest).
  const { child, serving } = spawnChatgate({ cli: CLI, dir, name, processes, upstream, certFile, keyFile, maxSocketsPerWorker: STREAM_SOCKETS, nodeFlags });
  children.push(child);
  return { child, url: await serving };
}

async function authCost(dir: string) {
  const measure = async (store: Store) => {
    const { key, record } = await issueKey(store, { name: 'auth-bench' });
    const cache = new KeyCache(store, { size: 1000, ttlMs: 60_000, maxStaleMs: 3_600_000, negativeSize: 1000, negativeTtlMs: 5000 }, { hit: () => undefined, miss: () => undefined });
    await cache.lookup(key);
    let began = process.hrtime.bigint();
    for (let i = 0; i < PLAN.authIterations; i++) await cache.lookup(key);
    const hitUs = Number(process.hrtime.bigint() - began) / 1000 / PLAN.authIterations;
    const misses = Math.max(200, PLAN.authIterations / 200);
    began = process.hrtime.bigint();
    for (let i = 0; i < misses; i++) {
      cache.invalidate(record.digest);
      await cache.lookup(key);
    }
    const missUs = Number(process.hrtime.bigint() - began) / 1000 / misses;
    await store.revoke(record.id, new Date());
    return { hitUs, missUs };
  };
  const sqlite = new SqliteKeyStore(path.join(dir, 'auth.db'));
  const figures: Record<string, { hitUs: number; missUs: number } | string> = { sqlite: await measure(sqlite) };
  await sqlite.close();
  const url = process.env.CHATGATE_BENCH_POSTGRES_URL ?? 'postgres://postgres@127.0.0.1:5432/chatgate_bench';
  try {
    const admin = new Client({ connectionString: url.replace(/\/[^/]*$/, '/postgres'), connectionTimeoutMillis: 2000 });
    await admin.connect();
    await admin.query('CREATE DATABASE chatgate_bench').catch(() => undefined); // already there
    await admin.end();
    const postgres = await PostgresKeyStore.open(url);
    figures.postgres = await measure(postgres);
    await postgres.close();
  } catch (err) {
    figures.postgres = `not measured: ${(err as Error).message}`;
  }
  return figures;
}

/**
 * What the body stage spends per MiB of request body, in this process: the bounds scan as the bytes
 * arrive, then the strict UTF-8 decode, JSON.parse and validation that follow it. For a prompt of
 * text, a conversation of many messages, and numbers (token ids, as an embeddings input carries);
 * and how soon 16 MiB of nested arrays is refused (the scan stops at depth 65).
 */
function bodyCost() {
  const MiB = 1024 * 1024;
  const fill = (prefix: string, piece: (i: number) => string, suffix: string) => {
    const parts = [prefix];
    let length = prefix.length + suffix.length;
    for (let i = 0; length < MiB; i++) {
      const next = (i === 0 ? '' : ',') + piece(i);
      parts.push(next);
      length += next.length;
    }
    return Buffer.from(parts.join('') + suffix);
  };
  const bodies = {
    text: Buffer.from(JSON.stringify({ model: 'bench/echo', messages: [{ role: 'user', content: 'lorem ipsum '.repeat(MiB / 12) }] })),
    messages: fill('{"model":"bench/echo","messages":[', (i) => JSON.stringify({ role: i % 2 ? 'assistant' : 'user', content: `turn ${i}: ${'word '.repeat(40)}` }), ']}'),
    numbers: fill('{"model":"bench/echo","messages":[{"role":"user","content":"x"}],"input":[', (i) => String(i % 50_000), ']}'),
  };
  const iterations = SMOKE ? 3 : 30;
  const perMiB = (body: Buffer, work: () => void) => {
    work(); // warm
    const began = process.hrtime.bigint();
    for (let i = 0; i < iterations; i++) work();
    return Number(process.hrtime.bigint() - began) / 1e6 / iterations / (body.length / MiB);
  };
  const scan = (body: Buffer) => () => {
    const scanner = new JsonBoundsScanner(64, 1_000_000);
    for (let at = 0; at < body.length; at += 65_536) scanner.feed(body.subarray(at, at + 65_536));
  };
  const parse = (body: Buffer) => () => {
    const chat = validateChatRequest(JSON.parse(decodeUtf8Strict(body)!));
    if (chat instanceof GatewayError) throw chat;
  };
  const figures: Record<string, { scanMsPerMiB: number; parseMsPerMiB: number }> = {};
  for (const [kind, body] of Object.entries(bodies)) figures[kind] = { scanMsPerMiB: perMiB(body, scan(body)), parseMsPerMiB: perMiB(body, parse(body)) };
  const nested = Buffer.concat([Buffer.alloc(8 * MiB, '['), Buffer.alloc(8 * MiB, ']')]);
  const began = process.hrtime.bigint();
  const refused = new JsonBoundsScanner(64, 1_000_000).feed(nested.subarray(0, 65_536));
  const nestedRefusedUs = Number(process.hrtime.bigint() - began) / 1000;
  if (refused !== 'depth') throw new Error('16 MiB of nesting was not refused by the scan');
  return { ...figures, nestedRefusedUs };
}

function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
}

/** CPU seconds (user + system) of a process and its descendants, from /proc. */
function cpuSeconds(pid: number): number {
  return processTree(pid).reduce((total, id) => {
    const fields = readProc(id, 'stat').split(') ')[1]?.split(' ') ?? [];
    return total + (Number(fields[11]) + Number(fields[12])) / 100; // utime, stime in clock ticks (USER_HZ 100)
  }, 0);
}

function rssKiB(pid: number): number {
  return processTree(pid).reduce((total, id) => total + Number(/VmRSS:\s+(\d+)/.exec(readProc(id, 'status'))?.[1] ?? 0), 0);
}

function processTree(pid: number): number[] {
  const children = spawnSync('ps', ['-o', 'pid=', '--ppid', String(pid)], { encoding: 'utf8' }).stdout.split('\n').map(Number).filter(Boolean);
  return [pid, ...children.flatMap(processTree)];
}

function readProc(pid: number, file: string): string {
  try {
    return readFileSync(`/proc/${pid}/${file}`, 'utf8');
  } catch {
    return '';
  }
}

function fail(message: string): never {
  throw new Error(message);
}

function machine() {
  return { cpus: os.cpus().length, cpu: os.cpus()[0]?.model, memoryGiB: Math.round(os.totalmem() / 2 ** 30), node: process.version, platform: `${os.type()} ${os.release()}` };
}

// `npm run bench -- --scale [--scale-keys N] [--smoke]`: the run over a million keys instead (bench/scale.ts).
// `npm run bench -- --ledger [--smoke]`: the console's Usage tab over 10 million requests (bench/ledger.ts).
(process.argv.includes('--scale') ? import('./scale.js').then((scale) => scale.main()) : process.argv.includes('--ledger') ? import('./ledger.js').then((ledger) => ledger.main()) : main()).catch((err: Error) => {
  process.stderr.write(`bench failed: ${err.stack}\n`);
  process.exit(1);
});
