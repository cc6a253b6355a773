/** Tests run from TypeScript sources through swc; `npm test` builds dist/ (the CLI the process tests spawn) and type-checks first. */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  transform: { '^.+\\.ts$': ['@swc/jest', { jsc: { target: 'es2022' } }] },
  // The source names a compiled file in a dynamic import() ('./postgres.js', as Node's ESM resolution
  // needs); here the .ts beside it is what runs.
  moduleNameMapper: { '^(\\.{1,2}/.*)\\.js$': '$1' },
  testTimeout: 30000,
};
