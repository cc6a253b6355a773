/**
 * Usage batches written off the event loop, for a serving process.
 *
 * A usage flush writes a row or more for each key in use; at 100,000 keys in use among a million, its
 * slices of 250 uses held the event loop 30-74 ms each while they committed (a stall probe saw them
 * every 10 s, with the flush), and every request waiting meanwhile had it added to its time. A
 * serving process therefore hands these writes to a worker thread with a connection of its own: each
 * batch one immediate transaction there, its first statement (`guard`) an insert whose 0 changes mean
 * the batch landed before (then nothing else runs), as it would be here. The event loop only posts
 * the batch and takes the answer. The write lock is SQLite's as before: another writer of this
 * process or another waits its turn (busy timeout), as it waited for an in-process flush.
 *
 * Should the thread fail or end, the batches under way are refused (the caller sends them again,
 * under the same id: counted once) and later ones are written here, on the event loop, as before.
 */
import { Worker } from 'node:worker_threads';
import type { SqlConnection } from './driver';
import { OPEN_IN_THREAD, threadData } from './checkpoints';

/** A statement and its parameters. */
export type Write = readonly [sql: string, params: readonly unknown[]];

const THREAD = `${OPEN_IN_THREAD}
db.exec('PRAGMA busy_timeout = ' + workerData.busyTimeoutMs);
db.exec('PRAGMA synchronous = NORMAL');
db.exec('PRAGMA foreign_keys = ON');
// The checkpoint thread copies the log back (started with this one): a commit here copying it too took twice as long.
db.exec('PRAGMA wal_autocheckpoint = 0');
const prepared = new Map();
const statement = (sql) => {
  let made = prepared.get(sql);
  if (!made) prepared.set(sql, (made = db.prepare(sql)));
  return made;
};
parentPort.on('message', (message) => {
  if (message === 'stop') {
    db.close();
    parentPort.close();
    return;
  }
  try {
    db.exec('BEGIN IMMEDIATE');
    try {
      if (Number(statement(message.guard[0]).run(...message.guard[1]).changes) > 0) for (const [sql, params] of message.work) statement(sql).run(...params);
      db.exec('COMMIT');
    } catch (err) {
      try { db.exec('ROLLBACK'); } catch {}
      throw err;
    }
    parentPort.postMessage({ id: message.id });
  } catch (err) {
    parentPort.postMessage({ id: message.id, message: String(err && err.message), code: err && err.code, errcode: err && err.errcode });
  }
});
`;

export class WriterThread {
  private readonly worker: Worker;
  private readonly pending = new Map<number, { resolve: () => void; reject: (err: Error) => void }>();
  private readonly ended: Promise<void>;
  private nextId = 0;
  private stopping = false;
  private failed = false;

  /** `failed`: the thread failed or ended on its own; writes are made on the event loop again. */
  constructor(db: SqlConnection, file: string, busyTimeoutMs: number, onFailure: (err: unknown) => void = () => undefined) {
    this.worker = new Worker(THREAD, { eval: true, workerData: { ...threadData(db, file), busyTimeoutMs } });
    this.ended = new Promise((resolve) => this.worker.once('exit', () => resolve()));
    this.worker.unref();
    this.worker.on('message', (answer: { id: number; message?: string; code?: string; errcode?: number }) => {
      const waiting = this.pending.get(answer.id);
      this.pending.delete(answer.id);
      if (answer.message === undefined) waiting?.resolve();
      else waiting?.reject(Object.assign(new Error(answer.message), { code: answer.code, errcode: answer.errcode }));
    });
    const fail = (err: unknown) => {
      if (this.failed) return;
      this.failed = true;
      for (const waiting of this.pending.values()) waiting.reject(new Error('the usage writer thread ended before it answered'));
      this.pending.clear();
      if (!this.stopping) onFailure(err);
    };
    this.worker.on('error', fail);
    this.worker.on('exit', (code) => fail(new Error(`the usage writer thread ended (exit code ${code})`)));
  }

  /** Whether writes go to the thread (false: it failed or is stopping; write on the event loop). */
  get running(): boolean {
    return !this.failed && !this.stopping;
  }

  /** `guard`, then (when it changed a row) `work`, in one immediate transaction in the thread. */
  write(guard: Write, work: readonly Write[]): Promise<void> {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ id, guard, work });
    });
  }

  /** Lets the writes under way finish, then ends the thread (its connection closed), within a second. */
  async stop(): Promise<void> {
    if (this.stopping) return this.ended;
    this.stopping = true;
    if (!this.failed) this.worker.postMessage('stop'); // after the batches posted before it: the thread takes them in order
    const deadline = setTimeout(() => void this.worker.terminate(), 1_000);
    await this.ended;
    clearTimeout(deadline);
  }
}
