/**
 * One connection to the embedded store's file, set up for several processes at once: WAL (readers
 * never wait for a writer), a busy timeout (a writer waits its turn rather than failing), foreign
 * keys on, synchronous NORMAL (a commit survives the process dying; only a power cut may lose the
 * last ones). better-sqlite3 is synchronous: every call runs to its end on this thread, a lookup in
 * microseconds. Changes that read and write take the write lock first (BEGIN IMMEDIATE), so two
 * processes changing the same rows are put in order and neither loses the other's change.
 */
import { closeSync, mkdirSync, openSync } from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { StoreUnreadable } from '../guarded';
import { migrate } from './migrations';

/** SQLite's answers that say the file cannot be used right now, rather than that a statement is wrong. */
const UNAVAILABLE = /^SQLITE_(BUSY|LOCKED|CANTOPEN|IOERR|NOTADB|CORRUPT|FULL|READONLY|PROTOCOL)/;

export class SqliteDatabase {
  readonly db: Database.Database;
  /** Whether this open made the schema (a new file). */
  readonly created: boolean;
  private readonly statements = new Map<string, Database.Statement>();
  private readonly kept: Database.Statement[] = [];

  constructor(
    readonly file: string,
    busyTimeoutMs: number,
  ) {
    mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
    // Made 0600 before SQLite opens it: it holds key digests and password hashes. SQLite gives its
    // -wal and -shm files the same mode.
    closeSync(openSync(file, 'a', 0o600));
    this.db = unavailableOnFailure(() => new Database(file, { timeout: busyTimeoutMs }));
    // Node 24: a statement better-sqlite3 frees while the process runs can abort it
    // (RemoveEnvironmentCleanupHook: Assertion failed: (env) != nullptr), so every statement made on
    // this connection, pragma() and transaction()'s own included, is kept until it closes. Each is
    // made once (cached here or by its caller), so what is kept is bounded.
    const prepare = this.db.prepare.bind(this.db) as (...args: unknown[]) => Database.Statement;
    (this.db as unknown as { prepare: (...args: unknown[]) => Database.Statement }).prepare = (...args: unknown[]) => {
      const statement = prepare(...args);
      this.kept.push(statement);
      return statement;
    };
    try {
      this.db.pragma('journal_mode = WAL');
      this.db.pragma('synchronous = NORMAL');
      this.db.pragma('foreign_keys = ON');
      this.created = migrate(this.db);
    } catch (err) {
      this.db.close();
      throw unavailableError(err);
    }
    // Closed before the process ends, however it ends: on Node 24, a statement that better-sqlite3
    // finalizes during the environment's teardown aborts the process (RemoveEnvironmentCleanupHook:
    // Assertion failed: (env) != nullptr), so a CLI run or a process.exit() would crash on its way out.
    if (openDatabases.size === 0 && !closingAtExit) {
      closingAtExit = true;
      process.once('exit', closeAll);
    }
    openDatabases.add(this);
  }

  /** A prepared statement, made once per connection. */
  statement<P extends unknown[] | object = unknown[], R = unknown>(sql: string): Database.Statement<P, R> {
    let statement = this.statements.get(sql);
    if (!statement) {
      statement = this.db.prepare(sql);
      this.statements.set(sql, statement);
    }
    return statement as unknown as Database.Statement<P, R>;
  }

  all<R>(sql: string, ...params: unknown[]): R[] {
    return this.statement<unknown[], R>(sql).all(...params);
  }

  get<R>(sql: string, ...params: unknown[]): R | undefined {
    return this.statement<unknown[], R>(sql).get(...params);
  }

  run(sql: string, ...params: unknown[]): Database.RunResult {
    return this.statement(sql).run(...params);
  }

  /** A read of one or more statements, as one async call; a file that cannot be read is StoreUnreadable. */
  async read<T>(work: () => T): Promise<T> {
    return unavailableOnFailure(work);
  }

  /** A change, in one immediate transaction (the write lock first: no lost update between processes). */
  async write<T>(work: () => T): Promise<T> {
    return unavailableOnFailure(() => this.db.transaction(work).immediate());
  }

  close(): void {
    openDatabases.delete(this);
    if (this.db.open) this.db.close();
  }
}

/** Every database open in this process, closed at its exit. */
const openDatabases = new Set<SqliteDatabase>();
let closingAtExit = false;
function closeAll(code: number): void {
  for (const database of [...openDatabases]) {
    try {
      database.close();
    } catch {
      // exiting: nothing more to do for it
    }
  }
  // Node 24 may still collect a statement while it tears the environment down, and better-sqlite3
  // 12.11.1 then aborts the process: with every database closed and written, the process ends here,
  // with its exit code, without that teardown.
  (process as unknown as { reallyExit(code: number): never }).reallyExit(code);
}

function unavailableOnFailure<T>(work: () => T): T {
  try {
    return work();
  } catch (err) {
    throw unavailableError(err);
  }
}

/** The guard (guarded.ts) counts a StoreUnreadable as the store being away: 503, and known keys served stale. */
function unavailableError(err: unknown): unknown {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && UNAVAILABLE.test(code)) return new StoreUnreadable(`key store: ${code} (${(err as Error).message.split('\n')[0]!.slice(0, 200)})`, { cause: err });
  return err;
}
