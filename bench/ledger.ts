/**
 * `npm run bench -- --ledger`: the console's Usage tab over 10 million requests of one account in
 * 90 days, in PostgreSQL. A fresh database gets the account, 50 keys (through a gateway's admin
 * API), and 90 days of ledger rows seeded by SQL: 5,000 end users a day, each on one key and one
 * model (a third of them on two), 8 models: about 600,000 ledger rows and 4,500 daily rows, the
 * daily rows the ledger's sums, then `vacuum analyze` (what autovacuum does after such a load). An
 * owner signs in through the console API, and the tab's requests are timed as the page makes them:
 * `/usage` for the last 30 days, then a month's breakdowns by model and by end user (this month to
 * date, and the last one) and the alerts, together. Also timed, not judged: the API's breakdown by
 * end user over the last 30 days and over all 90 (days outside whole months are read day by day).
 *
 *   --smoke    200 end users: proves the run works (CI); its figures mean nothing
 *
 * Everything runs on loopback: the gateway (`chatgate serve --config FILE`) and PostgreSQL
 * (CHATGATE_BENCH_POSTGRES_URL's server, default 127.0.0.1:5432, a database made for the run and
 * dropped after). `runLedger` runs it from a test too.
 */
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { loadOrCreateDevCertificate } from '../src/process/dev-certificate';
import { spawnChatgate } from './chatgate-process';
import { repositoryRoot, scaleDatabase, stop } from './host';

/** Under this, at the 95th percentile, the Usage tab loads (the target). */
export const TARGET_MS = 200;
const KEYS = 50;
const MODELS = 8;
const DAYS = 90;
const PASSWORD = 'a ledger benchmark owner password';

export interface LedgerPlan {
  endUsers: number;
  rounds: number;
}

export const ledgerPlan = (smoke: boolean): LedgerPlan => (smoke ? { endUsers: 200, rounds: 3 } : { endUsers: 5000, rounds: 30 });

export interface PageFigure {
  name: string;
  /** Held to TARGET_MS (the Usage tab); the API's other ranges are shown, not judged. */
  target: boolean;
  /** ms */
  p50: number;
  p95: number;
  max: number;
}

export interface LedgerResults {
  at: string;
  requests: number;
  ledgerRows: number;
  dailyRows: number;
  ledgerMiB: number;
  seedSeconds: number;
  pages: PageFigure[];
  failures: string[];
}

export async function runLedger(url: string, plan: LedgerPlan, progress: (line: string) => void = () => undefined): Promise<LedgerResults> {
  const root = repositoryRoot();
  const dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-bench-ledger-'));
  const children: ChildProcess[] = [];
  const token = randomBytes(24).toString('base64url');
  const failures: string[] = [];
  try {
    const certificate = await loadOrCreateDevCertificate(path.join(dir, 'tls'));
    const agent = new https.Agent({ keepAlive: true, ca: readFileSync(certificate.certFile, 'utf8'), maxSockets: 8 });
    const { child, serving, admin } = spawnChatgate({
      cli: path.join(root, 'dist', 'cli.js'),
      dir,
      name: 'ledger',
      processes: 1,
      upstream: 'http://127.0.0.1:9', // no request reaches a worker
      certFile: certificate.certFile,
      keyFile: certificate.keyFile,
      maxSocketsPerWorker: 16,
      settings: { keyStore: { type: 'postgres', url }, admin: { host: '127.0.0.1', port: 0, token } },
    });
    children.push(child);
    const origin = new URL(await serving).origin;
    const adminUrl = await admin;
    const adminCall = async <T>(method: string, apiPath: string, body: unknown): Promise<T> => {
      const answer = await fetch(`${adminUrl}/admin/api${apiPath}`, { method, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
      if (!answer.ok) throw new Error(`${method} ${apiPath}: ${answer.status} ${await answer.text()}`);
      return (await answer.json()) as T;
    };
    const account = (await adminCall<{ id: string }>('POST', '/accounts', { name: 'ledger' })).id;
    await adminCall('POST', `/accounts/${account}/members`, { email: 'owner@example.com', role: 'owner', password: PASSWORD });
    const keys: string[] = [];
    for (let i = 0; i < KEYS; i++) keys.push((await adminCall<{ id: string }>('POST', '/keys', { name: `ledger-${i}`, account })).id);

    progress(`seeding ${DAYS} days of ${plan.endUsers} end users`);
    const began = performance.now();
    const seeded = await seed(url, account, keys, plan.endUsers);
    const seedSeconds = (performance.now() - began) / 1000;
    progress(`seeded ${seeded.requests.toLocaleString('en')} requests in ${seeded.ledgerRows.toLocaleString('en')} ledger rows (${seeded.ledgerMiB} MiB) in ${Math.round(seedSeconds)} s`);

    const signIn = await call(agent, origin, 'POST', '/console/api/session', '', JSON.stringify({ email: 'owner@example.com', password: PASSWORD }));
    const cookie = String(signIn.headers['set-cookie']).split(';')[0]!;
    const ask = async (apiPath: string) => {
      const started = performance.now();
      const answer = await call(agent, origin, 'GET', `/console/api${apiPath}`, cookie);
      if (answer.status !== 200) failures.push(`${apiPath}: ${answer.status}`);
      return performance.now() - started;
    };
    const day = (daysBack: number) => new Date(Date.now() - daysBack * 86_400_000).toISOString().slice(0, 10);
    const now = new Date();
    const thisMonth = `from=${day(0).slice(0, 8)}01&to=${day(0)}`;
    const lastMonth = `from=${new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - 1, 1)).toISOString().slice(0, 10)}&to=${new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 0)).toISOString().slice(0, 10)}`;
    const last30 = `from=${day(29)}&to=${day(0)}`;
    /** The Usage tab as the console loads it: the last 30 days by key and day, then a month's breakdowns and the alerts together. */
    const page = async (month: string) => {
      const started = performance.now();
      await ask(`/usage?${last30}`);
      await Promise.all([ask(`/usage/breakdown?by=model&limit=100&${month}`), ask(`/usage/breakdown?by=endUser&limit=20&${month}`), ask('/alerts')]);
      return performance.now() - started;
    };
    const measures: Record<string, () => Promise<number>> = {
      'Usage tab, this month': () => page(thisMonth),
      'Usage tab, last month': () => page(lastMonth),
      'by end user, last 30 days (API)': () => ask(`/usage/breakdown?by=endUser&limit=20&${last30}`),
      'by end user, 90 days (API)': () => ask(`/usage/breakdown?by=endUser&limit=20&from=${day(DAYS - 1)}&to=${day(0)}`),
      // Ending yesterday, no month is whole (the month to date holds today's use): every day read by day.
      'by end user, 30 days to yesterday (API)': () => ask(`/usage/breakdown?by=endUser&limit=20&from=${day(30)}&to=${day(1)}`),
    };
    const samples = new Map(Object.keys(measures).map((name) => [name, [] as number[]]));
    for (let round = 0; round < plan.rounds; round++) {
      const names = Object.keys(measures);
      for (const name of round % 2 ? names.reverse() : names) samples.get(name)!.push(await measures[name]!());
    }
    agent.destroy();
    const pages = [...samples].map(([name, times]) => ({ name, target: name.startsWith('Usage tab'), p50: quantile(times, 0.5), p95: quantile(times, 0.95), max: quantile(times, 1) }));
    return { at: new Date().toISOString(), ...seeded, seedSeconds: Math.round(seedSeconds * 10) / 10, pages, failures };
  } finally {
    await Promise.all(children.map(stop));
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The ledger's rows by SQL, the daily rows their sums, then what autovacuum would do. */
async function seed(url: string, account: string, keys: string[], endUsers: number) {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    // End user u uses key u % 50 and model (u + m) % 8, every third one a second model too (m = 1);
    // each changes models once in the 90 days. A row's requests: 1 to 33 (17 on average): 10.2
    // million for 5,000 end users.
    await client.query(
      `insert into chatgate_usage_ledger (account_id, date, key_id, model, end_user, requests, refused, prompt_tokens, completion_tokens, cost_nanos)
       select $1, current_date - d, ($2::text[])[1 + u % $3], 'bench/model-' || ((u + m + d / 45) % $4), 'eu_' || lpad(u::text, 22, '0'), r, r / 50, r * 300, r * 150, r * 100000
       from generate_series(0, $5 - 1) d, generate_series(0, $6 - 1) u, generate_series(0, 1) m, lateral (select 1 + (u * 7 + d * 13 + m) % 33 as r) x
       where m = 0 or u % 3 = 0`,
      [account, keys, keys.length, MODELS, DAYS, endUsers],
    );
    await client.query(
      `insert into chatgate_usage_daily (key_id, date, account_id, requests, prompt_tokens, completion_tokens, refused, cost_nanos)
       select key_id, date, account_id, sum(requests), sum(prompt_tokens), sum(completion_tokens), sum(refused), sum(cost_nanos) from chatgate_usage_ledger group by key_id, date, account_id`,
    );
    await client.query(
      `insert into chatgate_usage_ledger_monthly (account_id, month, key_id, model, end_user, requests, refused, prompt_tokens, completion_tokens, cost_nanos)
       select account_id, date_trunc('month', date)::date, key_id, model, end_user, sum(requests), sum(refused), sum(prompt_tokens), sum(completion_tokens), sum(cost_nanos)
       from chatgate_usage_ledger group by 1, 2, 3, 4, 5`,
    );
    await client.query('vacuum analyze chatgate_usage_ledger_monthly');
    await client.query('vacuum analyze chatgate_usage_ledger');
    await client.query('vacuum analyze chatgate_usage_daily');
    const { rows } = await client.query<{ requests: string; ledger: string; daily: string; bytes: string }>(
      `select (select sum(requests) from chatgate_usage_ledger) as requests, (select count(*) from chatgate_usage_ledger) as ledger,
              (select count(*) from chatgate_usage_daily) as daily, pg_total_relation_size('chatgate_usage_ledger') as bytes`,
    );
    const row = rows[0]!;
    return { requests: Number(row.requests), ledgerRows: Number(row.ledger), dailyRows: Number(row.daily), ledgerMiB: Math.round(Number(row.bytes) / 2 ** 20) };
  } finally {
    await client.end();
  }
}

function call(agent: https.Agent, origin: string, method: string, apiPath: string, cookie: string, body?: string): Promise<{ status: number; headers: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const req = https.request(`${origin}${apiPath}`, { method, agent, headers: { cookie, origin, ...(body ? { 'content-type': 'application/json' } : {}) } }, (res) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

function quantile(values: number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return Math.round(sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]! * 10) / 10;
}

export function ledgerReport(results: LedgerResults): string {
  const lines = [
    `ledger: ${results.requests.toLocaleString('en')} requests of one account in ${DAYS} days, ${results.ledgerRows.toLocaleString('en')} ledger rows (${results.ledgerMiB} MiB), ${results.dailyRows.toLocaleString('en')} daily rows; seeded in ${results.seedSeconds} s`,
    '| what | p50 / p95 / max ms |',
    '|------|--------------------|',
    ...results.pages.map((page) => `| ${page.name} | ${page.p50} / ${page.p95} / ${page.max} |`),
    ...results.pages.filter((page) => page.target).map((page) => `${page.p95 < TARGET_MS ? 'met   ' : 'MISSED'}  ${page.name} under ${TARGET_MS} ms at p95: ${page.p95} ms`),
  ];
  if (results.failures.length > 0) lines.push(`FAILED requests: ${results.failures.slice(0, 5).join('; ')}`);
  return `${lines.join('\n')}\n`;
}

/** The command line: `--ledger [--smoke]`. */
export async function main(argv = process.argv.slice(2)): Promise<void> {
  const started = performance.now();
  const progress = (line: string) => process.stderr.write(`[bench ledger +${Math.round((performance.now() - started) / 1000)}s] ${line}\n`);
  const smoke = argv.includes('--smoke');
  const database = await scaleDatabase();
  if ('notMeasured' in database) {
    progress(`not measured: ${database.notMeasured}`);
    process.exitCode = 1;
    return;
  }
  let results: LedgerResults;
  try {
    results = await runLedger(database.url, ledgerPlan(smoke), progress);
  } finally {
    await database.drop();
  }
  const resultsDir = path.join(repositoryRoot(), 'bench', 'results');
  mkdirSync(resultsDir, { recursive: true });
  const file = path.join(resultsDir, `${results.at.replace(/[:.]/g, '-')}-ledger${smoke ? '-smoke' : ''}.json`);
  writeFileSync(file, `${JSON.stringify(results, null, 2)}\n`);
  process.stdout.write(`${ledgerReport(results)}figures written to ${path.relative(process.cwd(), file)}\n`);
  if (results.failures.length > 0) process.exitCode = 1;
}
