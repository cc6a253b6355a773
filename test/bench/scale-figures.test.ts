/**
 * The scale run's keys and goals (bench/scale-figures.ts): seeded keys have a real key's shape, and
 * the goals are judged on a run's figures: start-up under 5 s at every start over all the
 * keys, p99 within 1.5× of one key's with the working set in the cache, key creates flat.
 */
import { median, scaleFailures, scaleKey, scaleOrder, scalePlan, scaleReport, scaleStores, judgeScale, type StoreFigures, type WorkingSetFigure } from '../../bench/scale-figures';
import { looksLikeKey } from '../../src/common/key-shape';

function inUse(keysInUse: number, p99: number, startupMs: number, hitRatio = 1, round = 0): WorkingSetFigure {
  return { keysInUse, round, cacheSize: keysInUse + 100, startupMs, requests: 50_000, p50: 1, p99, windowP99: [p99 - 0.5, p99, p99 + 3], failures: 0, hitRatio, addedP50: 0.5, addedP99: p99 - 2, cpuUsPerRequest: 120, rssMiB: 100, warmFailures: 0 };
}

function store(set: { startups?: [number, number, number]; p99s?: [number, number, number]; msEach?: [number, number]; hitRatio?: number }): StoreFigures {
  const [s1, s2, s3] = set.startups ?? [900, 1000, 1100];
  const [p1, p2, p3] = set.p99s ?? [4, 5, 5.5];
  const [first, mid] = set.msEach ?? [4, 4.4];
  const creates = (atKeys: number, msEach: number) => ({ atKeys, creates: 500, perSecond: 4000 / msEach, msEach, failures: 0 });
  return {
    store: 'sqlite',
    seedSeconds: { mid: 3, full: 30 },
    startupMs: { empty: 300, mid: 400 },
    creates: [creates(0, first), creates(100_000, mid), creates(1_000_000, mid)],
    direct: { requests: 50_000, p50: 0.5, p99: 2, windowP99: [2, 2, 2], failures: 0 },
    workingSets: [inUse(1, p1, s1), inUse(10_000, p2, s2, set.hitRatio), inUse(100_000, p3, s3, set.hitRatio)],
  };
}

const plan = scalePlan(1_000_000, false, 1);
const verdicts = (figures: StoreFigures) => judgeScale({ plan, stores: [figures] }).map((v) => v.verdict);

test('seeded keys look like keys, each its own', () => {
  expect(looksLikeKey(scaleKey(1))).toBe(true);
  expect(looksLikeKey(scaleKey(1_000_000))).toBe(true);
  expect(scaleKey(12)).not.toBe(scaleKey(120));
});

/** A store measured in rounds: per round, the p99 of 1, 10,000 and 100,000 keys in use. */
function rounds(p99s: Array<[number, number, number]>, hitRatios: number[] = []): StoreFigures {
  return {
    ...store({}),
    workingSets: p99s.flatMap(([p1, p2, p3], round) => [inUse(1, p1, 900, 1, round), inUse(10_000, p2, 900, hitRatios[round] ?? 1, round), inUse(100_000, p3, 900, hitRatios[round] ?? 1, round)]),
  };
}

test('a full run measures three rounds, a smoke run one; --scale-rounds takes 1 to 10', () => {
  expect(scalePlan(1_000_000, false).rounds).toBe(3);
  expect(scalePlan(2000, true).rounds).toBe(1);
  expect(scalePlan(2000, false, 5).rounds).toBe(5);
  for (const bad of [0, 11, 2.5, Number.NaN, -1]) expect(() => scalePlan(2000, false, bad)).toThrow(/--scale-rounds must be a whole number from 1 to 10/);
});

test('rounds alternate the rows, every other one backwards', () => {
  expect(scaleOrder({ workingSets: [1, 10, 100], rounds: 3 }).map(({ round, keysInUse }) => `${round}:${keysInUse}`)).toEqual(['0:1', '0:10', '0:100', '1:100', '1:10', '1:1', '2:1', '2:10', '2:100']);
  expect(scaleOrder({ workingSets: [1, 10, 100], rounds: 1 })).toHaveLength(3);
});

test('the median of odd and even counts; none is NaN', () => {
  expect(median([3, 1, 2])).toBe(2);
  expect(median([4, 1, 3, 2])).toBe(2.5);
  expect(median([1.7])).toBe(1.7);
  expect(median([])).toBeNaN();
});

test('--scale-stores: both by default, a list of known names, nothing else', () => {
  expect(scaleStores(undefined)).toEqual(['postgres', 'sqlite']);
  expect(scaleStores('sqlite')).toEqual(['sqlite']);
  expect(scaleStores('sqlite,postgres')).toEqual(['sqlite', 'postgres']);
  for (const bad of ['', 'mysql', 'sqlite,', 'SQLite', 'postgres ,x']) expect(() => scaleStores(bad)).toThrow(/--scale-stores takes postgres, sqlite/);
  expect(() => scaleStores('sqlite,sqlite')).toThrow(/twice/);
});

test('in rounds, each row is set against the one-key row of its own round, and judged on the median ratio', () => {
  const plan3 = scalePlan(1_000_000, false, 3);
  // Round 3's one-key row was slow (6 ms): its own 100,000 row is set against it, not against another round's.
  const judged = judgeScale({ plan: plan3, stores: [rounds([[4, 5, 5.6], [4.4, 5, 7], [6, 6.6, 6.2]])] });
  expect(judged.map((v) => v.verdict)).toEqual(['met', 'met', 'met', 'met']);
  expect(judged[2]!.figure).toBe("median of 3 rounds' ratios 1.40× (1.03-1.59): 5.60, 7.00, 6.20 against 4.00, 4.40, 6.00 ms");
  // One round over 1.5× of its own one key is outvoted; two are not.
  expect(judgeScale({ plan: plan3, stores: [rounds([[4, 5, 6.4], [4, 5, 5], [4, 5, 5]])] })[2]!.verdict).toBe('met');
  expect(judgeScale({ plan: plan3, stores: [rounds([[4, 5, 6.4], [4, 5, 6.1], [4, 5, 5]])] })[2]!.verdict).toBe('MISSED');
  // A working set out of the cache in any round misses, whatever the ratios.
  const cold = judgeScale({ plan: plan3, stores: [rounds([[4, 5, 5], [4, 5, 5], [4, 5, 5]], [1, 0.95, 1])] });
  expect(cold.map((v) => v.verdict)).toEqual(['met', 'MISSED', 'MISSED', 'met']);
  expect(cold[1]!.figure).toMatch(/hit ratio 95\.0 %: the working set was not in the cache$/);
  // A round without its one-key row is not judged as if it had one.
  const lost = rounds([[4, 5, 5], [4, 5, 5]]);
  lost.workingSets = lost.workingSets.filter((set) => !(set.keysInUse === 1 && set.round === 1));
  expect(judgeScale({ plan: plan3, stores: [lost] })[1]!.verdict).toBe('not measured');
});

test('the report shows each round of each row, the rows in order', () => {
  const report = scaleReport({ at: '2026-12-01T00:00:00.000Z', plan: scalePlan(1_000_000, false, 2), machine: {}, stores: [rounds([[4, 5, 5.5], [4.2, 5.1, 5.7]])] });
  const rows = report.split('\n').filter((line) => /^\| sqlite +\| [\d,]+ /.test(line)).map((line) => line.split('|').slice(2, 4).map((cell) => cell.trim()).join(' '));
  expect(rows).toEqual(['1 1', '1 2', '10,000 1', '10,000 2', '100,000 1', '100,000 2']);
  expect(report).toContain('2 rounds of the rows');
});

test('a million keys: working sets of 1, 10,000 and 100,000, creates at 0 and 100,000; fewer than 1,000 keys refused', () => {
  expect(plan.workingSets).toEqual([1, 10_000, 100_000]);
  expect(plan.midKeys).toBe(100_000);
  expect(() => scalePlan(999, true)).toThrow(/1000 or more/);
  expect(() => scalePlan(Number('x'), false)).toThrow(/whole number/);
});

test('every goal met on figures that meet them', () => {
  expect(verdicts(store({}))).toEqual(['met', 'met', 'met', 'met']);
});

test('one slow start over all the keys misses the start-up goal', () => {
  expect(verdicts(store({ startups: [900, 5200, 1000] }))[0]).toBe('MISSED');
});

test('a p99 past 1.5× of one key, or a working set not in the cache, misses; creates that slowed past 1.5× miss', () => {
  expect(verdicts(store({ p99s: [4, 6.1, 5] }))).toEqual(['met', 'MISSED', 'met', 'met']);
  expect(verdicts(store({ hitRatio: 0.9 }))).toEqual(['met', 'MISSED', 'MISSED', 'met']);
  expect(verdicts(store({ msEach: [4, 6.2] }))).toEqual(['met', 'met', 'met', 'MISSED']);
});

test('the p99 judged is of every window together, and the windows\' own p99s are shown beside it', () => {
  expect(plan.windows).toBe(5);
  expect(plan.seconds).toBe(10);
  const judged = judgeScale({ plan, stores: [store({ p99s: [4, 5.8, 6.1] })] });
  expect(judged.map((v) => v.verdict)).toEqual(['met', 'met', 'MISSED', 'met']);
  expect(judged[1]!.figure).toBe('5.80 against 4.00 ms: 1.45× (windows 5.30-8.80 against 3.50-7.00 ms)');
});

test('a smoke run judges nothing; a store not measured says so; failures are counted per store', () => {
  expect(judgeScale({ plan: { ...plan, smoke: true }, stores: [store({})] }).every((v) => v.verdict === 'not judged')).toBe(true);
  const missing = { ...store({}), store: 'postgres', notMeasured: 'no PostgreSQL' };
  expect(judgeScale({ plan, stores: [missing] })).toEqual([{ verdict: 'not measured', goal: 'every goal (postgres)', figure: 'no PostgreSQL' }]);
  const failing = store({});
  failing.workingSets[1]!.warmFailures = 3;
  failing.creates[0]!.failures = 1;
  expect(scaleFailures({ stores: [failing, missing, store({})] })).toEqual([['sqlite', 4]]);
});
