/**
 * The scale run (bench/scale.ts, `npm run bench -- --scale`) at smoke size: 2,000 keys seeded in a
 * fresh PostgreSQL database and a fresh SQLite file, the keys in use answered by gateway processes
 * (a seed whose digests were not the gateway's would get 401s, counted as failures), the cache's hit
 * ratio read from /metrics, key creates through the admin API, within a minute. Its figures mean
 * nothing at this size; that it runs and measures what it says is the point.
 */
import pg from 'pg';
import { runScale } from '../../bench/scale';
import { scaleFailures, scalePlan, scaleReport, type ScaleResults } from '../../bench/scale-figures';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres';

let database: TestDatabase;
let results: ScaleResults;
let seconds: number;
let postgresKeys: number;
const plan = scalePlan(2000, true);

beforeAll(async () => {
  database = await createTestDatabase();
  const started = performance.now();
  results = await runScale({ plan, postgres: { url: database.url } });
  seconds = (performance.now() - started) / 1000;
  const client = new pg.Client({ connectionString: database.url });
  await client.connect();
  postgresKeys = Number((await client.query<{ count: string }>('select count(*) from chatgate_keys')).rows[0]!.count);
  await client.end();
}, 120_000);

afterAll(async () => {
  await database?.drop();
});

test('it runs in under a minute, on both stores, with no failed request or key create', () => {
  process.stdout.write(scaleReport(results));
  expect(seconds).toBeLessThan(60);
  expect(results.stores.map((store) => [store.store, store.notMeasured])).toEqual([
    ['postgres', undefined],
    ['sqlite', undefined],
  ]);
  expect(scaleFailures(results)).toEqual([]);
});

test('PostgreSQL holds the seeded keys and the created ones: 2,000 and three times 50', () => {
  expect(postgresKeys).toBe(plan.keys + 3 * plan.creates);
});

test.each(['postgres', 'sqlite'])('%s: 1, 20 and 200 keys in use, each answered and in the cache sized to fit; start-ups and creates measured', (name) => {
  const store = results.stores.find((s) => s.store === name)!;
  expect(store.workingSets.map((set) => set.keysInUse)).toEqual([1, 20, 200]);
  for (const set of store.workingSets) {
    expect(set.cacheSize).toBeGreaterThan(set.keysInUse);
    expect(set.cacheSize).toBeLessThanOrEqual(set.keysInUse + Math.ceil(set.keysInUse / 10) + 100);
    expect(set.requests).toBe(plan.rate * plan.seconds * plan.windows);
    expect(set.windowP99).toHaveLength(plan.windows);
    expect(Math.max(...set.windowP99)).toBeGreaterThanOrEqual(set.p99);
    expect(Math.min(...set.windowP99)).toBeLessThanOrEqual(set.p99);
    expect(set.hitRatio).toBeGreaterThanOrEqual(0.99);
    expect(set.p99).toBeGreaterThanOrEqual(set.p50);
    expect(set.startupMs).toBeGreaterThan(0);
    expect(set.startupMs).toBeLessThan(10_000);
    expect(set.cpuUsPerRequest).toBeGreaterThanOrEqual(0);
    expect(set.rssMiB).toBeGreaterThan(20);
  }
  expect(store.direct.requests).toBe(plan.rate * plan.seconds * plan.windows);
  expect(store.creates.map((c) => [c.atKeys, c.creates, c.failures])).toEqual([
    [0, 50, 0],
    [200, 50, 0],
    [2000, 50, 0],
  ]);
  for (const c of store.creates) expect(c.perSecond).toBeGreaterThan(0);
  expect(Number.isFinite(store.startupMs.empty) && Number.isFinite(store.startupMs.mid)).toBe(true);
});

test('the report has a row per store and keys in use, and judges nothing at smoke size', () => {
  const printed = scaleReport(results);
  for (const name of ['postgres', 'sqlite']) {
    for (const inUse of ['direct', '1', '20', '200']) expect(printed).toMatch(new RegExp(`^\\| ${name} +\\| ${inUse} +\\|.*\\| \\d+\\.\\d\\d-\\d+\\.\\d\\d +\\|`, 'm'));
  }
  expect(printed).toContain('smoke: the figures mean nothing');
  expect(printed).not.toMatch(/NaN|undefined|\bmet\b|MISSED/);
  expect(printed.match(/not judged/g)).toHaveLength(8);
});
