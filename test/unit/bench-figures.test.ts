/**
 * The benchmark's figures (bench/figures.ts) when a target fails: figures it could not measure print
 * n/a instead of breaking the report, and the run can tell which targets failed requests.
 */
import { failedRequests, medianOf, parseLoadLine, report, throughputRatios, type Rounds } from '../../bench/figures';

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
