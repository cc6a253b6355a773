/**
 * The ledger run (bench/ledger.ts, `npm run bench -- --ledger`) at smoke size: 90 days of 200 end
 * users seeded in a fresh PostgreSQL database, an owner signed in through the console API, the Usage
 * tab's requests all answered 200 (a seed or a query the gateway could not read would fail them).
 * Its timings mean nothing at this size; that it runs and measures what it says is the point.
 */
import { ledgerPlan, ledgerReport, runLedger, type LedgerResults } from '../../bench/ledger';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres';

let database: TestDatabase;
let results: LedgerResults;

beforeAll(async () => {
  database = await createTestDatabase();
  results = await runLedger(database.url, ledgerPlan(true));
}, 120_000);

afterAll(async () => {
  await database?.drop();
});

test('every request of the Usage tab is answered; the seed is what the plan says; the report judges the tab against its target', () => {
  process.stdout.write(ledgerReport(results));
  expect(results.failures).toEqual([]);
  // 200 end users a day for 90 days, a third of them on two models: 24,030 rows of 1 to 33 requests.
  expect(results.ledgerRows).toBe(24_030);
  expect(results.dailyRows).toBe(90 * 50);
  expect(results.requests).toBeGreaterThan(24_030);
  expect(results.pages.map((page) => [page.name, page.target])).toEqual([
    ['Usage tab, this month', true],
    ['Usage tab, last month', true],
    ['by end user, last 30 days (API)', false],
    ['by end user, 90 days (API)', false],
    ['by end user, 30 days to yesterday (API)', false],
  ]);
  for (const page of results.pages) expect(page.p50).toBeGreaterThan(0);
  expect(ledgerReport(results)).toMatch(/(met|MISSED) +Usage tab, this month under 200 ms at p95/);
});
