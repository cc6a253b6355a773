/**
 * The benchmark's figures: the medians and ratios of its rounds, what failed, and the printed report.
 * Apart from run.ts, which runs the benchmark as soon as it is loaded, so that they can be tested.
 */

/** Each target's rounds, every figure by name (failures included). */
export type Rounds = Record<string, Array<Record<string, number>>>;
export type Ratios = Record<string, { median: number; min: number; max: number }>;

/** A line of the load generator's: a task's result, or the sign that every stream is open. */
export interface LoadMessage {
  plateau?: boolean;
  result?: unknown;
  index?: number;
}

/** A figure of no samples is NaN, which JSON carries as null: back to NaN, so that it stays n/a through the arithmetic. */
export function parseLoadLine(line: string): LoadMessage {
  return JSON.parse(line, (_key, value: unknown) => (value === null ? NaN : value)) as LoadMessage;
}

/** Targets with failed requests, and how many over all their rounds. */
export function failedRequests(rounds: Rounds): Array<[string, number]> {
  return Object.entries(rounds)
    .map(([name, list]): [string, number] => [name, list.reduce((sum, round) => sum + round.failures!, 0)])
    .filter(([, failures]) => failures > 0);
}

const RATIOS: Array<[string, string]> = [
  ['chatgate', 'bare Express'],
  ['chatgate', 'tuned Express'],
  ['tuned Express', 'bare proxy'],
  ['chatgate', 'bare proxy'],
  ['chatgate', 'direct'],
  ['chatgate ×2', 'chatgate'],
];

/**
 * Each ratio is taken within a round, where the two targets ran minutes apart at most, then the
 * median over rounds: on a shared machine whose speed drifts, that cancels what a ratio of two
 * separate medians would not. A round in which both targets served nothing (0 / 0) has no ratio and
 * is left out, as medianOf leaves out a figure a round did not measure; NaN if no round has one.
 */
export function throughputRatios(rounds: Rounds): Ratios {
  const measured = RATIOS.filter(([a, b]) => rounds[a]!.length > 0 && rounds[a]!.length === rounds[b]!.length);
  return Object.fromEntries(
    measured.map(([a, b]) => {
      const perRound = rounds[a]!.map((round, i) => round.rps! / rounds[b]![i]!.rps!)
        .filter((ratio) => !Number.isNaN(ratio))
        .sort((x, y) => x - y);
      if (perRound.length === 0) return [`${a}/${b}`, { median: NaN, min: NaN, max: NaN }];
      return [`${a}/${b}`, { median: perRound[Math.floor(perRound.length / 2)]!, min: perRound[0]!, max: perRound[perRound.length - 1]! }];
    }),
  );
}

/** Each figure's median over the rounds that measured it (NaN sorts nowhere), NaN if none did. */
export function medianOf(list: Array<Record<string, number>>): Record<string, number> {
  return Object.fromEntries(
    Object.keys(list[0]!).map((name) => {
      const sorted = list.map((entry) => entry[name]!).filter((figure) => !Number.isNaN(figure)).sort((a, b) => a - b);
      return [name, sorted.length === 0 ? NaN : sorted[Math.floor(sorted.length / 2)]!];
    }),
  );
}

export interface StreamFigure {
  streams: number;
  tokensPerSecond: number;
  intact: number;
  broken: Record<string, number>;
  directIntact: number;
  kibPerStream: number;
  bareProxyKibPerStream: number;
  bareProxyIntact: number;
  peakOpen: number;
  addedFirstTokenP50Ms: number;
  addedFirstTokenP99Ms: number;
  betweenTokensP50Ms: number;
  betweenTokensP99Ms: number;
  directBetweenTokensP99Ms: number;
  /** RSS of the process with all its streams open. */
  rssMiBAllOpen: number;
  bareProxyRssMiBAllOpen: number;
}

/**
 * What one more open stream costs: the RSS with all open, from the smallest stream count to the
 * largest, per stream added. Unlike growth from idle, it leaves out what a process spends once under
 * load whatever the count (V8's young generation grows to its working size) and what it had already
 * (a heap with room left from start-up fills before RSS moves), so a leaner idle process does not read worse.
 * The full run's two counts relay the same events per second (STREAM_RUNS in run.ts), so each holds what a stream holds between events.
 */
export function kibPerFurtherStream(runs: StreamFigure[], rss: 'rssMiBAllOpen' | 'bareProxyRssMiBAllOpen'): number {
  const first = runs[0];
  const last = runs[runs.length - 1];
  if (!first || !last || last.streams === first.streams) return NaN;
  return ((last[rss] - first[rss]) * 1024) / (last.streams - first.streams);
}

export interface Results {
  figures: Record<string, Record<string, number>>;
  ratios: Ratios;
  streams: StreamFigure[];
  furtherStream: { chatgate: number; bareProxy: number };
  auth: Record<string, unknown>;
  /** The body stage's cost per MiB by kind of body, and how soon 16 MiB of nesting is refused (absent in older runs). */
  body?: Record<string, unknown>;
  machine: { cpus: number; cpu: string | undefined; node: string };
  plan: { rate: number };
  smoke: boolean;
}

/** One of the performance targets (issue 7), judged on one run's figures. */
export interface Verdict {
  target: string;
  /** The run's figure as printed, n/a when it was not measured. */
  figure: string;
  /** A figure that was not measured has not met its target. */
  met: boolean;
}

/** A figure, or n/a when it could not be measured (not every stream was open at once, no request of a target answered). */
const fixed = (figure: number, digits: number) => (Number.isFinite(figure) ? figure.toFixed(digits) : 'n/a');

/**
 * The targets the benchmark exists for, each against this run's figures. Memory per open stream is
 * judged three ways, none left out: the cost of one more stream, and the growth from idle at each
 * count, which at the smallest count also spreads what a process spends once under load.
 */
export function judgeTargets(results: Results): Verdict[] {
  const verdicts: Verdict[] = [];
  const judge = (target: string, figure: number, digits: number, unit: string, met: (figure: number) => boolean) =>
    verdicts.push({ target, figure: Number.isFinite(figure) ? `${fixed(figure, digits)}${unit}` : 'n/a', met: Number.isFinite(figure) && met(figure) });
  const ratio = (pair: string) => results.ratios[pair]?.median ?? NaN;
  const f = results.figures;
  const added = (figure: 'p99' | 'seqP50') => (f.chatgate?.[figure] ?? NaN) - (f.direct?.[figure] ?? NaN);
  if (f.chatgate) {
    judge('chatgate ≥ 1.0× bare Express (requests/s)', ratio('chatgate/bare Express'), 2, '×', (x) => x >= 1);
    judge('chatgate ≥ 0.6× bare proxy (requests/s)', ratio('chatgate/bare proxy'), 2, '×', (x) => x >= 0.6);
    judge(`added p99 over direct ≤ 2 ms @${results.plan.rate}/s`, added('p99'), 2, ' ms', (x) => x <= 2);
    judge('sequential added p50 ≤ 0.5 ms', added('seqP50'), 3, ' ms', (x) => x <= 0.5);
  }
  const streamRuns = results.streams;
  if (streamRuns.length > 1) judge(`memory per open stream ≤ 64 KiB: one more, ${streamRuns[0]!.streams} to ${streamRuns[streamRuns.length - 1]!.streams}`, results.furtherStream.chatgate, 1, ' KiB', (x) => x <= 64);
  for (const run of streamRuns) judge(`memory per open stream ≤ 64 KiB: from idle at ${run.streams}`, run.kibPerStream, 1, ' KiB', (x) => x <= 64);
  if (streamRuns.length > 0) {
    const opened = streamRuns.reduce((sum, run) => sum + run.streams, 0);
    const intact = streamRuns.reduce((sum, run) => sum + run.intact, 0);
    verdicts.push({ target: 'every stream through chatgate intact', figure: `${intact} of ${opened}`, met: intact === opened });
  }
  for (const [store, cost] of Object.entries(results.auth)) {
    judge(`cache-hit key check ≤ 5 µs (${store} store)`, typeof cost === 'string' ? NaN : (cost as { hitUs: number }).hitUs, 2, ' µs', (x) => x <= 5);
  }
  return verdicts;
}

export function report(results: Results): string {
  const streamRuns = results.streams;
  const [fewest, most] = [streamRuns[0], streamRuns[streamRuns.length - 1]];
  const oneDecimal = (figure: number) => fixed(figure, 1);
  const f = results.figures;
  const direct = f.direct;
  const rows = Object.entries(f).map(([name, x]) => [
    name,
    fixed(x.rps!, 0),
    `${fixed(x.p50!, 2)} / ${fixed(x.p99!, 2)} / ${fixed(x.p999!, 2)}`,
    fixed(x.p99! - direct!.p99!, 2),
    fixed(x.seqP50!, 3),
    fixed(x.seqP50! - direct!.seqP50!, 3),
    fixed(x.cpuPerRequestUs!, 0),
    fixed(x.rssMiB!, 0),
    String(x.failures),
  ]);
  const header = ['target', 'req/s (saturated)', `p50 / p99 / p99.9 ms @${results.plan.rate}/s`, 'added p99 ms', 'sequential p50 ms', 'added seq. p50 ms', 'CPU µs/req', 'RSS MiB', 'failures'];
  const lines = [
    `chatgate benchmark${results.smoke ? ' (smoke run: figures are not meaningful)' : ''}: ${results.machine.cpus} × ${results.machine.cpu}, Node ${results.machine.node}`,
    '',
    ...(direct
      ? [
          table([header, ...rows]),
          '',
          `throughput ratios, median of the rounds' own (lowest-highest): ${Object.entries(results.ratios)
            .map(([pair, r]) => `${pair} ${fixed(r.median, 2)}× (${fixed(r.min, 2)}-${fixed(r.max, 2)})`)
            .join(', ')}`,
          '',
        ]
      : []),
    table([
      ['streams', 'intact (chatgate / direct / bare proxy)', 'KiB per open stream, from idle (bare proxy)', 'added first token p50 / p99 ms', 'between tokens p50 / p99 ms (direct p99)'],
      ...results.streams.map((s) => [
        `${s.streams} @${s.tokensPerSecond} tokens/s`,
        `${s.intact} / ${s.directIntact} / ${s.bareProxyIntact}${Object.keys(s.broken).length ? ` (others: ${JSON.stringify(s.broken)})` : ''}`,
        `${Number.isNaN(s.kibPerStream) ? `n/a (at most ${s.peakOpen} open at once)` : oneDecimal(s.kibPerStream)} (${oneDecimal(s.bareProxyKibPerStream)})`,
        `${fixed(s.addedFirstTokenP50Ms, 2)} / ${fixed(s.addedFirstTokenP99Ms, 2)}`,
        `${oneDecimal(s.betweenTokensP50Ms)} / ${oneDecimal(s.betweenTokensP99Ms)} (${oneDecimal(s.directBetweenTokensP99Ms)})`,
      ]),
    ]),
    '',
    ...(fewest && most && most !== fewest
      ? [
          `KiB per further open stream, RSS with all open from ${fewest.streams} to ${most.streams} streams: chatgate ${oneDecimal(results.furtherStream.chatgate)} (${oneDecimal(fewest.rssMiBAllOpen)} -> ${oneDecimal(most.rssMiBAllOpen)} MiB), bare proxy ${oneDecimal(results.furtherStream.bareProxy)} (${oneDecimal(fewest.bareProxyRssMiBAllOpen)} -> ${oneDecimal(most.bareProxyRssMiBAllOpen)} MiB)`,
          '',
        ]
      : []),
    `key check: ${Object.entries(results.auth)
      .map(([store, x]) => (typeof x === 'string' ? `${store} ${x}` : `${store} store: cache hit ${(x as { hitUs: number }).hitUs.toFixed(2)} µs, miss ${(x as { missUs: number }).missUs.toFixed(1)} µs`))
      .join('; ')}`,
    ...bodyLine(results.body),
    '',
    results.smoke ? 'targets, not judged (a smoke run is too short for its figures to mean anything):' : "targets, on this run's figures:",
    ...judgeTargets(results).map(({ target, figure, met }) => `  ${(results.smoke ? '-' : met ? 'met' : figure === 'n/a' ? 'not measured' : 'MISSED').padEnd(12)} ${target}: ${figure}`),
  ];
  return `${lines.join('\n')}\n`;
}

function bodyLine(body: Results['body']): string[] {
  if (!body || Object.keys(body).length === 0) return [];
  const kinds = Object.entries(body).filter((entry): entry is [string, { scanMsPerMiB: number; parseMsPerMiB: number }] => typeof entry[1] === 'object' && entry[1] !== null);
  const costs = kinds.map(([kind, x]) => `${kind} scan ${x.scanMsPerMiB.toFixed(2)} ms, decode + parse + validate ${x.parseMsPerMiB.toFixed(2)} ms`).join('; ');
  return [`request body per MiB: ${costs}; 16 MiB of nesting refused after ${Number(body.nestedRefusedUs).toFixed(0)} µs`];
}

function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, column) => Math.max(...rows.map((row) => row[column]!.length)));
  const line = (row: string[]) => `| ${row.map((cell, column) => cell.padEnd(widths[column]!)).join(' | ')} |`;
  return [line(rows[0]!), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...rows.slice(1).map(line)].join('\n');
}
