/**
 * Tests run from TypeScript sources through swc, in three tiers (jest projects):
 * - unit: no socket, process, database or browser: a file that imports none of the helpers that start
 *   real parts, nor a SQL store, pg, ioredis, node:net, node:http(s), node:tls or node:child_process
 *   (read from its imports, so a new file lands in the right tier by itself);
 * - integration: the parts on real PostgreSQL, Redis and sockets, the gateway in the test's own
 *   process, the mock worker and the CLI's short commands as processes;
 * - system: the product as it ships and under load: the built gateway run as its own processes
 *   (`chatgate serve`: replicas, cluster mode, signals, faults of the stores it runs on), the browser
 *   (Chromium), the wire fuzzer, the deploy files, floods of thousands of requests or streams, the
 *   benchmark at scale and the memory soaks.
 * `npm test` runs unit and integration, several files at a time (they wait on sockets more than they
 * compute); `npm run test:all` (CI) runs those, then the system tier one file at a time (its tests
 * measure the product's own timings and start its processes: alone, the host's speed is theirs).
 * `npm test` builds dist/ (the CLI the process tests spawn) and type-checks first.
 */
const { readFileSync, readdirSync } = require('node:fs');
const path = require('node:path');

const SYSTEM = [/^console\/browser.*\.test\.ts$/, /^gateway\/fuzz\.test\.ts$/, /^deploy\//, /^bench\/scale\.test\.ts$/, /-memory\.test\.ts$/];
/** Floods: thousands of requests or streams through one gateway. */
const LOAD = [/^auth\/brute-force\.test\.ts$/, /^upstream\/default-capacity\.test\.ts$/, /^process\/connection-burst\.test\.ts$/];
/** The built gateway as its own processes: through the helper that starts it, or `chatgate serve` spawned. */
const SERVES = /from '(?:\.\.?\/)+helpers\/gateway-process'|\bCLI\b[^\n]*'serve'|'serve'[^\n]*\bCLI\b/;
const REAL_PARTS = /from '(?:\.\.?\/)+(?:src\/store\/(?:sqlite|postgres)[\w/-]*|(?:helpers\/)?(?:postgres|redis|gateway-process|processes|gateway|cli|store-pairs|jwt-issuer|oidc|console-fixture|fixture|net|http)|(?:store\/)?contract-backends)'|from '(?:node:(?:net|https?|tls|child_process)|pg|ioredis|playwright-core)'|require\('node:(?:net|https?|tls|child_process)'\)/;

function testFiles(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const file = path.join(dir, entry.name);
    if (entry.isDirectory()) return testFiles(file);
    return entry.name.endsWith('.test.ts') ? [file] : [];
  });
}

const root = path.join(__dirname, 'test');
const tiers = { unit: [], integration: [], system: [] };
for (const file of testFiles(root)) {
  const name = path.relative(root, file).split(path.sep).join('/');
  const source = readFileSync(file, 'utf8');
  const system = [...SYSTEM, ...LOAD].some((pattern) => pattern.test(name)) || SERVES.test(source);
  const tier = system ? 'system' : REAL_PARTS.test(source) ? 'integration' : 'unit';
  tiers[tier].push(file);
}

const common = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  // The console page's modules are browser ES modules (src/console/static/*.js, no build step): the
  // unit tests of its pure helpers import them, so swc turns those (and only those) into CommonJS too.
  transform: { '^.+\\.ts$': ['@swc/jest', { jsc: { target: 'es2022' } }], '^.+/src/console/static/[^/]+\\.js$': ['@swc/jest', { jsc: { target: 'es2022' } }] },
  // The source names a compiled file in a dynamic import() ('./postgres/store.js', as Node's ESM resolution
  // needs); here the .ts beside it is what runs.
  moduleNameMapper: { '^(\\.{1,2}/.*)\\.js$': '$1' },
  testTimeout: 30000,
};
const exactly = (files) => files.map((file) => `<rootDir>/${path.relative(__dirname, file).split(path.sep).join('/')}`);

module.exports = {
  testTimeout: 30000,
  projects: Object.entries(tiers).map(([tier, files]) => ({ ...common, displayName: tier, testMatch: exactly(files) })),
};
