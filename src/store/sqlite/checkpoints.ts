/**
 * WAL checkpoints off the event loop, for a serving process.
 *
 * SQLite copies its write-ahead log back into the database file (a checkpoint) at the commit that
 * takes the log past 1,000 pages, in the committing connection: here, on the event loop, for as long
 * as the copy takes. A usage flush dirties about a page a key in use; with 1,000,000 keys, a slice of
 * 1,000 uses took 48 ms with those checkpoints against 18 ms without (a checkpoint after every slice
 * or so), and every request waiting meanwhile had it added to its time.
 *
 * A serving process therefore turns its connection's automatic checkpoints off and runs them in a
 * worker thread with a connection of its own, every CHECKPOINT_MS, PASSIVE (it neither waits for nor
 * blocks a reader or a writer; what a reader still needs is copied at a later one). Should the thread
 * fail or end, the connection checkpoints itself again, as before. The CLI's short-lived connections
 * keep SQLite's automatic checkpoints, and so does any connection when worker threads cannot start.
 */
import { createRequire } from 'node:module';
import { Worker } from 'node:worker_threads';
import type { SqlConnection } from './driver';

const CHECKPOINT_MS = 1_000;
/** SQLite's own default: a commit past this many pages of log checkpoints. */
const AUTOMATIC_PAGES = 1_000;

/** A thread's own connection to the file (`workerData`: threadData below): plain JavaScript, run from source under the tests as from dist. */
export const OPEN_IN_THREAD = `
const { parentPort, workerData } = require('node:worker_threads');
const db = workerData.driver === 'node:sqlite'
  ? new (process.getBuiltinModule('node:sqlite').DatabaseSync)(workerData.file)
  : new (require(workerData.library))(workerData.file);
`;

/** What a thread's connection needs to open the file as this connection did: its driver and library. */
export function threadData(db: SqlConnection, file: string): { file: string; driver: string; library: string | undefined } {
  return { file, driver: db.driver, library: db.driver === 'better-sqlite3' ? createRequire(__filename).resolve('better-sqlite3') : undefined };
}

/** The thread. */
const THREAD = `${OPEN_IN_THREAD}
db.exec('PRAGMA busy_timeout = 0');
const timer = setInterval(() => {
  try {
    db.exec('PRAGMA wal_checkpoint(PASSIVE)');
  } catch (err) {
    // Another process's checkpoint under way: the next one copies what this one would have.
    if (!/SQLITE_BUSY|SQLITE_LOCKED|database is locked/i.test(String(err && err.message) + String(err && err.code))) throw err;
  }
}, workerData.everyMs);
parentPort.once('message', () => {
  clearInterval(timer);
  db.close();
  parentPort.close();
});
`;

export class BackgroundCheckpoints {
  private readonly worker: Worker | undefined;
  private readonly ended: Promise<void> = Promise.resolve();
  private stopping = false;

  /** `failed`: the thread failed or ended on its own; the connection checkpoints itself again. */
  constructor(
    db: SqlConnection,
    file: string,
    failed: (err: unknown) => void = () => undefined,
  ) {
    try {
      this.worker = new Worker(THREAD, { eval: true, workerData: { ...threadData(db, file), everyMs: CHECKPOINT_MS } });
    } catch (err) {
      failed(err);
      return;
    }
    const worker = this.worker;
    this.ended = new Promise((resolve) => worker.once('exit', () => resolve()));
    worker.unref();
    db.exec('PRAGMA wal_autocheckpoint = 0');
    let told = false;
    const fallBack = (err: unknown) => {
      if (this.stopping || told) return;
      told = true;
      if (db.open) db.exec(`PRAGMA wal_autocheckpoint = ${AUTOMATIC_PAGES}`);
      failed(err);
    };
    this.worker.on('error', fallBack);
    this.worker.on('exit', (code) => fallBack(new Error(`the checkpoint thread ended (exit code ${code})`)));
  }

  /** Whether checkpoints run in the thread (false: the connection's own, automatic ones). */
  get running(): boolean {
    return this.worker !== undefined && !this.stopping;
  }

  /** Ends the thread (its connection closed), within a second; the caller's close checkpoints last. */
  async stop(): Promise<void> {
    const worker = this.worker;
    if (!worker || this.stopping) return this.ended;
    this.stopping = true;
    worker.postMessage('stop');
    const deadline = setTimeout(() => void worker.terminate(), 1_000);
    await this.ended;
    clearTimeout(deadline);
  }
}
