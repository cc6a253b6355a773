/**
 * `chatgate serve` turns V8's allocation-site pretenuring off before the gateway starts
 * (src/tuning/pretenuring.ts), unless node was given the flag. Checked on V8 itself: once the gateway
 * listens, a script preloaded into its process allocates a million objects from two sites and keeps
 * them all, three times, the pattern that makes V8 tenure a site, while V8 traces its pretenuring decisions.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { CLI } from '../helpers/processes';

let dir: string;
const children: ChildProcess[] = [];

beforeAll(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-pretenuring-'));
  writeFileSync(
    path.join(dir, 'config.yaml'),
    YAML.stringify({ listen: { host: '127.0.0.1', port: 0 }, admin: { host: '127.0.0.1', port: 0 }, dataDir: path.join(dir, 'data'), keyStore: { type: 'sqlite', path: path.join(dir, 'data', 'chatgate.db') }, auth: { createFirstKey: false }, providers: { mock: { workers: ['http://127.0.0.1:9'] } } }),
  );
  // Once the gateway listens, the test signals this script to allocate.
  writeFileSync(
    path.join(dir, 'retain.js'),
    // Each pass allocates from new sites (new Function): once a site is "maybe tenure", Node 24's
    // optimised loop may stop reporting on it, and that site then never gets to "tenure".
    `globalThis.kept = [];
     process.on('SIGUSR2', () => {
       const make = new Function('i', 'return { i, list: [i] };');
       const kept = [];
       for (let i = 0; i < 1e6; i++) kept.push(make(i));
       globalThis.kept.push(kept);
       process.stdout.write('retained\\n');
     });`,
  );
});

afterAll(() => {
  for (const child of children) child.kill('SIGKILL'); // any a failed test left running
  rmSync(dir, { recursive: true, force: true });
});

const PASSES = 3;

/** The serving process's trace of pretenuring decisions, from start until the objects of every pass are kept. */
function traceOfServe(nodeFlags: string[]): Promise<string> {
  const child = spawn(process.execPath, [...nodeFlags, '--trace-pretenuring', '--trace-pretenuring-statistics', '--require', path.join(dir, 'retain.js'), CLI, 'serve', '--config', path.join(dir, 'config.yaml')], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let output = '';
  let passesSignalled = 0;
  child.stdout.on('data', (chunk: Buffer) => {
    const starting = !output.includes('chatgate listening');
    output += chunk.toString('utf8');
    if (starting && output.includes('chatgate listening')) child.kill('SIGUSR2');
    const passes = output.split('retained\n').length - 1;
    if (passes > passesSignalled) {
      passesSignalled = passes;
      // Three passes, then a normal exit, not SIGKILL: V8 writes its trace through C's stdio, which
      // holds it in a buffer while stdout is a pipe, and only an exit flushes what is still there.
      child.kill(passes < PASSES ? 'SIGUSR2' : 'SIGTERM');
    }
  });
  child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString('utf8')));
  return new Promise((resolve) => child.once('exit', () => resolve(output)));
}

test('a serving process tenures no allocation site', async () => {
  const trace = await traceOfServe([]);
  expect(trace).toContain('retained');
  // Modules loaded before serve() turns it off may be traced as "maybe tenure"; no site is tenured.
  expect(trace).not.toMatch(/=> tenure/);
}, 30_000);

test('node --allocation-site-pretenuring keeps it: V8 then tenures the sites of kept objects', async () => {
  const trace = await traceOfServe(['--allocation-site-pretenuring']);
  expect(trace).toContain('retained');
  expect(trace).toMatch(/AllocationSite\(.*=> tenure/);
}, 30_000);
