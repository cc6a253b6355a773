/**
 * The scale run's keys and goals (bench/scale-figures.ts): seeded keys have a real key's shape, and
 * the goals are judged on a run's figures: start-up under 5 s at every start over all the
 * keys, p99 within 1.5× of one key's with the working set in the cache, key creates flat.
 */
import { scaleFailures, scaleKey, scalePlan, judgeScale, type StoreFigures, type WorkingSetFigure } from '../../bench/scale-figures';
import { looksLikeKey } from '../../src/common/key-shape';

function inUse(keysInUse: number, p99: number, startupMs: number, hitRatio = 1): WorkingSetFigure {
  return { keysInUse, cacheSize: keysInUse + 100, startupMs, requests: 50_000, p50: 1, p99, windowP99: [p99 - 0.5, p99, p99 + 3], failures: 0, hitRatio, addedP50: 0.5, addedP99: p99 - 2, cpuUsPerRequest: 120, rssMiB: 100, warmFailures: 0 };
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

const plan = scalePlan(1_000_000, false);
const verdicts = (figures: StoreFigures) => judgeScale({ plan, stores: [figures] }).map((v) => v.verdict);

test('seeded keys look like keys, each its own', () => {
  expect(looksLikeKey(scaleKey(1))).toBe(true);
  expect(looksLikeKey(scaleKey(1_000_000))).toBe(true);
  expect(scaleKey(12)).not.toBe(scaleKey(120));
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
