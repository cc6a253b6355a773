/**
 * Tests run from TypeScript sources through swc, in three tiers (jest projects):
 * - unit: no socket, process, database or browser: a file that imports none of the helpers that start
 *   real parts, nor a SQL store, pg, ioredis, node:net, node:http(s), node:tls or node:child_process
 *   (read from its imports, so a new file lands in the right tier by itself);
 * - integration: the rest but the system tier: real PostgreSQL and Redis, real sockets, gateway and
 *   worker processes;
 * - system: the browser (Chromium), the wire fuzzer, the deploy files, the benchmark at scale and the
 *   memory soaks.
 * `npm test` runs unit and integration; `npm run test:all` (CI) every tier. `npm test` builds dist/
 * (the CLI the process tests spawn) and type-checks first.
 */
const { readFileSync, readdirSync } = require('node:fs');
const path = require('node:path');

const SYSTEM = [/^console\/browser.*\.test\.ts$/, /^gateway\/fuzz\.test\.ts$/, /^deploy\//, /^bench\/scale\.test\.ts$/, /-memory\.test\.ts$/];
const REAL_PARTS = /from '(?:\.\.?\/)+(?:src\/store\/(?:sqlite|postgres)[\w/-]*|(?:helpers\/)?(?:postgres|redis|gateway-process|processes|gateway|store-pairs|jwt-issuer|oidc|console-fixture|fixture|net|http)|(?:store\/)?contract-backends)'|from '(?:node:(?:net|https?|tls|child_process)|pg|ioredis|playwright-core)'|require\('node:(?:net|https?|tls|child_process)'\)/;

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
  const tier = SYSTEM.some((pattern) => pattern.test(name)) ? 'system' : REAL_PARTS.test(readFileSync(file, 'utf8')) ? 'integration' : 'unit';
  tiers[tier].push(file);
}

const common = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  transform: { '^.+\\.ts$': ['@swc/jest', { jsc: { target: 'es2022' } }] },
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
