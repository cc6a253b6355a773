/**
 * Our hand-written replacements of two library features, each against the library's own way, in ONE
 * process: rounds alternate the arms (AB, BA, AB, ...) so both see the same noise from the rest of the
 * host, and each figure is the median of its rounds, with the spread (lowest-highest) beside it.
 *
 *   log      one access line per request, as `src/pipeline/observe.ts` writes it (accessLogOf), at
 *            info level: our LogDestination (src/tuning/log-destination.ts) against
 *            `pino.destination({ minLength, sync: false, periodicFlush })` (sonic-boom).
 *   metrics  the counter and histogram updates a proxied request makes (observe.ts, upstream/proxy/,
 *            the key cache): our families (src/tuning/instruments.ts) against
 *            prom-client's Counter and Histogram with labels (`inc(labels)`, `observe(labels, v)`;
 *            prom-client's `labels()` returns a new bound child each call, it caches nothing).
 *
 * A log round writes its lines a few per event-loop turn (as requests end), then waits until every
 * byte is written. Each arm's round is timed three ways: wall time, the main thread's CPU time (what
 * bounds a serving process's event loop) and the whole process's CPU time (sonic-boom's asynchronous
 * writes run on libuv's pool, on the other core: the host pays for them, the event loop does not).
 * On a shared host wall time is the noisiest of the three: the per-round ratio of two arms run back
 * to back is the figure to read.
 *
 * Build and run: `npx tsc -p tsconfig.build.json && npx tsc -p bench/tsconfig.json &&
 * node dist/bench/bench/tuning-ab.js [--rounds 20] [--log-ops 20000] [--metric-ops 200000] [--to file|devnull|both]
 * [--only log|metrics] [--min-length 2048]`
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { Counter, Histogram, Registry } from 'prom-client';
import { CounterFamily, HistogramFamily } from '../src/tuning/instruments';
import { accessLogOf, createLogger } from '../src/telemetry/log';
import { GATHER_BYTES, GATHER_MS, LogDestination } from '../src/tuning/log-destination';

const option = (name: string, fallback: string) => {
  const at = process.argv.indexOf(`--${name}`);
  return at === -1 ? fallback : process.argv[at + 1]!;
};
const ROUNDS = Number(option('rounds', '20'));
/** Requests per round: access lines (each waits for event-loop turns), and metric updates (a tight loop). */
const LOG_OPS = Number(option('log-ops', '20000'));
const METRIC_OPS = Number(option('metric-ops', '200000'));
const TO = option('to', 'both');
const ONLY = option('only', 'all');
/** sonic-boom's minLength: by default our GATHER_BYTES, so both arms write in chunks of the same size. */
const MIN_LENGTH = Number(option('min-length', String(GATHER_BYTES)));
/** Lines written per event-loop turn: a few requests end in each under load. */
const PER_TURN = 8;

/** Three clocks: wall time, the main thread's time on a CPU (what bounds the event loop), and the whole process's CPU time (what the host pays, libuv's pool included). */
const KINDS = ['wall', 'main', 'cpu'] as const;
type Kind = (typeof KINDS)[number];
type Figure = Record<Kind, number[]>;
/** One arm's round, in nanoseconds. */
type Sample = Record<Kind, number>;

/** The main thread's time on a CPU, in ns (Linux's schedstat; Node 20 has no per-thread figure). */
const MAIN_THREAD = `/proc/self/task/${process.pid}/schedstat`;
const mainThreadNs = () => (fs.existsSync(MAIN_THREAD) ? Number(fs.readFileSync(MAIN_THREAD, 'utf8').split(' ')[0]) : Number.NaN);

/** Starts the three clocks; the function returned reads them. */
function clocks(): () => Sample {
  const cpu0 = process.cpuUsage();
  const main0 = mainThreadNs();
  const t0 = process.hrtime.bigint();
  return () => {
    const wall = Number(process.hrtime.bigint() - t0);
    const main = mainThreadNs() - main0;
    const cpu = process.cpuUsage(cpu0);
    return { wall, main, cpu: (cpu.user + cpu.system) * 1000 };
  };
}

const median = (values: number[]) => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};
const spread = (values: number[]) => `${Math.min(...values).toFixed(3)}-${Math.max(...values).toFixed(3)}`;
const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

/** Runs `arms` alternately, `ROUNDS` times each, the order reversed every other round; figures in µs per op. */
async function alternate(ops: number, arms: Record<string, () => Promise<Sample>>): Promise<Record<string, Figure>> {
  const names = Object.keys(arms);
  const figures = Object.fromEntries(names.map((name) => [name, { wall: [], main: [], cpu: [] } as Figure]));
  for (const name of names) await arms[name]!(); // warm-up, not counted
  for (let round = 0; round < ROUNDS; round++) {
    for (const name of round % 2 === 0 ? names : [...names].reverse()) {
      const sample = await arms[name]!();
      for (const kind of KINDS) figures[name]![kind].push(sample[kind] / ops / 1000);
    }
  }
  return figures;
}

function report(title: string, ops: number, ours: string, library: string, figures: Record<string, Figure>): void {
  const a = figures[ours]!;
  const b = figures[library]!;
  console.log(`\n${title} (${ROUNDS} rounds x ${ops} ops per arm, alternating; Node ${process.version})`);
  console.log('  median us/op (lowest-highest round)');
  for (const [name, f] of Object.entries(figures)) {
    console.log(`  ${name.padEnd(36)} ${KINDS.map((kind) => `${kind} ${median(f[kind]).toFixed(3)} (${spread(f[kind])})`).join('  ')}`);
  }
  // Each round's ratio compares two arms that ran back to back, under the same load from the rest of the host.
  for (const kind of KINDS) {
    const ratios = a[kind].map((x, i) => b[kind][i]! / x);
    console.log(`  library/ours ${kind.padEnd(4)}: ${median(ratios).toFixed(3)}x median of per-round ratios (${spread(ratios)}); ratio of medians ${(median(b[kind]) / median(a[kind])).toFixed(3)}x`);
  }
  const floor = figures[FLOOR];
  if (floor) {
    const net = (f: Figure) => KINDS.map((kind) => `${kind} ${(median(f[kind]) - median(floor[kind])).toFixed(3)}`).join(' ');
    console.log(`  above the floor, us/op: ours ${net(a)}; library ${net(b)}`);
  }
}

/** The log rounds' third arm: the same lines made and handed to a destination that drops them. */
const FLOOR = 'floor (line made, not written)';

/** The fields observe.ts writes for an answered, non-streamed chat request. */
function accessFields(n: number) {
  return {
    requestId: `0f3c2a9e-8d1b-4c6e-9a7f-${String(n).padStart(12, '0')}`,
    traceId: undefined,
    keyId: 'k_7Hq2mX9pLr4v',
    keyName: 'team-search',
    client: '10.0.3.17',
    method: 'POST',
    path: '/v1/chat/completions',
    endpoint: 'chat',
    provider: 'local',
    model: 'llama-3.1-8b',
    alias: undefined,
    target: 'local/llama-3.1-8b',
    worker: 'http://127.0.0.1:8001',
    status: 200,
    code: undefined,
    durationMs: 41.27,
    upstreamFirstByteMs: 38.5,
    stream: false,
    promptTokens: 57,
    completionTokens: 212,
    completed: true,
  };
}

type Destination = pino.DestinationStream & { flushSync(): void };

async function logArm(make: () => Destination, settle: (destination: Destination) => Promise<void>, file: string) {
  if (file !== '/dev/null') fs.writeFileSync(file, '');
  const destination = make();
  const writeAccessLine = accessLogOf(createLogger('info', destination));
  await turn();
  const stop = clocks();
  for (let n = 0; n < LOG_OPS; ) {
    for (let i = 0; i < PER_TURN && n < LOG_OPS; i++, n++) writeAccessLine(accessFields(n));
    await turn();
  }
  await settle(destination);
  const sample = stop();
  if (file !== '/dev/null') {
    const lines = fs.readFileSync(file, 'utf8').split('\n').length - 1;
    if (lines !== LOG_OPS) throw new Error(`${lines} lines written of ${LOG_OPS}`);
  }
  (destination as unknown as { destroy(): void }).destroy();
  return sample;
}

async function benchLog(file: string): Promise<void> {
  const ours = () =>
    logArm(
      () => new LogDestination(file),
      async (destination) => destination.flushSync(),
      file,
    );
  const library = () =>
    logArm(
      () => pino.destination({ dest: file, minLength: MIN_LENGTH, sync: false, periodicFlush: GATHER_MS }) as unknown as Destination,
      (destination) =>
        new Promise<void>((resolve, reject) => {
          const boom = destination as unknown as import('node:events').EventEmitter & { _writing: boolean; _len: number; flushSync(): void };
          // flush() would also fsync the file; what a request pays is the write, so wait for it alone.
          const done = (): void => {
            if (boom._writing) {
              setImmediate(done);
              return;
            }
            if (boom._len > 0) boom.flushSync(); // what is left below minLength, as ours writes its rest
            resolve();
          };
          boom.once('error', reject);
          done();
        }),
      file,
    );
  const floor = () =>
    logArm(
      () => ({ write: () => true, flushSync() {}, destroy() {} }),
      async () => {},
      '/dev/null',
    );
  const figures = await alternate(LOG_OPS, { 'ours (LogDestination)': ours, 'pino.destination minLength async': library, [FLOOR]: floor });
  report(`access line to ${file}, minLength ${MIN_LENGTH}`, LOG_OPS, 'ours (LogDestination)', 'pino.destination minLength async', figures);
}

const BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
const OVERHEAD = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1];
const PROVIDERS = ['local', 'remote', 'spare'];
const STATUSES = ['200', '200', '200', '200', '429', '400', '200', '502'];

async function benchMetrics(): Promise<void> {
  const oursRegistry = new Registry();
  const libRegistry = new Registry();
  const r = [oursRegistry];
  const ours = {
    requests: new CounterFamily({ name: 'req_total', help: 'h', labelNames: ['endpoint', 'provider', 'status'] as const, registers: r }),
    duration: new HistogramFamily({ name: 'dur_seconds', help: 'h', labelNames: ['endpoint', 'provider'] as const, buckets: BUCKETS, registers: r }),
    overhead: new HistogramFamily({ name: 'over_seconds', help: 'h', labelNames: ['provider'] as const, buckets: OVERHEAD, registers: r }),
    firstByte: new HistogramFamily({ name: 'ttfb_seconds', help: 'h', labelNames: ['provider'] as const, buckets: BUCKETS, registers: r }),
    tokens: new CounterFamily({ name: 'tok_total', help: 'h', labelNames: ['provider', 'kind'] as const, registers: r }),
    keyHits: new CounterFamily({ name: 'hits_total', help: 'h', labelNames: [], registers: r }).series({}),
  };
  const l = [libRegistry];
  const lib = {
    requests: new Counter({ name: 'req_total', help: 'h', labelNames: ['endpoint', 'provider', 'status'] as const, registers: l }),
    duration: new Histogram({ name: 'dur_seconds', help: 'h', labelNames: ['endpoint', 'provider'] as const, buckets: BUCKETS, registers: l }),
    overhead: new Histogram({ name: 'over_seconds', help: 'h', labelNames: ['provider'] as const, buckets: OVERHEAD, registers: l }),
    firstByte: new Histogram({ name: 'ttfb_seconds', help: 'h', labelNames: ['provider'] as const, buckets: BUCKETS, registers: l }),
    tokens: new Counter({ name: 'tok_total', help: 'h', labelNames: ['provider', 'kind'] as const, registers: l }),
    keyHits: new Counter({ name: 'hits_total', help: 'h', registers: l }),
  };
  const time = async (request: (n: number) => void) => {
    const stop = clocks();
    for (let n = 0; n < METRIC_OPS; n++) request(n);
    const sample = stop();
    await turn();
    return sample;
  };
  // One proxied request's updates, in the order the request path makes them (labels built per request, as there).
  const oursArm = () =>
    time((n) => {
      const provider = PROVIDERS[n % 3]!;
      ours.keyHits.inc();
      ours.overhead.series({ provider }).observe(0.00031);
      ours.firstByte.series({ provider }).observe(0.0385);
      ours.tokens.series({ provider, kind: 'prompt' }).inc(57);
      ours.tokens.series({ provider, kind: 'completion' }).inc(212);
      ours.requests.series({ endpoint: 'chat', provider, status: STATUSES[n & 7]! }).inc();
      ours.duration.series({ endpoint: 'chat', provider }).observe(0.04127);
    });
  const libArm = () =>
    time((n) => {
      const provider = PROVIDERS[n % 3]!;
      lib.keyHits.inc();
      lib.overhead.observe({ provider }, 0.00031);
      lib.firstByte.observe({ provider }, 0.0385);
      lib.tokens.inc({ provider, kind: 'prompt' }, 57);
      lib.tokens.inc({ provider, kind: 'completion' }, 212);
      lib.requests.inc({ endpoint: 'chat', provider, status: STATUSES[n & 7]! });
      lib.duration.observe({ endpoint: 'chat', provider }, 0.04127);
    });
  const figures = await alternate(METRIC_OPS, { 'ours (CounterFamily/HistogramFamily)': oursArm, 'prom-client inc(labels)/observe': libArm });
  report("one request's counter and histogram updates", METRIC_OPS, 'ours (CounterFamily/HistogramFamily)', 'prom-client inc(labels)/observe', figures);
  // The two registries must say the same (bar the values' scale): a check that both arms did the same work.
  const [a, b] = await Promise.all([oursRegistry.metrics(), libRegistry.metrics()]);
  if (a !== b) throw new Error('the two arms exposed different metrics');
}

async function main(): Promise<void> {
  if (ONLY !== 'log') await benchMetrics();
  if (ONLY !== 'metrics') {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'chatgate-tuning-ab-'));
    try {
      if (TO === 'devnull' || TO === 'both') await benchLog('/dev/null');
      if (TO === 'file' || TO === 'both') await benchLog(path.join(dir, 'access.log'));
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
