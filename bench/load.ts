/**
 * The load generator, run as its own process so its CPU is not the gateway's. One task per run, given
 * as JSON in argv; the result is one JSON line on stdout (streams also print {"plateau":true} when every
 * stream is open, so the runner can read the gateway's memory then).
 *   saturate   autocannon, many keep-alive connections, as fast as they go: requests/s
 *   rate       open loop at a fixed rate: latency percentiles measured from the scheduled send time
 *   sequential one request at a time on one connection: per-request latency
 *   streams    N concurrent SSE streams: time to first token, time between tokens, intact or not
 */
import https from 'node:https';
import readline from 'node:readline';
import tls from 'node:tls';
import autocannon from 'autocannon';
import { mulberry32, scaleKey } from './scale-figures';

export interface Target {
  url: string;
  ca: string;
  headers: Record<string, string>;
  body: string;
}

export type Task = (
  | { kind: 'saturate'; target: Target; connections: number; seconds: number }
  | {
      kind: 'rate';
      target: Target;
      rate: number;
      seconds: number;
      /** Sent at the rate first, not measured (default 1): it opens the connections and warms the JIT. */
      leadInSeconds?: number;
      /** Each request with a key drawn at random (seeded) from scaleKey(1..inUse), instead of the target's own authorization. */
      keys?: { inUse: number; seed: number };
      /** The p99 of each window of this many seconds too (windowP99), in order. */
      windowSeconds?: number;
    }
  | { kind: 'sequential'; target: Target; count: number }
  | { kind: 'streams'; target: Target; streams: number; opensPerSecond: number }
) & {
  /** Starts only once the runner says go (a line on stdin), after it has heard the task before: it reads what it must between the two. */
  afterGo?: boolean;
};

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

const summary = (samples: number[]) => {
  const sorted = [...samples].sort((a, b) => a - b);
  return { count: sorted.length, p50: percentile(sorted, 50), p99: percentile(sorted, 99), p999: percentile(sorted, 99.9), mean: sorted.reduce((a, b) => a + b, 0) / (sorted.length || 1) };
};

/**
 * One TLS context per task, as a client library keeps one: given `ca` per request, Node builds a
 * context for every connection, which made the load generator the bottleneck when opening thousands
 * of streams (about 0.7 ms more of its CPU per connection on this machine).
 */
function agentFor(target: Target, options: { maxSockets: number; scheduling?: 'fifo' | 'lifo' }): https.Agent {
  return new https.Agent({ keepAlive: true, ...options, secureContext: tls.createSecureContext({ ca: target.ca }), servername: 'localhost' });
}

function send(target: Target, agent: https.Agent, onChunk?: (at: number) => void, key?: string): Promise<{ status: number; text: string; error?: string }> {
  return new Promise((resolve) => {
    const headers = key === undefined ? { ...target.headers, 'content-type': 'application/json' } : { ...target.headers, authorization: `Bearer ${key}`, 'content-type': 'application/json' };
    const req = https.request(target.url, { method: 'POST', agent, headers }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        onChunk?.(performance.now());
        text += chunk;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      res.on('error', (err: NodeJS.ErrnoException) => resolve({ status: 0, text, error: err.code ?? err.message }));
    });
    req.on('error', (err: NodeJS.ErrnoException) => resolve({ status: 0, text: '', error: err.code ?? err.message }));
    req.end(target.body);
  });
}

async function saturate(task: Extract<Task, { kind: 'saturate' }>) {
  const result = await autocannon({
    url: task.target.url,
    method: 'POST',
    headers: { ...task.target.headers, 'content-type': 'application/json' },
    body: task.target.body,
    connections: task.connections,
    duration: task.seconds,
    tlsOptions: { ca: task.target.ca, servername: 'localhost' },
  });
  return { requestsPerSecond: result.requests.average, requests: result.requests.total, non2xx: result.non2xx, errors: result.errors + result.timeouts };
}

/**
 * The rate tasks' connections, kept from one task to the next of this process: the lead-in opens them
 * for the measured windows after it (64 TLS handshakes at the start of a window were its p99).
 */
const rateAgents = new Map<string, https.Agent>();

/**
 * Open loop: requests are sent on schedule whether or not earlier ones have answered, and each latency
 * counts from its scheduled time (no coordinated omission), or from its send when that was early. The
 * lead-in (1 s unless told) is sent at the same rate but not measured: it opens the connections (a TLS
 * handshake each) and warms the JIT, which would otherwise be the p99.
 *
 * This process keeps as little as it can per request (a counter for those in flight, the latencies in
 * one preallocated array): run from the scale benchmark's own process, with 50,000 answers' promises
 * held in a list, its event loop stopped 40-90 ms at a time, every few seconds, and each stop was
 * counted in the gateway's p99.
 */
async function atRate(task: Extract<Task, { kind: 'rate' }>) {
  const agentKey = `${task.target.url} ${task.target.ca}`;
  // First in, first out: each of the 64 connections carries a request every 64 ms or so. The default
  // (last in, first out) can leave some idle past the gateway's keepAliveTimeout (5 s), and a request
  // sent on one as the gateway closes it fails: 1-2 ECONNRESETs at one instant in some runs.
  const agent = rateAgents.get(agentKey) ?? agentFor(task.target, { maxSockets: 64, scheduling: 'fifo' });
  rateAgents.set(agentKey, agent);
  const count = Math.round(task.rate * task.seconds);
  const latencies = new Float64Array(count);
  const answered = new Uint8Array(count);
  let failures = 0;
  const keys = task.keys;
  const random = keys && mulberry32(keys.seed);
  const keyOf = keys && random ? () => scaleKey(1 + Math.floor(random() * keys.inUse)) : () => undefined;
  const sendAtRate = (n: number, onAnswer?: (i: number, status: number, from: number) => void) =>
    new Promise<void>((resolve) => {
      const started = performance.now();
      let inFlight = 0;
      let sent = 0;
      const next = async () => {
        for (; sent < n; sent++) {
          const i = sent;
          const due = started + (i * 1000) / task.rate;
          const wait = due - performance.now();
          if (wait > 1) await new Promise((later) => setTimeout(later, wait));
          // From the scheduled time when the send is late (a stalled server is not excused), from the send
          // itself when it left up to a millisecond early (a timer waits at least 1 ms, so it is not used).
          const from = Math.min(due, performance.now());
          inFlight++;
          void send(task.target, agent, undefined, keyOf()).then(({ status }) => {
            onAnswer?.(i, status, from);
            if (--inFlight === 0 && sent === n) resolve();
          });
        }
        if (inFlight === 0) resolve();
      };
      void next();
    });
  await sendAtRate(Math.round(task.rate * (task.leadInSeconds ?? 1)));
  await sendAtRate(count, (i, status, from) => {
    if (status !== 200) return void failures++;
    latencies[i] = performance.now() - from;
    answered[i] = 1;
  });
  const all: number[] = [];
  const perWindow = Math.round(task.rate * (task.windowSeconds ?? task.seconds));
  const windowP99: number[] = [];
  for (let from = 0; from < count; from += perWindow) {
    const window: number[] = [];
    for (let i = from; i < Math.min(count, from + perWindow); i++) if (answered[i]) window.push(latencies[i]!);
    all.push(...window);
    window.sort((a, b) => a - b);
    windowP99.push(percentile(window, 99));
  }
  return { ...summary(all), windowP99, failures };
}

async function sequential(task: Extract<Task, { kind: 'sequential' }>) {
  const agent = agentFor(task.target, { maxSockets: 1 });
  const latencies: number[] = [];
  let failures = 0;
  for (let i = 0; i < task.count + 50; i++) {
    const began = performance.now();
    const { status } = await send(task.target, agent);
    if (i < 50) continue; // warm-up: connection, JIT
    if (status === 200) latencies.push(performance.now() - began);
    else failures++;
  }
  agent.destroy();
  return { ...summary(latencies), failures };
}

/**
 * Streams are opened at `opensPerSecond` (clients do not all connect in one millisecond, and a
 * flood of TLS handshakes would measure the handshake queue); each runs long enough that all are
 * open at once, which prints the plateau line once. `peakOpen` says how many ever were.
 */
async function streams(task: Extract<Task, { kind: 'streams' }>) {
  const agent = agentFor(task.target, { maxSockets: Infinity });
  const firstToken: number[] = [];
  const betweenTokens: number[] = [];
  let open = 0;
  let peakOpen = 0;
  let intact = 0;
  const broken: Record<string, number> = {};
  const one = async () => {
    const began = performance.now();
    let last: number | undefined;
    const { status, text, error } = await send(task.target, agent, (at) => {
      if (last === undefined) {
        firstToken.push(at - began);
        peakOpen = Math.max(peakOpen, ++open);
        if (open === task.streams) process.stdout.write(`${JSON.stringify({ plateau: true })}\n`);
      } else betweenTokens.push(at - last);
      last = at;
    });
    if (last !== undefined) open--;
    if (status === 200 && text.trimEnd().endsWith('data: [DONE]')) intact++;
    else {
      const why = status === 200 ? 'cut short' : status === 0 ? `error ${error}` : `status ${status} ${/"code":"([a-z_]+)"/.exec(text)?.[1] ?? ''}`.trimEnd();
      broken[why] = (broken[why] ?? 0) + 1;
    }
  };
  const all: Array<Promise<void>> = [];
  const batch = Math.max(1, Math.round(task.opensPerSecond / 20));
  for (let started = 0; started < task.streams; started += batch) {
    for (let i = started; i < Math.min(task.streams, started + batch); i++) all.push(one());
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  await Promise.all(all);
  agent.destroy();
  return { streams: task.streams, intact, broken, peakOpen, firstTokenMs: summary(firstToken), betweenTokensMs: summary(betweenTokens) };
}

const runners = { saturate, rate: atRate, sequential, streams } as const;

/**
 * Tasks given as a list run one after another in this one process (a process per task cost about
 * 1.3 s per target and round in starting up), each result printed with its index as it is ready. A
 * pause between tasks lets the runner read the target's CPU time before the next task's traffic.
 */
const BETWEEN_TASKS_MS = 100;

async function runAll(tasks: Task[]): Promise<void> {
  const goes = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();
  for (const [index, task] of tasks.entries()) {
    if (task.afterGo) await goes.next();
    else if (index > 0) await new Promise((resolve) => setTimeout(resolve, BETWEEN_TASKS_MS));
    const result = await (runners[task.kind] as (task: Task) => Promise<unknown>)(task);
    process.stdout.write(`${JSON.stringify({ result, index })}\n`);
  }
  process.stdin.destroy();
  for (const agent of rateAgents.values()) agent.destroy();
}

if (require.main === module) {
  const given = JSON.parse(process.argv[2]!) as Task | Task[];
  runAll(Array.isArray(given) ? given : [given]).catch((err: Error) => {
    process.stderr.write(`${err.stack}\n`);
    process.exit(1);
  });
}
