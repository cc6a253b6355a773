/**
 * A serving process's SQLite connection leaves checkpoints to a thread of their own
 * (src/store/sqlite/checkpoints.ts): its commits never copy the log back into the file on the event
 * loop, the thread does within seconds, and a thread that ends gives the connection its automatic
 * checkpoints back. The CLI's connections (no thread) keep SQLite's automatic checkpoints.
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Worker } from 'node:worker_threads';
import { openKeyStore } from '../../src/store/open';
import { SqliteDatabase } from '../../src/store/sqlite/database';
import { eventually } from '../helpers/time';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-checkpoints-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const autocheckpoint = (database: SqliteDatabase) => database.get<{ wal_autocheckpoint: number }>('PRAGMA wal_autocheckpoint')!.wal_autocheckpoint;

/** 3,000 pages of log: three times what makes a commit checkpoint by itself. */
async function writePages(database: SqliteDatabase): Promise<void> {
  database.run('create table if not exists filler (id integer primary key, body blob)');
  for (let batch = 0; batch < 30; batch++) {
    await database.write(() => {
      for (let i = 0; i < 100; i++) database.run('insert into filler (body) values (randomblob(4000))');
    });
  }
}

/** The connection's own commits checkpoint: the file grows as the log is copied into it. */
async function expectCommitsCheckpoint(database: SqliteDatabase, file: string): Promise<void> {
  const fileBefore = statSync(file).size;
  await writePages(database);
  expect(statSync(file).size).toBeGreaterThan(fileBefore);
}

/** A serving process's connection: its checkpoints in the thread (its automatic ones off), the thread's failures collected. */
function servingDatabase() {
  const file = path.join(dir, 'chatgate.db');
  const serving = new SqliteDatabase(file, 1000);
  const failures: unknown[] = [];
  serving.checkpointInBackground((err) => failures.push(err));
  expect(autocheckpoint(serving)).toBe(0);
  return { file, serving, failures };
}

test("with the thread, the serving connection's commits leave the log whole; the thread copies it into the file within seconds", async () => {
  const { file, serving, failures } = servingDatabase();
  try {
    const fileBefore = statSync(file).size;
    await writePages(serving);
    // The commits copied nothing back: the file is as it was, the log holds every page.
    expect(statSync(file).size).toBe(fileBefore);
    expect(statSync(`${file}-wal`).size).toBeGreaterThan(3000 * 4096);
    // The thread's checkpoint copies the pages into the file (looked at, not asked for: a checkpoint
    // asked for here would do the thread's work).
    await eventually(() => (statSync(file).size >= 3000 * 4096 ? true : undefined), 5_000);
    expect(failures).toEqual([]);
  } finally {
    await serving.close();
  }
});

test('a thread that ends gives the connection its automatic checkpoints back, and says so once', async () => {
  const { file, serving, failures } = servingDatabase();
  try {
    const thread = (serving as unknown as { checkpoints: { worker: Worker } }).checkpoints.worker;
    await thread.terminate();
    await eventually(() => (failures.length > 0 ? true : undefined), 5_000);
    expect(failures).toHaveLength(1);
    expect(String(failures[0])).toMatch(/checkpoint thread ended/);
    expect(autocheckpoint(serving)).toBe(1000);
    await expectCommitsCheckpoint(serving, file);
  } finally {
    await serving.close();
  }
});

test('without the thread (the CLI), a connection checkpoints by itself, as SQLite does', async () => {
  const file = path.join(dir, 'chatgate.db');
  const cli = new SqliteDatabase(file, 1000);
  try {
    expect(autocheckpoint(cli)).toBe(1000);
    await expectCommitsCheckpoint(cli, file);
  } finally {
    cli.close();
  }
});

test("openKeyStore gives a serving process's SQLite store the thread, and the CLI's none", async () => {
  const keyStore = { type: 'sqlite' as const, path: path.join(dir, 'chatgate.db'), timeoutMs: 1000 };
  const connectionOf = (store: unknown) => (store as { inner: { sql: SqliteDatabase } }).inner.sql;
  const serving = await openKeyStore({ keyStore }, {}, { serving: true });
  const cli = await openKeyStore({ keyStore });
  try {
    expect(autocheckpoint(connectionOf(serving))).toBe(0);
    expect(autocheckpoint(connectionOf(cli))).toBe(1000);
  } finally {
    await cli.close();
    await serving.close();
  }
});

test('close settles once the thread has ended (nothing of the process touches the file after it), and the log is folded in', async () => {
  const { file, serving } = servingDatabase();
  await writePages(serving);
  const thread = (serving as unknown as { checkpoints: { worker: Worker } }).checkpoints.worker;
  let exited = false;
  thread.once('exit', () => (exited = true));
  await serving.close();
  expect(exited).toBe(true);
  expect(() => statSync(`${file}-wal`)).toThrow(/ENOENT/);
  expect(statSync(file).size).toBeGreaterThanOrEqual(3000 * 4096);
});
