/**
 * The SQLite library the embedded store runs on: Node's own `node:sqlite` where this Node has it
 * unflagged (22.13 and later; the image's Node 24), better-sqlite3 on older Nodes (20). The two
 * speak the same SQL to the same file format; the store uses only what both have (prepare, get, all,
 * run, exec) through the small interface below.
 *
 * Why not better-sqlite3 everywhere: from Node 24.19, a better-sqlite3 12 statement (or database)
 * that the garbage collector frees outside JavaScript aborts the whole process
 * (`RemoveEnvironmentCleanupHook: Assertion failed: (env) != nullptr`); better-sqlite3 13 fixes it
 * but needs Node 22. Node's own module has no native part to build either: the image needs no
 * compiler.
 */
import { createRequire } from 'node:module';

export interface SqlStatement {
  get(...params: unknown[]): unknown;
  all(...params: unknown[]): unknown[];
  run(...params: unknown[]): { changes: number | bigint };
}

export interface SqlConnection {
  /** Which library this connection runs on. */
  readonly driver: SqliteDriver;
  readonly open: boolean;
  prepare(sql: string): SqlStatement;
  /** Runs one or more statements that take no parameters and return nothing. */
  exec(sql: string): void;
  close(): void;
}

export type SqliteDriver = 'node:sqlite' | 'better-sqlite3';

interface NodeSqlite {
  DatabaseSync: new (file: string) => { prepare(sql: string): SqlStatement; exec(sql: string): void; close(): void; readonly isOpen: boolean };
}

let builtin: NodeSqlite | null | undefined;

/** Whether a Node version has node:sqlite without a flag: 22.13 and 23.4 took the flag away (deploy/build-native.cjs says the same). */
export function unflagged(version: string): boolean {
  const [major = 0, minor = 0] = version.replace(/^v/, '').split('.').map(Number);
  return major > 23 || (major === 23 && minor >= 4) || (major === 22 && minor >= 13);
}

/** Node's own SQLite module when this Node has it without a flag; null when it does not. */
function nodeSqlite(): NodeSqlite | null {
  if (builtin !== undefined) return builtin;
  builtin = null;
  if (unflagged(process.versions.node)) {
    try {
      builtin = (process as unknown as { getBuiltinModule(id: string): NodeSqlite | undefined }).getBuiltinModule('node:sqlite') ?? null;
    } catch {
      builtin = null;
    }
  }
  return builtin;
}

/** The library a new connection uses in this process. */
export function sqliteDriver(): SqliteDriver {
  return nodeSqlite() ? 'node:sqlite' : 'better-sqlite3';
}

/** Opens (and creates) the file. Errors are the library's own; database.ts reads their SQLite code with sqliteCode(). */
export function openConnection(file: string): SqlConnection {
  const node = nodeSqlite();
  if (node) {
    const db = new node.DatabaseSync(file);
    return {
      driver: 'node:sqlite',
      get open() {
        return db.isOpen;
      },
      prepare: (sql) => db.prepare(sql),
      exec: (sql) => db.exec(sql),
      close: () => db.close(),
    };
  }
  // Loaded only here: a Node with node:sqlite never loads (nor needs a build of) better-sqlite3.
  const Database = createRequire(__filename)('better-sqlite3') as new (file: string) => {
    prepare(sql: string): SqlStatement;
    exec(sql: string): void;
    close(): void;
    readonly open: boolean;
  };
  const db = new Database(file);
  return {
    driver: 'better-sqlite3',
    get open() {
      return db.open;
    },
    prepare: (sql) => db.prepare(sql),
    exec: (sql) => void db.exec(sql),
    close: () => void db.close(),
  };
}

/**
 * Runs work in one transaction that takes the write lock first (BEGIN IMMEDIATE), committed when it
 * returns and rolled back when it throws. The work is synchronous: nothing else runs on this
 * connection meanwhile.
 */
export function immediate<T>(db: SqlConnection, work: () => T): T {
  db.exec('BEGIN IMMEDIATE');
  let result: T;
  try {
    result = work();
  } catch (err) {
    rollback(db);
    throw err;
  }
  try {
    db.exec('COMMIT');
  } catch (err) {
    rollback(db);
    throw err;
  }
  return result;
}

function rollback(db: SqlConnection): void {
  try {
    db.exec('ROLLBACK');
  } catch {
    // SQLite already rolled it back (some errors end the transaction themselves)
  }
}

/** SQLite's primary result codes by number (https://sqlite.org/rescode.html), for node:sqlite's errors. */
const CODES: Record<number, string> = {
  1: 'SQLITE_ERROR',
  3: 'SQLITE_PERM',
  5: 'SQLITE_BUSY',
  6: 'SQLITE_LOCKED',
  7: 'SQLITE_NOMEM',
  8: 'SQLITE_READONLY',
  10: 'SQLITE_IOERR',
  11: 'SQLITE_CORRUPT',
  13: 'SQLITE_FULL',
  14: 'SQLITE_CANTOPEN',
  15: 'SQLITE_PROTOCOL',
  19: 'SQLITE_CONSTRAINT',
  26: 'SQLITE_NOTADB',
};

/**
 * The SQLite code an error carries, whichever library threw it: better-sqlite3 gives its name
 * (`SQLITE_BUSY`, `SQLITE_CONSTRAINT_UNIQUE`), node:sqlite its number (`errcode`, extended codes
 * included); undefined for an error that did not come from SQLite.
 */
export function sqliteCode(err: unknown): string | undefined {
  const { code, errcode } = (err ?? {}) as { code?: unknown; errcode?: unknown };
  if (typeof errcode === 'number') return CODES[errcode & 0xff] ?? `SQLITE_${errcode}`;
  if (typeof code === 'string' && code.startsWith('SQLITE_')) return code;
  return undefined;
}
