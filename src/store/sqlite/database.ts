/**
 * One connection to the embedded store's file, set up for several processes at once: WAL (readers
 * never wait for a writer), a busy timeout (a writer waits its turn rather than failing), foreign
 * keys on, synchronous NORMAL (a commit survives the process dying; only a power cut may lose the
 * last ones). SQLite runs in process and synchronously (driver.ts): every call runs to its end on this thread, a lookup in
 * microseconds. Changes that read and write take the write lock first (BEGIN IMMEDIATE), so two
 * processes changing the same rows are put in order and neither loses the other's change.
 */
import { closeSync, mkdirSync, openSync } from 'node:fs';
import path from 'node:path';
import { sqliteDuplicate } from '../errors';
import { StoreUnreadable } from '../guarded';
import { BackgroundCheckpoints } from './checkpoints';
import { WriterThread, type Write } from './writer-thread';
import { immediate, openConnection, sqliteCode, type SqlConnection, type SqlStatement } from './driver';
import { migrate } from './migrations';

/** SQLite's answers that say the file cannot be used right now, rather than that a statement is wrong. */
const UNAVAILABLE = /^SQLITE_(BUSY|LOCKED|CANTOPEN|IOERR|NOTADB|CORRUPT|FULL|READONLY|PROTOCOL|PERM|NOMEM)/;

export class SqliteDatabase {
  readonly db: SqlConnection;
  /** Whether this open made the schema (a new file). */
  readonly created: boolean;
  private readonly statements = new Map<string, SqlStatement>();
  private checkpoints: BackgroundCheckpoints | undefined;
  private writer: WriterThread | undefined;

  constructor(
    readonly file: string,
    private readonly busyTimeoutMs: number,
  ) {
    mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    // Made 0600 before SQLite opens it: it holds key digests and password hashes. SQLite gives its
    // -wal and -shm files the same mode.
    closeSync(openSync(file, 'a', 0o600));
    this.db = unavailableOnFailure(() => openConnection(file));
    try {
      this.db.exec(`PRAGMA busy_timeout = ${Math.max(0, Math.floor(busyTimeoutMs))}`);
      this.db.exec('PRAGMA journal_mode = WAL');
      this.db.exec('PRAGMA synchronous = NORMAL');
      this.db.exec('PRAGMA foreign_keys = ON');
      this.created = migrate(this.db);
    } catch (err) {
      this.db.close();
      throw unavailableError(err);
    }
    // Closed before the process ends (a clean close checkpoints the WAL into the file).
    if (openDatabases.size === 0 && !closingAtExit) {
      closingAtExit = true;
      process.once('exit', closeAll);
    }
    openDatabases.add(this);
  }

  /** A prepared statement, made once per connection. */
  statement(sql: string): SqlStatement {
    let statement = this.statements.get(sql);
    if (!statement) {
      statement = this.db.prepare(sql);
      this.statements.set(sql, statement);
    }
    return statement;
  }

  all<R>(sql: string, ...params: unknown[]): R[] {
    return this.statement(sql).all(...params) as R[];
  }

  get<R>(sql: string, ...params: unknown[]): R | undefined {
    return this.statement(sql).get(...params) as R | undefined;
  }

  run(sql: string, ...params: unknown[]): { changes: number } {
    return { changes: Number(this.statement(sql).run(...params).changes) };
  }

  /** A read of one or more statements, as one async call; a file that cannot be read is StoreUnreadable. */
  async read<T>(work: () => T): Promise<T> {
    return unavailableOnFailure(work);
  }

  /** A change, in one immediate transaction (the write lock first: no lost update between processes). */
  async write<T>(work: () => T): Promise<T> {
    return unavailableOnFailure(() => immediate(this.db, work));
  }

  /**
   * For a serving process: the WAL's checkpoints in a thread of their own (checkpoints.ts), and the
   * writes given to writeOffLoop in another (writer-thread.ts), both off the event loop.
   */
  checkpointInBackground(failed?: (err: unknown) => void): void {
    this.checkpoints ??= new BackgroundCheckpoints(this.db, this.file, failed);
    try {
      this.writer ??= new WriterThread(this.db, this.file, this.busyTimeoutMs, failed);
    } catch (err) {
      failed?.(err); // no thread: those writes are made here
    }
  }

  /**
   * `guard`, then (when it changed a row) `work`, as one change: by the writer thread when it runs,
   * else here. For writes whose caller need not read what they wrote (usage batches).
   */
  async writeOffLoop(guard: Write, work: readonly Write[]): Promise<void> {
    if (this.writer?.running) return this.writer.write(guard, work).catch((err: unknown) => Promise.reject(unavailableError(err)));
    return this.write(() => {
      if (this.run(guard[0], ...guard[1]).changes === 0) return;
      for (const [sql, params] of work) this.run(sql, ...params);
    });
  }

  /**
   * Ends the threads (the writer once it has written the batches it was given), then closes this
   * connection last: the last connection to close copies the log into the file and removes it, and
   * two closing at once may each see the other and leave it (a thread that never read the file has
   * no log to remove). The promise settles once all have ended: nothing of this process touches the
   * file after it (a caller that then removes the directory finds it quiet). At the process's exit
   * the threads end with it, and this connection closes at once (`now`).
   */
  async close(now = false): Promise<void> {
    openDatabases.delete(this);
    const threadsEnded = Promise.all([this.writer?.stop(), this.checkpoints?.stop()]);
    if (!now) await threadsEnded;
    this.statements.clear();
    if (this.db.open) this.db.close();
  }
}

/** Every database open in this process, closed at its exit. */
const openDatabases = new Set<SqliteDatabase>();
let closingAtExit = false;
function closeAll(): void {
  for (const database of [...openDatabases]) {
    try {
      void database.close(true); // at exit: the threads end with the process
    } catch {
      // exiting: nothing more to do for it
    }
  }
}

function unavailableOnFailure<T>(work: () => T): T {
  try {
    return work();
  } catch (err) {
    throw unavailableError(err);
  }
}

/**
 * The guard (guarded.ts) counts a StoreUnreadable as the store being away: 503, and known keys served
 * stale. A unique value taken is DuplicateRecord, as on every backend.
 */
function unavailableError(err: unknown): unknown {
  const code = sqliteCode(err);
  if (code?.startsWith('SQLITE_CONSTRAINT')) return sqliteDuplicate(err) ?? err;
  if (code !== undefined && UNAVAILABLE.test(code)) return new StoreUnreadable(`key store: ${code} (${(err as Error).message.split('\n')[0]!.slice(0, 200)})`, { cause: err });
  return err;
}
