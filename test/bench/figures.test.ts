/**
 * The benchmark's figures (bench/figures.ts) when a target fails: figures it could not measure print
 * n/a instead of breaking the report, and the run can tell which targets failed requests; and the
 * performance targets judged on a run's figures.
 */
import { failedRequests, judgeTargets, medianOf, parseLoadLine, report, throughputRatios, type Results, type Rounds, type StreamFigure } from '../../bench/figures';

/** A round of a target, as run.ts records it from the load generator's three tasks. */
function round(rps: number, latencyMs: number, failures: number) {
  return { rps, p50: latencyMs, p99: latencyMs, p999: latencyMs, seqP50: latencyMs, seqMean: latencyMs, cpuPerRequestUs: 100, rssMiB: 90, failures };
}

/** What the load generator prints for a rate task none of whose requests answered: its percentiles are NaN. */
const failedRate = JSON.stringify({ result: { count: 0, p50: NaN, p99: NaN, p999: NaN, mean: NaN, failures: 1000 }, index: 1 });

test('a figure of no samples comes back from the load generator as NaN, not as null or 0', () => {
  const message = parseLoadLine(failedRate) as { result: Record<string, number>; index: number };
  expect(message.result.p50).toBeNaN();
  expect(message.result.failures).toBe(1000);
  expect(message.index).toBe(1);
  expect(parseLoadLine('{"plateau":true}').plateau).toBe(true);
});

test('a target whose requests all failed prints n/a for what was not measured, and only it is named as failed', () => {
  const failedP50 = (parseLoadLine(failedRate) as { result: { p50: number } }).result.p50;
  const working = (rps: number, latencyMs: number) => [round(rps, latencyMs, 0), round(rps + 100, latencyMs, 0)];
  const rounds: Rounds = {
    direct: working(9000, 0.5),
    'bare proxy': working(4000, 0.8),
    'bare Express': working(2000, 0.9),
    'tuned Express': working(4000, 0.8),
    chatgate: working(3000, 1.0),
    'chatgate ×2': [{ ...round(0, failedP50, 1000), cpuPerRequestUs: NaN }, { ...round(0, failedP50, 1200), cpuPerRequestUs: NaN }],
  };
  const figures = Object.fromEntries(Object.entries(rounds).map(([name, list]) => [name, medianOf(list)]));
  const printed = report({
    figures,
    ratios: throughputRatios(rounds),
    streams: [],
    furtherStream: { chatgate: NaN, bareProxy: NaN },
    auth: {},
    machine: { cpus: 2, cpu: 'test', node: 'v20' },
    plan: { rate: 500 },
    smoke: true,
  });
  const row = (name: string) => printed.split('\n').find((line) => line.startsWith(`| ${name} `))!;
  expect(row('chatgate ×2')).toMatch(/\| n\/a \/ n\/a \/ n\/a +\| n\/a +\| n\/a +\| n\/a +\| n\/a +\| 90 +\| 1200 +\|/);
  expect(row('chatgate')).toMatch(/\| 1\.00 \/ 1\.00 \/ 1\.00 +\| 0\.50 +\| 1\.000 +\| 0\.500 +\| 100 +\| 90 +\| 0 +\|/);
  expect(printed).toContain('chatgate ×2/chatgate 0.00×');
  expect(printed).not.toMatch(/NaN|null/);
  expect(failedRequests(rounds)).toEqual([['chatgate ×2', 2200]]);
});

test('a round that measured nothing leaves a figure to the rounds that did', () => {
  const failedP50 = (parseLoadLine(failedRate) as { result: { p50: number } }).result.p50;
  const rounds = [round(3000, 1.2, 0), round(0, failedP50, 1000), round(3200, 1.0, 0)];
  const figures = medianOf(rounds);
  expect(figures.p50).toBe(1.2); // of 1.0 and 1.2; the failed round's NaN is not a latency
  expect(figures.rps).toBe(3000); // 0 req/s is a measurement
  expect(figures.failures).toBe(0);
  expect(medianOf([round(0, failedP50, 5)]).p50).toBeNaN();
});

test('a round in which both targets of a ratio served nothing has no ratio: the others decide it', () => {
  const unmeasured: Rounds = { direct: [], 'bare proxy': [], 'bare Express': [], 'tuned Express': [] };
  const rounds: Rounds = {
    ...unmeasured,
    chatgate: [round(3000, 1, 0), round(0, 1, 900), round(3300, 1, 0), round(3100, 1, 0)],
    'chatgate ×2': [round(3600, 1, 0), round(0, 1, 800), round(3300, 1, 0), round(6200, 1, 0)],
  };
  expect(throughputRatios(rounds)).toEqual({ 'chatgate ×2/chatgate': { median: 1.2, min: 1, max: 2 } });
  const allFailed: Rounds = { ...unmeasured, chatgate: [round(0, 1, 9)], 'chatgate ×2': [round(0, 1, 9)] };
  expect(throughputRatios(allFailed)['chatgate ×2/chatgate']!.median).toBeNaN();
});

/** A stream count's figures, as run.ts records them; only what the targets read is chosen. */
function streamRun(streams: number, intact: number, kibPerStream: number, rssMiBAllOpen: number): StreamFigure {
  const latency = { addedFirstTokenP50Ms: 1, addedFirstTokenP99Ms: 2, betweenTokensP50Ms: 100, betweenTokensP99Ms: 120, directBetweenTokensP99Ms: 110 };
  return { streams, tokensPerSecond: 10, intact, broken: {}, directIntact: streams, kibPerStream, bareProxyKibPerStream: 50, bareProxyIntact: streams, peakOpen: streams, rssMiBAllOpen, bareProxyRssMiBAllOpen: 100, ...latency };
}

/** One round of every target: direct at 0.5 ms and the bare proxy at 5,000 req/s, against which chatgate's figures are set. */
function targetRounds(set: { bareExpressRps: number; chatgateRps: number; chatgateP99: number; chatgateSeqP50: number }): Rounds {
  return {
    direct: [round(10000, 0.5, 0)],
    'bare proxy': [round(5000, 0.8, 0)],
    'bare Express': [round(set.bareExpressRps, 0.9, 0)],
    'tuned Express': [round(4000, 0.8, 0)],
    chatgate: [{ ...round(set.chatgateRps, 1, 0), p99: set.chatgateP99, seqP50: set.chatgateSeqP50 }],
    'chatgate ×2': [round(3000, 1, 0)],
  };
}

function runOf(rounds: Rounds, streams: StreamFigure[], auth: Results['auth'], smoke = false): Results {
  const figures = Object.fromEntries(Object.entries(rounds).map(([name, list]) => [name, medianOf(list)]));
  const furtherStream = { chatgate: ((streams[1]!.rssMiBAllOpen - streams[0]!.rssMiBAllOpen) * 1024) / (streams[1]!.streams - streams[0]!.streams), bareProxy: NaN };
  return { figures, ratios: throughputRatios(rounds), streams, furtherStream, auth, machine: { cpus: 2, cpu: 'test', node: 'v20' }, plan: { rate: 500 }, smoke };
}

test('each target is judged on the run\'s figures: past its line it is missed, and a figure not measured has not met it', () => {
  const rounds = targetRounds({ bareExpressRps: 2000, chatgateRps: 2900, chatgateP99: 2.6, chatgateSeqP50: 0.9 });
  const run = runOf(rounds, [streamRun(1000, 1000, 70.8, 150), streamRun(5000, 4999, 54.9, 350)], { file: { hitUs: 0.54, missUs: 62 }, postgres: 'not measured: connect ECONNREFUSED' });
  expect(judgeTargets(run)).toEqual([
    { target: 'chatgate ≥ 1.0× bare Express (requests/s)', figure: '1.45×', met: true },
    { target: 'chatgate ≥ 0.6× bare proxy (requests/s)', figure: '0.58×', met: false },
    { target: 'added p99 over direct ≤ 2 ms @500/s', figure: '2.10 ms', met: false },
    { target: 'sequential added p50 ≤ 0.5 ms', figure: '0.400 ms', met: true },
    { target: 'memory per open stream ≤ 64 KiB: one more, 1000 to 5000', figure: '51.2 KiB', met: true },
    { target: 'memory per open stream ≤ 64 KiB: from idle at 1000', figure: '70.8 KiB', met: false },
    { target: 'memory per open stream ≤ 64 KiB: from idle at 5000', figure: '54.9 KiB', met: true },
    { target: 'every stream through chatgate intact', figure: '5999 of 6000', met: false },
    { target: 'cache-hit key check ≤ 5 µs (file store)', figure: '0.54 µs', met: true },
    { target: 'cache-hit key check ≤ 5 µs (postgres store)', figure: 'n/a', met: false },
  ]);
  const printed = report(run).split('\n');
  expect(printed).toContain("targets, on this run's figures:");
  expect(printed).toContain('  met          chatgate ≥ 1.0× bare Express (requests/s): 1.45×');
  expect(printed).toContain('  MISSED       added p99 over direct ≤ 2 ms @500/s: 2.10 ms');
  expect(printed).toContain('  not measured cache-hit key check ≤ 5 µs (postgres store): n/a');
});

test('a target exactly at its line is met, and a smoke run judges none', () => {
  const rounds = targetRounds({ bareExpressRps: 3000, chatgateRps: 3000, chatgateP99: 2.5, chatgateSeqP50: 1 });
  const run = runOf(rounds, [streamRun(50, 50, 64, 100), streamRun(100, 100, 64, 103.125)], { file: { hitUs: 5, missUs: 60 } }, true);
  const verdicts = judgeTargets(run);
  expect(verdicts.map(({ figure }) => figure)).toEqual(['1.00×', '0.60×', '2.00 ms', '0.500 ms', '64.0 KiB', '64.0 KiB', '64.0 KiB', '150 of 150', '5.00 µs']);
  expect(verdicts.every(({ met }) => met)).toBe(true);
  const printed = report(run).split('\n');
  expect(printed).toContain('targets, not judged (a smoke run is too short for its figures to mean anything):');
  expect(printed).toContain('  -            sequential added p50 ≤ 0.5 ms: 0.500 ms');
  expect(printed.filter((line) => /^ {2}(met|MISSED|not measured) /.test(line))).toEqual([]);
});
