/**
 * Runs the benchmark's TypeScript from source in a child process: the load generator, when the scale
 * run is itself run from source (its smoke test, under jest). Each .ts file is compiled by swc, as
 * jest compiles the tests; a built benchmark (dist/bench) runs its .js and never loads this.
 */
const fs = require('node:fs');
const { transformSync } = require('@swc/core');

require.extensions['.ts'] = (module, filename) => {
  const { code } = transformSync(fs.readFileSync(filename, 'utf8'), {
    filename,
    sourceMaps: 'inline',
    module: { type: 'commonjs' },
    jsc: { parser: { syntax: 'typescript' }, target: 'es2022' },
  });
  module._compile(code, filename);
};
