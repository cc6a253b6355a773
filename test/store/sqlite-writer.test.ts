/**
 * A serving process writes usage batches off the event loop (src/store/sqlite/writer-thread.ts): by a
 * thread with a connection of its own. Told apart by SQLite itself: `PRAGMA data_version` of the
 * serving connection moves only when another connection commits. A batch sent twice counts once
 * there too; a thread that ends gives the writes back to the event loop, the batch under way refused
 * (sent again, counted once); closing waits for the batches it was given.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Worker } from 'node:worker_threads';
import { SqliteKeyStore } from '../../src/store/sqlite/store';
import type { KeyUse } from '../../src/store/types';
import { eventually } from '../helpers/time';

let dir: string;
let file: string;
beforeEach(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-writer-'));
  file = path.join(dir, 'chatgate.db');
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const today = new Date().toISOString().slice(0, 10);
const use = (keyId: string, requests: number): KeyUse => ({ keyId, accountId: 'acc_w', date: today, at: new Date(), requests, refused: 0, costNanos: 0, promptTokens: 10 * requests, completionTokens: requests, model: 'mock/m', endUser: '' });
const dataVersion = (store: SqliteKeyStore) => store.sql.get<{ data_version: number }>('PRAGMA data_version')!.data_version;
const requestsOf = async (store: SqliteKeyStore) => (await store.usage('acc_w', today, today)).reduce((sum, day) => sum + day.requests, 0);

function serving(failures: unknown[] = []) {
  const store = new SqliteKeyStore(file, 1000);
  store.sql.checkpointInBackground((err) => failures.push(err));
  return store;
}

test('a serving store writes usage by its thread (another connection: data_version moves); a batch sent twice counts once', async () => {
  const store = serving();
  try {
    const before = dataVersion(store);
    await store.recordUse([use('key_a', 2), use('key_b', 3)], 'batch-1');
    expect(dataVersion(store)).not.toBe(before);
    expect(await requestsOf(store)).toBe(5);
    await store.recordUse([use('key_a', 2), use('key_b', 3)], 'batch-1');
    expect(await requestsOf(store)).toBe(5);
  } finally {
    await store.close();
  }
});

test('without the thread (the CLI, tests) usage is written by the connection itself: data_version stays', async () => {
  const store = new SqliteKeyStore(file, 1000);
  try {
    const before = dataVersion(store);
    await store.recordUse([use('key_a', 4)], 'batch-2');
    expect(dataVersion(store)).toBe(before);
    expect(await requestsOf(store)).toBe(4);
  } finally {
    await store.close();
  }
});

test('a thread that ends: said once, later batches written on the event loop, a batch sent again counted once', async () => {
  const failures: unknown[] = [];
  const store = serving(failures);
  try {
    await store.recordUse([use('key_a', 1)], 'batch-3');
    const thread = (store.sql as unknown as { writer: { worker: Worker } }).writer.worker;
    await thread.terminate();
    await eventually(() => (failures.length > 0 ? true : undefined), 5_000);
    expect(failures).toHaveLength(1);
    expect(String(failures[0])).toMatch(/usage writer thread ended/);
    const before = dataVersion(store);
    await store.recordUse([use('key_a', 1)], 'batch-3'); // sent again: landed before, counted once
    await store.recordUse([use('key_a', 2)], 'batch-4');
    expect(dataVersion(store)).toBe(before);
    expect(await requestsOf(store)).toBe(3);
  } finally {
    await store.close();
  }
});

test('closing waits for the batches the thread was given', async () => {
  const store = serving();
  const writes = Array.from({ length: 20 }, (_, i) => store.recordUse(Array.from({ length: 250 }, (__, k) => use(`key_${k}`, 1)), `close-${i}`));
  const closed = store.close();
  await Promise.all(writes);
  await closed;
  const reopened = new SqliteKeyStore(file, 1000);
  try {
    expect(await requestsOf(reopened)).toBe(20 * 250);
  } finally {
    await reopened.close();
  }
});
