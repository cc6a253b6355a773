/**
 * The test tiers of jest.config.js: every test file is in exactly one, and files whose tier is known
 * land there (a browser test or one that runs the built gateway as processes in system, one on real
 * PostgreSQL in integration, a pure one in unit).
 */
import path from 'node:path';

const config = require('../jest.config.js') as { projects: Array<{ displayName: string; testMatch: string[] }> };
const tierOf = (file: string) => config.projects.filter((project) => project.testMatch.includes(`<rootDir>/${file}`)).map((project) => project.displayName);

test('every test file is in exactly one tier', () => {
  const all = config.projects.flatMap((project) => project.testMatch);
  expect(all.length).toBeGreaterThan(150);
  expect(new Set(all).size).toBe(all.length);
  expect(all).toContain(`<rootDir>/${path.relative(path.join(__dirname, '..'), __filename)}`);
});

test.each([
  ['test/console/browser.test.ts', 'system'],
  ['test/gateway/fuzz.test.ts', 'system'],
  ['test/deploy/compose.test.ts', 'system'],
  ['test/upstream/stream-memory.test.ts', 'system'],
  ['test/store/account-contract.test.ts', 'integration'],
  ['test/store/outage.test.ts', 'system'], // replicas of the built gateway, their PostgreSQL stopped
  ['test/process/cluster.test.ts', 'system'],
  ['test/gateway/defaults.test.ts', 'system'], // spawns `chatgate serve` itself
  ['test/auth/brute-force.test.ts', 'system'], // a flood of 2,000 guesses
  ['test/accounts/quota-redis.test.ts', 'integration'],
  ['test/cli/keys.test.ts', 'integration'], // the CLI's short commands
  ['test/upstream/proxy.test.ts', 'integration'],
  ['test/store/sqlite-writer.test.ts', 'integration'],
  ['test/helpers/gateway.test.ts', 'integration'],
  ['test/pipeline/validate.test.ts', 'unit'],
  ['test/errors.test.ts', 'unit'],
  ['test/tiers.test.ts', 'unit'],
])('%s is in the %s tier', (file, tier) => {
  expect(tierOf(file)).toEqual([tier]);
});
