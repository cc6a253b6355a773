#!/usr/bin/env node
/**
 * Builds better-sqlite3's native part (the embedded key store on Node 20) for the Node that runs this
 * script, when it is missing or was built for another Node. A Node that has `node:sqlite` without a
 * flag (22.13, 23.4 and later: the image's Node) runs the store on it (src/store/sqlite/driver.ts)
 * and needs no build: the script then does nothing. The project's .npmrc keeps every dependency's
 * install script from running (SECURITY.md), so `npm ci` leaves this one module unbuilt; `npm run
 * build` (and so `npm start` and `npm test`) calls this script, which compiles it from the source the
 * registry package ships (SQLite's amalgamation included) with npm's node-gyp, python3, make and a
 * C++ compiler: one to two minutes on two cores. It never downloads anything: no prebuilt binary (it
 * skips prebuild-install), no Node headers (--nodedir: those of the Node that runs it).
 *
 * A build is kept per Node ABI (node_modules/.cache/chatgate-native/), so switching between two
 * Node lines (CI runs the tests on the image's Node too) copies the other build back instead of
 * compiling again.
 */
'use strict';
const { execFileSync, spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const root = path.resolve(__dirname, '..');
const moduleDir = path.join(root, 'node_modules', 'better-sqlite3');
const binding = path.join(moduleDir, 'build', 'Release', 'better_sqlite3.node');
// Outside build/, which node-gyp's rebuild empties first.
const kept = path.join(root, 'node_modules', '.cache', 'chatgate-native', `better_sqlite3-abi${process.versions.modules}.node`);

/** Whether the module loads and opens a database in this Node (a child: a failed dlopen stays loaded). */
function works() {
  try {
    execFileSync(process.execPath, ['-e', "new (require('better-sqlite3'))(':memory:').prepare('select 1').get()"], { cwd: root, stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** The prefix whose include/node holds this Node's headers (/usr for /usr/bin/node). */
function nodeDir() {
  const prefix = path.resolve(path.dirname(process.execPath), '..');
  if (fs.existsSync(path.join(prefix, 'include', 'node', 'node.h'))) return prefix;
  throw new Error(`no Node headers under ${prefix}/include/node: cannot build better-sqlite3 for ${process.version} without downloading them`);
}

/** npm's own node-gyp: beside the npm that runs this script, beside this Node, or any npm on PATH. */
function nodeGyp() {
  const inNpm = (npmDir) => path.join(npmDir, 'node_modules', 'node-gyp', 'bin', 'node-gyp.js');
  const candidates = [];
  if (process.env.npm_execpath) candidates.push(inNpm(path.resolve(path.dirname(process.env.npm_execpath), '..')));
  candidates.push(inNpm(path.resolve(path.dirname(process.execPath), '..', 'lib', 'node_modules', 'npm')));
  try {
    candidates.push(inNpm(path.join(execFileSync('npm', ['root', '-g'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim(), 'npm')));
  } catch {
    // no npm on PATH
  }
  // Every npm on PATH, by where its command really lives (a Node unpacked from the registry's
  // node-linux package, put first on PATH, has no npm of its own: the machine's npm's node-gyp builds
  // for it as well, given that Node's headers).
  for (const dir of (process.env.PATH ?? '').split(path.delimiter).filter(Boolean)) {
    try {
      const cli = fs.realpathSync(path.join(dir, 'npm'));
      if (path.basename(cli) === 'npm-cli.js') candidates.push(inNpm(path.resolve(path.dirname(cli), '..')));
    } catch {
      // no npm there
    }
  }
  const found = candidates.find((file) => fs.existsSync(file));
  if (!found) throw new Error(`node-gyp not found (looked in ${candidates.join(', ')})`);
  return found;
}

/** The same test as src/store/sqlite/driver.ts: this Node has node:sqlite without a flag. */
function hasNodeSqlite() {
  const [major, minor] = process.versions.node.split('.').map(Number);
  return major > 23 || (major === 23 && minor >= 4) || (major === 22 && minor >= 13);
}

function main() {
  if (hasNodeSqlite()) return;
  if (!fs.existsSync(moduleDir)) throw new Error(`node_modules/better-sqlite3 is missing: run npm ci first (Node ${process.version} has no node:sqlite; it needs better-sqlite3)`);
  if (works()) return keep();
  if (fs.existsSync(kept)) {
    fs.mkdirSync(path.dirname(binding), { recursive: true });
    fs.copyFileSync(kept, binding);
    if (works()) return;
  }
  const started = Date.now();
  process.stderr.write(`building better-sqlite3 for Node ${process.version} (native, about two minutes; once per Node line)\n`);
  // node-gyp as npm ships it (the part of better-sqlite3's install script that compiles; the other
  // part, prebuild-install, would try to download), run by this Node for this Node's headers.
  const build = spawnSync(process.execPath, [nodeGyp(), 'rebuild', '--release', `--nodedir=${nodeDir()}`], {
    cwd: moduleDir,
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
    env: { ...process.env, PATH: `${path.dirname(process.execPath)}${path.delimiter}${process.env.PATH ?? ''}` },
  });
  if (build.status !== 0) {
    process.stderr.write(`${(build.stdout ?? '').slice(-4000)}${(build.stderr ?? '').slice(-4000)}\n`);
    throw new Error(`compiling better-sqlite3 failed (${build.error?.message ?? `exit ${build.status}`}): it needs python3, make and a C++ compiler (apt-get install python3 make g++)`);
  }
  if (!works()) throw new Error('better-sqlite3 was built but does not load');
  // What the compiler left besides the module is not needed to run it.
  for (const entry of ['Release/obj.target', 'Release/.deps', 'Release/obj', 'Release/sqlite3.a', 'Release/test_extension.node', 'deps']) {
    fs.rmSync(path.join(moduleDir, 'build', entry), { recursive: true, force: true });
  }
  keep();
  process.stderr.write(`built better-sqlite3 in ${Math.round((Date.now() - started) / 1000)} s\n`);
}

function keep() {
  if (!fs.existsSync(binding)) return;
  fs.mkdirSync(path.dirname(kept), { recursive: true });
  fs.copyFileSync(binding, kept);
}

try {
  main();
} catch (err) {
  process.stderr.write(`build-native: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
}
