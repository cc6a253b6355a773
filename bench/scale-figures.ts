/**
 * The scale run's figures (bench/scale.ts): the keys it seeds, what it measured per store, the
 * printed tables and the goals judged on one run. Apart from the runner, so they can be tested.
 */
import { KEY_PREFIX } from '../src/common/key-shape';

/** A small deterministic generator (mulberry32): the same keys are drawn in every run. */
export function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * Seeded key number `i` (1, 2, ...): a real key's shape (`cgk_` and 43 base64url characters), so the
 * gateway takes it as one. PostgreSQL makes the same text with SCALE_KEY_SQL and digests it in SQL;
 * the run checks that its digest is the one src/auth/keys.ts gives before it measures anything.
 */
export function scaleKey(i: number): string {
  return `${KEY_PREFIX}scale${String(i).padStart(38, '0')}`;
}

/** scaleKey in SQL, of an integer expression. */
export const scaleKeySql = (i: string): string => `'${KEY_PREFIX}scale' || lpad((${i})::text, 38, '0')`;

export interface ScalePlan {
  /** Keys seeded in each store. */
  keys: number;
  /** Keys seeded before the key creates "at mid" are measured: a tenth (100,000 of 1,000,000). */
  midKeys: number;
  /** Keys in use, one gateway each: 1, a hundredth and a tenth of the keys (10,000 and 100,000 of 1,000,000). */
  workingSets: number[];
  /** Keys created through the admin API per measurement, four at a time. */
  creates: number;
  /** Requests a second of the measured phases, sent open loop. */
  rate: number;
  leadInSeconds: number;
  /** One measured window: the usage flush's interval (the default lastUsedFlushMs), so each window holds one flush. */
  seconds: number;
  /** Windows measured back to back per row: one window's p99 is its 100 slowest requests, which one hiccup of the host sets. */
  windows: number;
  /** The warm pass sends every key in use once, and at least this many requests (it also warms the JIT). */
  warmRequests: number;
  /**
   * Times each keys-in-use row is measured, the rows alternating (scaleOrder): a p99 is set by how the
   * host shares its cores that minute, so a row is judged against the one-key row of its own round,
   * and a goal on the median of the rounds' ratios.
   */
  rounds: number;
  smoke: boolean;
}

/** Rounds of a full run unless `--scale-rounds` says otherwise (a smoke run: one). */
export const DEFAULT_ROUNDS = 3;
export const MAX_ROUNDS = 10;

export function scalePlan(keys: number, smoke: boolean, rounds = smoke ? 1 : DEFAULT_ROUNDS): ScalePlan {
  if (!Number.isInteger(keys) || keys < 1000) throw new Error(`--scale-keys must be a whole number of 1000 or more (got ${keys})`);
  if (!Number.isInteger(rounds) || rounds < 1 || rounds > MAX_ROUNDS) throw new Error(`--scale-rounds must be a whole number from 1 to ${MAX_ROUNDS} (got ${rounds})`);
  const base = { keys, midKeys: Math.floor(keys / 10), workingSets: [1, Math.floor(keys / 100), Math.floor(keys / 10)], rounds, smoke };
  return smoke
    ? { ...base, creates: 50, rate: 200, leadInSeconds: 0.5, seconds: 0.5, windows: 2, warmRequests: 200 }
    : { ...base, creates: 500, rate: 1000, leadInSeconds: 1, seconds: 10, windows: 5, warmRequests: 5000 };
}

/** The stores a scale run measures. */
export const SCALE_STORES = ['postgres', 'sqlite'] as const;
export type ScaleStoreName = (typeof SCALE_STORES)[number];

/** `--scale-stores`' list (comma-separated; none given: both), an unknown or repeated name refused. */
export function scaleStores(text: string | undefined): ScaleStoreName[] {
  if (text === undefined) return [...SCALE_STORES];
  const names = text.split(',').map((name) => name.trim());
  for (const [i, name] of names.entries()) {
    if (!(SCALE_STORES as readonly string[]).includes(name)) throw new Error(`--scale-stores takes ${SCALE_STORES.join(', ')} (got ${JSON.stringify(name)})`);
    if (names.indexOf(name) !== i) throw new Error(`--scale-stores names ${name} twice`);
  }
  return names as ScaleStoreName[];
}

/**
 * The order the rows are measured in: the working sets in turn each round, every other round
 * backwards (1, 10,000, 100,000, then 100,000, 10,000, 1, ...), so that no row is always the first
 * gateway after the seed or always the last.
 */
export function scaleOrder(plan: Pick<ScalePlan, 'workingSets' | 'rounds'>): Array<{ round: number; keysInUse: number }> {
  return Array.from({ length: plan.rounds }, (_, round) => (round % 2 === 0 ? plan.workingSets : [...plan.workingSets].reverse()).map((keysInUse) => ({ round, keysInUse }))).flat();
}

/** The middle value (of an even count, the mean of the two middle ones); NaN for none. */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length === 0 ? NaN : sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

export interface CreateFigure {
  /** Keys in the store when the creates began. */
  atKeys: number;
  creates: number;
  perSecond: number;
  /** Wall time of one create as a client waits for it (four at a time). */
  msEach: number;
  failures: number;
}

export interface LatencyFigure {
  requests: number;
  /** Over every window together. */
  p50: number;
  p99: number;
  /** Each window's own p99, in the order measured. */
  windowP99: number[];
  failures: number;
}

export interface WorkingSetFigure extends LatencyFigure {
  keysInUse: number;
  /** The round it was measured in (0, 1, ...: scaleOrder). */
  round: number;
  cacheSize: number;
  startupMs: number;
  /** Cache hits / (hits + misses) over the measured phase, from the gateway's /metrics. */
  hitRatio: number;
  addedP50: number;
  addedP99: number;
  /** The gateway process's user + system CPU over the measured phase, per request. */
  cpuUsPerRequest: number;
  rssMiB: number;
  /** Requests of the warm pass that did not answer 200. */
  warmFailures: number;
}

export interface StoreFigures {
  store: string;
  /** Why it was not measured (no PostgreSQL answering), else absent. */
  notMeasured?: string;
  seedSeconds: { mid: number; full: number };
  startupMs: { empty: number; mid: number };
  creates: CreateFigure[];
  direct: LatencyFigure;
  workingSets: WorkingSetFigure[];
}

export interface ScaleResults {
  at: string;
  plan: ScalePlan;
  machine: Record<string, unknown>;
  stores: StoreFigures[];
}

export interface Verdict {
  verdict: 'met' | 'MISSED' | 'not measured' | 'not judged';
  goal: string;
  figure: string;
}

const fixed = (value: number, digits: number) => (Number.isFinite(value) ? value.toFixed(digits) : 'n/a');
const thousands = (value: number) => value.toLocaleString('en-US');
const seconds = (ms: number) => `${fixed(ms / 1000, 2)} s`;
/** The lowest and highest of the windows' figures. */
const spread = (values: readonly number[]) => (values.length === 0 ? 'n/a' : `${fixed(Math.min(...values), 2)}-${fixed(Math.max(...values), 2)}`);

/** The goals, on one run's figures: start-up under 5 s at all keys; p99 within 1.5× of one key; key creates flat. */
export function judgeScale(results: Pick<ScaleResults, 'plan' | 'stores'>): Verdict[] {
  const { plan } = results;
  const verdicts: Verdict[] = [];
  const judged = (met: boolean) => (plan.smoke ? 'not judged' : met ? 'met' : 'MISSED');
  for (const store of results.stores) {
    if (store.notMeasured !== undefined) {
      verdicts.push({ verdict: 'not measured', goal: `every goal (${store.store})`, figure: store.notMeasured });
      continue;
    }
    const full = store.workingSets.map((set) => set.startupMs);
    const slowest = Math.max(...full);
    verdicts.push({ verdict: judged(slowest < 5000), goal: `start-up under 5 s at ${thousands(plan.keys)} keys (${store.store})`, figure: `slowest of ${full.length}: ${seconds(slowest)}` });
    const sizes = [...new Set(store.workingSets.map((set) => set.keysInUse))].filter((keysInUse) => keysInUse > 1);
    for (const keysInUse of sizes) verdicts.push(judgeRow(store, keysInUse, judged));
    const first = store.creates.find((c) => c.atKeys === 0);
    const mid = store.creates.find((c) => c.atKeys === plan.midKeys);
    const ratio = (mid?.msEach ?? NaN) / (first?.msEach ?? NaN);
    verdicts.push({
      verdict: Number.isFinite(ratio) ? judged(ratio <= 1.5) : 'not measured',
      goal: `key create cost flat (within 1.5×) from the first ${thousands(plan.creates)} to ${thousands(plan.midKeys)} keys (${store.store})`,
      figure: `${fixed(mid?.msEach ?? NaN, 2)} against ${fixed(first?.msEach ?? NaN, 2)} ms a create: ${fixed(ratio, 2)}×`,
    });
  }
  return verdicts;
}

/**
 * A keys-in-use row's p99 against the one-key row's of the same round: met when the median of the
 * rounds' ratios is within 1.5× and the working set was in the cache in every round.
 */
function judgeRow(store: StoreFigures, keysInUse: number, judged: (met: boolean) => Verdict['verdict']): Verdict {
  const rows = store.workingSets.filter((set) => set.keysInUse === keysInUse);
  const pairs = rows.map((set) => ({ set, one: store.workingSets.find((o) => o.keysInUse === 1 && o.round === set.round) }));
  const ratios = pairs.map(({ set, one }) => set.p99 / (one?.p99 ?? NaN));
  const ratio = ratios.some((r) => !Number.isFinite(r)) ? NaN : median(ratios);
  const lowest = Math.min(...rows.map((set) => set.hitRatio));
  const inCache = lowest >= 0.99 ? '' : `; hit ratio ${fixed(lowest * 100, 1)} %: the working set was not in the cache`;
  const goal = `p99 with ${thousands(keysInUse)} keys in use within 1.5× of one key's (${store.store})`;
  const verdict = Number.isFinite(ratio) ? judged(ratio <= 1.5 && lowest >= 0.99) : 'not measured';
  if (pairs.length === 1) {
    const { set, one } = pairs[0]!;
    return { verdict, goal, figure: `${fixed(set.p99, 2)} against ${fixed(one?.p99 ?? NaN, 2)} ms: ${fixed(ratio, 2)}× (windows ${spread(set.windowP99)} against ${spread(one?.windowP99 ?? [])} ms)${inCache}` };
  }
  const list = (values: number[]) => values.map((value) => fixed(value, 2)).join(', ');
  return {
    verdict,
    goal,
    figure: `median of ${pairs.length} rounds' ratios ${fixed(ratio, 2)}× (${spread(ratios)}): ${list(rows.map((set) => set.p99))} against ${list(pairs.map(({ one }) => one?.p99 ?? NaN))} ms${inCache}`,
  };
}

function table(head: string[], rows: string[][]): string {
  const widths = head.map((title, i) => Math.max(title.length, ...rows.map((row) => row[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((cell, i) => cell.padEnd(widths[i]!)).join(' | ')} |`;
  return [line(head), `|${widths.map((width) => '-'.repeat(width + 2)).join('|')}|`, ...rows.map(line)].join('\n');
}

export function scaleReport(results: ScaleResults): string {
  const { plan } = results;
  const measured = results.stores.filter((store) => store.notMeasured === undefined);
  const latency = table(
    ['store', 'keys in use', 'round', 'auth.cacheSize', 'hit ratio', 'p50 / p99 ms', `p99 of each ${plan.seconds} s`, 'added p50 / p99 ms', 'gateway CPU µs/req', 'RSS MiB', 'failures'],
    measured.flatMap((store) => [
      [store.store, 'direct', '', '', '', `${fixed(store.direct.p50, 2)} / ${fixed(store.direct.p99, 2)}`, spread(store.direct.windowP99), '', '', '', String(store.direct.failures)],
      ...[...store.workingSets].sort((a, b) => a.keysInUse - b.keysInUse || a.round - b.round).map((set) => [
        store.store,
        thousands(set.keysInUse),
        String(set.round + 1),
        thousands(set.cacheSize),
        `${fixed(set.hitRatio * 100, 2)} %`,
        `${fixed(set.p50, 2)} / ${fixed(set.p99, 2)}`,
        spread(set.windowP99),
        `${fixed(set.addedP50, 2)} / ${fixed(set.addedP99, 2)}`,
        fixed(set.cpuUsPerRequest, 0),
        fixed(set.rssMiB, 0),
        String(set.failures + set.warmFailures),
      ]),
    ]),
  );
  const createsAt = (store: StoreFigures, keys: number) => {
    const figure = store.creates.find((c) => c.atKeys === keys);
    return figure ? `${fixed(figure.perSecond, 0)} (${fixed(figure.msEach, 2)} ms)` : 'n/a';
  };
  const startup = table(
    ['store', 'seeded in', 'start-up at 0 keys', `at ${thousands(plan.midKeys)}`, `at ${thousands(plan.keys)} (each start)`, 'creates/s at 0 (ms each)', `at ${thousands(plan.midKeys)}`, `at ${thousands(plan.keys)}`],
    measured.map((store) => [
      store.store,
      `${fixed(store.seedSeconds.full, 1)} s`,
      seconds(store.startupMs.empty),
      seconds(store.startupMs.mid),
      `${store.workingSets.map((set) => fixed(set.startupMs / 1000, 2)).join(', ')} s`,
      createsAt(store, 0),
      createsAt(store, plan.midKeys),
      createsAt(store, plan.keys),
    ]),
  );
  const lines = [
    `${thousands(plan.keys)} keys in each store${plan.smoke ? ' (smoke: the figures mean nothing)' : ''}; ${plan.rate} requests/s for ${plan.windows} windows of ${plan.seconds} s per row (the p99 is of all of them), ${plan.rounds} round${plan.rounds === 1 ? '' : 's'} of the rows (alternating; a row is set against the one-key row of its round), keys drawn at random from those in use, after a warm pass that used each once; ${plan.creates} key creates per figure through the admin API, four at a time`,
    '',
    startup,
    '',
    latency,
    ...results.stores.filter((store) => store.notMeasured !== undefined).map((store) => `\n${store.store}: not measured (${store.notMeasured})`),
    '',
    '```',
    'goals, on this run\'s figures:',
    ...judgeScale(results).map((v) => `  ${v.verdict.padEnd(12)} ${v.goal}: ${v.figure}`),
    '```',
  ];
  return `${lines.join('\n')}\n`;
}

/** Requests that did not answer as they should, per store: a run with any is not a measurement of a working gateway. */
export function scaleFailures(results: Pick<ScaleResults, 'stores'>): Array<[string, number]> {
  return results.stores
    .filter((store) => store.notMeasured === undefined)
    .map((store): [string, number] => [
      store.store,
      store.direct.failures + store.creates.reduce((sum, c) => sum + c.failures, 0) + store.workingSets.reduce((sum, set) => sum + set.failures + set.warmFailures, 0),
    ])
    .filter(([, failures]) => failures > 0);
}
