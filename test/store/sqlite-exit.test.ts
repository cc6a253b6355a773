/**
 * A serving process that exits without closing its store (process.exit on a fatal error, a drain
 * that ran out of time): the exit handler closes its SQLite connection at once and the writer and
 * checkpoint threads end with the process (database.ts, close(true)). Run in a real process of the
 * built gateway, busy writing when it exits: it must exit at once and cleanly, and every write it was
 * told was done must be in the file, which must be whole, for the next process to open.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { SqliteKeyStore } from '../../src/store/sqlite/store';

const DIST = path.join(__dirname, '..', '..', 'dist');
const KEYS = 200;
const BATCHES = 25;

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-sqlite-exit-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/**
 * A process that opens the store as a serving process does (its writes and checkpoints in threads),
 * makes `KEYS` keys (or takes those in the file), records `BATCHES` usage batches of one request per
 * key, prints the key ids once the last write is acknowledged, and exits at once without closing.
 */
const SCRIPT = `
const { SqliteKeyStore } = require(${JSON.stringify(path.join(DIST, 'store', 'sqlite', 'store.js'))});
const { issueKey } = require(${JSON.stringify(path.join(DIST, 'auth', 'issue.js'))});
(async () => {
  const store = new SqliteKeyStore(process.argv[1], 1000);
  store.sql.checkpointInBackground((err) => process.stderr.write('thread failed: ' + err + '\\n'));
  let keys = await store.list();
  for (let n = keys.length; n < ${KEYS}; n++) keys.push((await issueKey(store, { name: 'exit-' + n })).record);
  const at = new Date();
  const uses = keys.map((key) => ({ keyId: key.id, accountId: key.accountId, date: at.toISOString().slice(0, 10), at, requests: 1, refused: 0, costNanos: 0, promptTokens: 3, completionTokens: 2, model: 'mock/echo', endUser: '' }));
  for (let batch = 0; batch < ${BATCHES}; batch++) await store.recordUse(uses, process.argv[2] + '-' + batch);
  process.stdout.write(JSON.stringify(keys.map((key) => key.id)));
  process.exit(0);
})().catch((err) => { process.stderr.write(String(err && err.stack || err)); process.exit(2); });
`;

function run(file: string, batchPrefix: string): Promise<{ code: number | null; signal: string | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['-e', SCRIPT, file, batchPrefix], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    const killer = setTimeout(() => child.kill('SIGKILL'), 20_000); // a process the threads held up fails the test (signal SIGKILL)
    child.once('error', reject);
    child.once('exit', (code, signal) => {
      clearTimeout(killer);
      resolve({ code, signal, stdout, stderr });
    });
  });
}

/** What the file holds, read by a process of its own after the writer left: whole, and each key's count. */
async function readBack(file: string, ids: string[]): Promise<{ integrity: unknown; requests: number[] }> {
  const store = new SqliteKeyStore(file, 1000);
  try {
    const integrity = store.sql.get<{ integrity_check: string }>('PRAGMA integrity_check')?.integrity_check;
    const requests = await Promise.all(ids.map(async (id) => (await store.get(id))?.usage.requests ?? -1));
    return { integrity, requests };
  } finally {
    await store.close();
  }
}

test('a serving process that exits busy, without closing its store, exits at once and loses no acknowledged write', async () => {
  const file = path.join(dir, 'chatgate.db');
  const first = await run(file, 'first');
  expect({ code: first.code, signal: first.signal, stderr: first.stderr }).toEqual({ code: 0, signal: null, stderr: '' });
  const ids = JSON.parse(first.stdout) as string[];
  expect(ids).toHaveLength(KEYS);
  expect(await readBack(file, ids)).toEqual({ integrity: 'ok', requests: ids.map(() => BATCHES) });

  // The next process opens what the last one left, writes on, and exits the same way.
  const second = await run(file, 'second');
  expect({ code: second.code, signal: second.signal, stderr: second.stderr }).toEqual({ code: 0, signal: null, stderr: '' });
  expect((JSON.parse(second.stdout) as string[]).sort()).toEqual([...ids].sort());
  expect(await readBack(file, ids)).toEqual({ integrity: 'ok', requests: ids.map(() => 2 * BATCHES) });
}, 60_000);
