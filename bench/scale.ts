/**
 * `npm run bench -- --scale`: chatgate over a million keys, in PostgreSQL and in SQLite, on this
 * machine. Per store: a fresh database, key creates through the admin API on it empty, seeded with a
 * tenth of the keys, and with all of them; the start-up time of a gateway process at each size; then,
 * with every key seeded, one gateway per number of keys in use (1, a hundredth, a tenth), its
 * auth.cacheSize set to fit them: a warm pass that uses each key once, then requests at a fixed rate
 * with keys drawn at random from those in use, for five windows of 10 s back to back (each holds one
 * usage flush): the cache's hit ratio (the gateway's /metrics), latency against the worker called
 * directly (the p99 of all five windows, and each window's), and the gateway's CPU per request (/proc).
 *
 *   --scale-keys N   N keys instead of 1,000,000 (1,000 at least)
 *   --scale-rounds N measure the keys-in-use rows N times, alternating (default 3; a smoke run 1)
 *   --scale-stores postgres,sqlite   only these stores (default both)
 *   --smoke          2,000 keys (or --scale-keys), everything briefly: proves the run works (CI); its figures mean nothing
 *   CHATGATE_BENCH_PROFILE=DIR   CPU profiles of every gateway process, written to DIR
 *
 * Everything runs on loopback: the gateway (`chatgate serve --config FILE`), the mock worker (over
 * HTTP for the gateway, HTTPS for the direct baseline), PostgreSQL (CHATGATE_BENCH_POSTGRES_URL's
 * server, default 127.0.0.1:5432, a database made for the run and dropped after; none answering:
 * PostgreSQL is not measured), and the load, sent from this process. `runScale` runs it from a test too.
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import pg from 'pg';
import { digestKey, displayPrefix } from '../src/auth/keys';
import { loadOrCreateDevCertificate } from '../src/process/dev-certificate';
import { DEFAULT_ACCOUNT_ID, defaultAccountId } from '../src/store/default-account';
import { PostgresKeyStore } from '../src/store/postgres/store';
import { immediate, openConnection } from '../src/store/sqlite/driver';
import { SqliteKeyStore } from '../src/store/sqlite/store';
import { spawnChatgate } from './chatgate-process';
import type { Target } from './load';
import { loadInSequence } from './load-process';
import { cpuSeconds, machine, repositoryRoot, rssKiB, scaleDatabase, startWorker, stop } from './host';
import { scaleFailures, scaleKey, scaleKeySql, scaleOrder, scalePlan, scaleReport, scaleStores, SCALE_STORES, type ScaleStoreName, type CreateFigure, type LatencyFigure, type ScalePlan, type ScaleResults, type StoreFigures, type WorkingSetFigure } from './scale-figures';

const CHAT_BODY = JSON.stringify({ model: 'bench/echo', messages: [{ role: 'user', content: 'Say hello to the scale benchmark.' }] });
/** Requests in flight during the warm pass (closed loop), and clients creating keys at once (as the issue measured). */
const WARM_CONCURRENCY = 16;
const CREATE_CLIENTS = 4;

export interface ScaleOptions {
  plan: ScalePlan;
  /** An empty database for this run, or why there is none. */
  postgres: { url: string } | { notMeasured: string };
  /** The stores measured (default both). */
  stores?: readonly ScaleStoreName[];
  progress?: (line: string) => void;
}

/** What a store under test is to the run: how a gateway reaches it, how keys are seeded into it. */
interface StoreUnderTest {
  name: string;
  keyStore: Record<string, unknown>;
  /** Seeds keys from..to (scaleKey numbers, inclusive), with no gateway running. */
  seed(from: number, to: number): Promise<void>;
  close(): Promise<void>;
}

interface Gateway {
  child: ChildProcess;
  url: string;
  adminUrl: string;
  startupMs: number;
}

export async function runScale({ plan, postgres, stores: names = SCALE_STORES, progress = () => undefined }: ScaleOptions): Promise<ScaleResults> {
  const root = repositoryRoot();
  const dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-bench-scale-'));
  const children: ChildProcess[] = [];
  const adminToken = randomBytes(24).toString('base64url');
  try {
    const certificate = await loadOrCreateDevCertificate(path.join(dir, 'tls'));
    const ca = readFileSync(certificate.certFile, 'utf8');
    const worker = await startWorker(root, certificate, children);
    const upstream = `http://127.0.0.1:${worker.http}`;

    const startGateway = async (name: string, store: StoreUnderTest, cacheSize: number): Promise<Gateway> => {
      const began = performance.now();
      const { child, serving, admin } = spawnChatgate({
        cli: path.join(root, 'dist', 'cli.js'),
        dir,
        name,
        processes: 1,
        upstream,
        certFile: certificate.certFile,
        keyFile: certificate.keyFile,
        maxSocketsPerWorker: 1024,
        // CHATGATE_BENCH_PROFILE=DIR: a CPU profile of each gateway process there, as for the main run.
        nodeFlags: process.env.CHATGATE_BENCH_PROFILE ? ['--cpu-prof', `--cpu-prof-dir=${process.env.CHATGATE_BENCH_PROFILE}`] : [],
        settings: { keyStore: store.keyStore, auth: { createFirstKey: false, cacheSize }, admin: { host: '127.0.0.1', port: 0, token: adminToken } },
      });
      children.push(child);
      const url = await serving;
      const startupMs = performance.now() - began;
      return { child, url, adminUrl: await admin, startupMs };
    };

    const stores: StoreFigures[] = [];
    const runs: Array<{ name: string; open: () => Promise<StoreUnderTest> } | { name: string; notMeasured: string }> = [
      'url' in postgres ? { name: 'postgres', open: () => postgresStore(postgres.url) } : { name: 'postgres', notMeasured: postgres.notMeasured },
      { name: 'sqlite', open: () => sqliteStore(path.join(dir, 'sqlite', 'chatgate.db')) },
    ].filter((run) => names.includes(run.name as ScaleStoreName));
    for (const run of runs) {
      if ('notMeasured' in run) {
        stores.push({ store: run.name, notMeasured: run.notMeasured, seedSeconds: { mid: NaN, full: NaN }, startupMs: { empty: NaN, mid: NaN }, creates: [], direct: { requests: 0, p50: NaN, p99: NaN, windowP99: [], failures: 0 }, workingSets: [] });
        continue;
      }
      const store = await run.open();
      try {
        stores.push(await measureStore(store, { plan, ca, adminToken, workerHttps: worker.https, startGateway, progress }));
      } finally {
        await store.close();
      }
    }
    return { at: new Date().toISOString(), plan, machine: machine(), stores };
  } finally {
    await Promise.all(children.map(stop));
    rmSync(dir, { recursive: true, force: true });
  }
}

interface Context {
  plan: ScalePlan;
  ca: string;
  adminToken: string;
  workerHttps: number;
  startGateway: (name: string, store: StoreUnderTest, cacheSize: number) => Promise<Gateway>;
  progress: (line: string) => void;
}

async function measureStore(store: StoreUnderTest, { plan, ca, adminToken, workerHttps, startGateway, progress }: Context): Promise<StoreFigures> {
  const agent = new https.Agent({ keepAlive: true, maxSockets: 64, secureContext: tls.createSecureContext({ ca }), servername: 'localhost' });
  const creates: CreateFigure[] = [];
  const createOn = async (gateway: Gateway, atKeys: number) => {
    progress(`${store.name}: ${plan.creates} key creates through the admin API at ${atKeys} keys`);
    creates.push({ atKeys, ...(await createKeys(gateway.adminUrl, adminToken, plan.creates, `at-${atKeys}`)) });
  };
  try {
    progress(`${store.name}: a gateway on the empty store`);
    const empty = await startGateway(`${store.name}-empty`, store, 10_000);
    await createOn(empty, 0);
    await stop(empty.child);

    progress(`${store.name}: seeding ${plan.midKeys} keys`);
    let began = performance.now();
    await store.seed(1, plan.midKeys);
    const midSeconds = (performance.now() - began) / 1000;
    const mid = await startGateway(`${store.name}-mid`, store, 10_000);
    await createOn(mid, plan.midKeys);
    // Seeded keys answer: the digests made in the seed are the gateway's.
    const check = await send(mid.url, agent, scaleKey(plan.midKeys));
    if (check.status !== 200) throw new Error(`${store.name}: seeded key ${plan.midKeys} got ${check.status} from the gateway: the seed's digests are not the gateway's (${check.text.slice(0, 200)})`);
    await stop(mid.child);

    progress(`${store.name}: seeding keys ${plan.midKeys + 1} to ${plan.keys}`);
    began = performance.now();
    await store.seed(plan.midKeys + 1, plan.keys);
    const fullSeconds = midSeconds + (performance.now() - began) / 1000;

    progress(`${store.name}: the worker directly, ${plan.rate}/s for ${plan.windows} × ${plan.seconds} s`);
    const direct = (await atRate(plan, { url: `https://127.0.0.1:${workerHttps}/v1/chat/completions`, ca, headers: {}, body: CHAT_BODY })).measured;

    const workingSets: WorkingSetFigure[] = [];
    for (const [index, { round, keysInUse }] of scaleOrder(plan).entries()) {
      const cacheSize = keysInUse + Math.ceil(keysInUse / 10) + 100; // a tenth to spare, and the keys the run creates
      progress(`${store.name}: ${keysInUse} keys in use of ${plan.keys}, auth.cacheSize ${cacheSize}, round ${round + 1} of ${plan.rounds}`);
      const gateway = await startGateway(`${store.name}-in-use-${keysInUse}-${round}`, store, cacheSize);
      try {
        if (index === 0) await createOn(gateway, plan.keys);
        const warmFailures = await closedLoop(gateway.url, agent, Math.max(keysInUse, plan.warmRequests), (i) => scaleKey(1 + (i % keysInUse)));
        // The CPU is read inside the two scrapes of /metrics, so that neither counts.
        let cacheBefore: Promise<{ hits: number; misses: number }> | undefined;
        let cpuBefore = NaN;
        const { measured, cpuAfter } = await atRate(plan, { url: gateway.url, ca, headers: {}, body: CHAT_BODY }, { inUse: keysInUse, seed: keysInUse }, {
          leadInDone: async () => {
            cacheBefore = cacheCounts(gateway.adminUrl);
            await cacheBefore;
            cpuBefore = cpuSeconds(gateway.child.pid!);
          },
          cpu: () => cpuSeconds(gateway.child.pid!),
        });
        const cacheAfter = await cacheCounts(gateway.adminUrl);
        const hits = cacheAfter.hits - (await cacheBefore!).hits;
        const misses = cacheAfter.misses - (await cacheBefore!).misses;
        workingSets.push({
          keysInUse,
          round,
          cacheSize,
          startupMs: gateway.startupMs,
          ...measured,
          hitRatio: hits / (hits + misses),
          addedP50: measured.p50 - direct.p50,
          addedP99: measured.p99 - direct.p99,
          cpuUsPerRequest: ((cpuAfter - cpuBefore) / Math.max(measured.requests + measured.failures, 1)) * 1e6,
          rssMiB: rssKiB(gateway.child.pid!) / 1024,
          warmFailures,
        });
      } finally {
        await stop(gateway.child);
      }
    }
    return { store: store.name, seedSeconds: { mid: midSeconds, full: fullSeconds }, startupMs: { empty: empty.startupMs, mid: mid.startupMs }, creates, direct, workingSets };
  } finally {
    agent.destroy();
  }
}

/** A fresh PostgreSQL database: its schema as a first gateway makes it, keys seeded by one statement. */
async function postgresStore(url: string): Promise<StoreUnderTest> {
  await (await PostgresKeyStore.open(url)).close(); // the schema and the default account, as the gateway makes them
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  return {
    name: 'postgres',
    keyStore: { type: 'postgres', url },
    async seed(from, to) {
      // One statement, rows as the gateway writes them, digests made in SQL; without a notification a
      // key, which no gateway is there to hear.
      await client.query(`
        alter table chatgate_keys disable trigger chatgate_keys_changed;
        insert into chatgate_keys (id, name, digest, prefix, created_at, account_id, created_by)
          select 'key_scale_' || i, 'scale ' || i, encode(sha256(convert_to(${scaleKeySql('i')}, 'UTF8')), 'hex'), left(${scaleKeySql('i')}, ${displayPrefix(scaleKey(1)).length}),
                 now() - make_interval(secs => i), '${DEFAULT_ACCOUNT_ID}', 'admin-token'
          from generate_series(${Math.trunc(from)}, ${Math.trunc(to)}) as i;
        alter table chatgate_keys enable trigger chatgate_keys_changed;`);
      // As autovacuum leaves a table that has had time: statistics, and the visibility map set.
      await client.query('vacuum (analyze) chatgate_keys');
      const { rows } = await client.query<{ digest: string; prefix: string }>('select digest, prefix from chatgate_keys where id = $1', [`key_scale_${from}`]);
      if (rows[0]?.digest !== digestKey(scaleKey(from)) || rows[0]?.prefix !== displayPrefix(scaleKey(from))) throw new Error(`the seed's digest of key ${from} is not the one src/auth/keys.ts makes`);
    },
    close: () => client.end(),
  };
}

/** A fresh SQLite file: made by the store, keys seeded in one transaction with a prepared insert. */
async function sqliteStore(file: string): Promise<StoreUnderTest> {
  const store = new SqliteKeyStore(file);
  await defaultAccountId(store); // the gateway makes it with its first key; the seed's keys belong to it
  await store.close();
  return {
    name: 'sqlite',
    keyStore: { type: 'sqlite', path: file },
    async seed(from, to) {
      const db = openConnection(file);
      try {
        db.exec('PRAGMA busy_timeout = 5000');
        // The trigger logs each inserted key for other processes' caches: no process is there to read
        // a million entries. It is put back as it was, in the same transaction.
        const trigger = db.prepare("select sql from sqlite_master where type = 'trigger' and name = 'chatgate_keys_inserted'").get() as { sql: string } | undefined;
        if (!trigger) throw new Error('the SQLite schema has no chatgate_keys_inserted trigger: the seed needs updating');
        const insert = db.prepare('insert into chatgate_keys (id, name, digest, prefix, created_at, account_id, created_by) values (?, ?, ?, ?, ?, ?, ?)');
        const now = Date.now();
        immediate(db, () => {
          db.exec('drop trigger chatgate_keys_inserted');
          for (let i = from; i <= to; i++) {
            const key = scaleKey(i);
            insert.run(`key_scale_${i}`, `scale ${i}`, digestKey(key), displayPrefix(key), new Date(now - i * 1000).toISOString(), DEFAULT_ACCOUNT_ID, 'admin-token');
          }
          db.exec(trigger.sql);
        });
        db.exec('PRAGMA wal_checkpoint(TRUNCATE)');
      } finally {
        db.close();
      }
    },
    close: async () => undefined,
  };
}

function send(url: string, agent: https.Agent, key: string | undefined): Promise<{ status: number; text: string }> {
  return new Promise((resolve) => {
    const headers: Record<string, string> = { 'content-type': 'application/json' };
    if (key !== undefined) headers.authorization = `Bearer ${key}`;
    const req = https.request(url, { method: 'POST', agent, headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      res.on('error', (err: Error) => resolve({ status: 0, text: err.message }));
    });
    req.on('error', (err: Error) => resolve({ status: 0, text: err.message }));
    req.end(CHAT_BODY);
  });
}

/**
 * The lead-in, then the measured windows, at plan.rate open loop from the load generator's own process
 * (bench/load.ts's rate task: latencies from the scheduled time, keys drawn at random among those in
 * use when `keys` is given). The measured windows start once `around.leadInDone` has settled (the
 * load generator waits for the word); `around.cpu` is read as soon as their result comes.
 */
async function atRate(plan: ScalePlan, target: Target, keys?: { inUse: number; seed: number }, around?: { leadInDone: () => Promise<void>; cpu: () => number }): Promise<{ measured: LatencyFigure; cpuAfter: number }> {
  let cpuAfter = NaN;
  const [, result] = await loadInSequence(
    [
      { kind: 'rate', target, rate: plan.rate, seconds: plan.leadInSeconds, leadInSeconds: 0, keys },
      { kind: 'rate', target, rate: plan.rate, seconds: plan.seconds * plan.windows, leadInSeconds: 0, keys, windowSeconds: plan.seconds, afterGo: true },
    ],
    async (index) => {
      if (index === 0) await around?.leadInDone();
      if (index === 1 && around) cpuAfter = around.cpu();
    },
  );
  const { count, p50, p99, windowP99, failures } = result as { count: number; p50: number; p99: number; windowP99: number[]; failures: number };
  return { measured: { requests: count, p50, p99, windowP99, failures }, cpuAfter };
}

/** `count` requests, WARM_CONCURRENCY at a time, request i with key keyOf(i); how many did not answer 200. */
async function closedLoop(url: string, agent: https.Agent, count: number, keyOf: (i: number) => string): Promise<number> {
  let next = 0;
  let failures = 0;
  await Promise.all(
    Array.from({ length: WARM_CONCURRENCY }, async () => {
      while (next < count) if ((await send(url, agent, keyOf(next++))).status !== 200) failures++;
    }),
  );
  return failures;
}

/** `count` keys created through the admin API, CREATE_CLIENTS at a time. */
async function createKeys(adminUrl: string, token: string, count: number, label: string): Promise<Omit<CreateFigure, 'atKeys'>> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: CREATE_CLIENTS });
  const create = (i: number) =>
    new Promise<number>((resolve) => {
      const req = http.request(`${adminUrl}/admin/api/keys`, { method: 'POST', agent, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' } }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      });
      req.on('error', () => resolve(0));
      req.end(JSON.stringify({ name: `scale-create-${label}-${i}` }));
    });
  let next = 0;
  let failures = 0;
  const began = performance.now();
  await Promise.all(
    Array.from({ length: CREATE_CLIENTS }, async () => {
      while (next < count) if ((await create(next++)) !== 201) failures++;
    }),
  );
  const ms = performance.now() - began;
  agent.destroy();
  return { creates: count, perSecond: (count / ms) * 1000, msEach: (ms * CREATE_CLIENTS) / count, failures };
}

async function cacheCounts(adminUrl: string): Promise<{ hits: number; misses: number }> {
  const text = await (await fetch(`${adminUrl}/metrics`)).text();
  const counter = (name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
  return { hits: counter('chatgate_key_cache_hits_total'), misses: counter('chatgate_key_cache_misses_total') };
}

/** The value given after `flag` on the command line, if the flag is there. */
const option = (argv: readonly string[], flag: string): string | undefined => {
  const at = argv.indexOf(flag);
  return at >= 0 ? (argv[at + 1] ?? '') : undefined;
};

/** The command line: `--scale [--scale-keys N] [--scale-rounds N] [--scale-stores LIST] [--smoke]`. */
export async function main(argv = process.argv.slice(2)): Promise<void> {
  const started = performance.now();
  const progress = (line: string) => process.stderr.write(`[bench scale +${Math.round((performance.now() - started) / 1000)}s] ${line}\n`);
  const smoke = argv.includes('--smoke');
  const keys = option(argv, '--scale-keys');
  const rounds = option(argv, '--scale-rounds');
  const plan = scalePlan(keys !== undefined ? Number(keys) : smoke ? 2000 : 1_000_000, smoke, rounds !== undefined ? Number(rounds) : undefined);
  const stores = scaleStores(option(argv, '--scale-stores'));
  const database = stores.includes('postgres') ? await scaleDatabase() : { notMeasured: 'not asked for' };
  if ('notMeasured' in database) progress(`PostgreSQL not measured: ${database.notMeasured}`);
  let results: ScaleResults;
  try {
    results = await runScale({ plan, postgres: database, stores, progress });
  } finally {
    if ('drop' in database) await database.drop();
  }
  const resultsDir = path.join(repositoryRoot(), 'bench', 'results');
  mkdirSync(resultsDir, { recursive: true });
  const file = path.join(resultsDir, `${results.at.replace(/[:.]/g, '-')}-scale${smoke ? '-smoke' : ''}.json`);
  writeFileSync(file, `${JSON.stringify(results, null, 2)}\n`);
  process.stdout.write(`${scaleReport(results)}\nfigures written to ${path.relative(process.cwd(), file)}; ${Math.round((performance.now() - started) / 1000)} s in all\n`);
  const failed = scaleFailures(results);
  if (failed.length > 0) {
    progress(`requests failed (${failed.map(([store, n]) => `${store}: ${n}`).join(', ')}): those figures are not of a working gateway`);
    process.exitCode = 1;
  }
}

if (require.main === module) {
  main().catch((err: Error) => {
    process.stderr.write(`bench scale failed: ${err.stack}\n`);
    process.exit(1);
  });
}
