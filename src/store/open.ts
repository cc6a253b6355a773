/**
 * The key store the config names: SQLite (the embedded default) or PostgreSQL (shared mode), behind
 * the guard that gives every call a deadline. The JSON file store (file.ts) is only read, by imports. A store that cannot
 * be opened at start says so by name (`key store: cannot connect to postgres://db:5432/chatgate
 * (ECONNREFUSED)`, `key store: cannot open /data/chatgate.db (SQLITE_CANTOPEN)`), never with the
 * URL's password.
 *
 * A new SQLite file made beside a file store's keys.json (an upgrade that kept the default config,
 * whose default was the file store) imports it at once, so no key stops working: `imported` says so.
 */
import { existsSync, rmSync } from 'node:fs';
import path from 'node:path';
import type { Config } from '../config';
import { GuardedKeyStore, type StoreHealthEvents } from './guarded';
import type { ImportReport } from './import-plan';
import type { PostgresEvents } from './postgres/store';

export interface KeyStoreEvents extends Partial<PostgresEvents>, Partial<StoreHealthEvents> {
  /** A new SQLite file imported the keys.json found beside it: from which file, how many of each record kind. */
  imported?(file: string, counts: Readonly<Record<string, number>>): void;
  /** SQLite: a thread of a serving process (checkpoints, usage writes) failed; its work is done on the event loop again. */
  checkpointsFailed?(err: unknown): void;
}

export interface KeyStoreOptions {
  /** A serving process (not the CLI): SQLite checkpoints its write-ahead log in a thread of its own. */
  serving?: boolean;
}

export async function openKeyStore(config: Pick<Config, 'keyStore'>, events: KeyStoreEvents = {}, options: KeyStoreOptions = {}): Promise<GuardedKeyStore> {
  const health: StoreHealthEvents = { down: events.down ?? (() => undefined), up: events.up ?? (() => undefined) };
  const settings = config.keyStore;
  if (settings.type === 'postgres') {
    const { PostgresKeyStore } = await import('./postgres/store.js'); // pg only in shared mode
    try {
      const store = await PostgresKeyStore.open(settings.url, { listener: events.listener ?? (() => undefined) }, settings.poolSize, settings.timeoutMs);
      return new GuardedKeyStore(store, settings.timeoutMs, health);
    } catch (err) {
      throw new KeyStoreOpenError(`key store: cannot connect to ${withoutPassword(settings.url)} (${reasonOf(err)})`, { cause: err });
    }
  }
  if (settings.type === 'sqlite') {
    const file = path.resolve(settings.path);
    const { SqliteKeyStore } = await import('./sqlite/store.js'); // the native module only when used
    let store: InstanceType<typeof SqliteKeyStore>;
    try {
      store = new SqliteKeyStore(file, settings.timeoutMs);
    } catch (err) {
      const notADatabase = /SQLITE_NOTADB/.test(String((err as Error)?.message));
      const hint = notADatabase ? `: not a SQLite database; a file store's keys.json is imported with 'chatgate store import FILE' into another path` : '';
      throw new KeyStoreOpenError(`key store: cannot open ${file} (${notADatabase ? 'SQLITE_NOTADB' : reasonOf(err)})${hint}`, { cause: err });
    }
    const legacy = path.join(path.dirname(file), LEGACY_FILE);
    if (store.created && existsSync(legacy)) {
      const { importFile } = await import('./sqlite/import.js');
      try {
        events.imported?.(legacy, (await importFile(store, legacy)).imported);
      } catch (err) {
        // The new file goes too, so that the next start, the file mended, imports it (a start that
        // found the store already made would not).
        await store.close();
        for (const made of [file, `${file}-wal`, `${file}-shm`]) rmSync(made, { force: true });
        throw new KeyStoreOpenError(`key store: a new ${file} could not import ${legacy} (${reasonOf(err)}); mend or move the file and start again`, { cause: err });
      }
    }
    if (options.serving) store.sql.checkpointInBackground(events.checkpointsFailed);
    return new GuardedKeyStore(store, settings.timeoutMs, health);
  }
  throw new KeyStoreOpenError(`key store: unknown type '${(settings as { type: string }).type}'`);
}

/**
 * `chatgate store import FILE`: a file store's keys.json into the configured SQLite or PostgreSQL
 * store (import-plan.ts); where it went (the SQLite file, or the database without its password).
 */
export async function importIntoStore(settings: Config['keyStore'], file: string): Promise<{ report: ImportReport; target: string }> {
  if (settings.type === 'sqlite') {
    const [{ SqliteKeyStore }, { importFile }] = await Promise.all([import('./sqlite/store.js'), import('./sqlite/import.js')]);
    const target = path.resolve(settings.path);
    const store = new SqliteKeyStore(target, settings.timeoutMs);
    try {
      return { report: await importFile(store, file), target };
    } finally {
      await store.close();
    }
  }
  if (settings.type === 'postgres') {
    const { PostgresKeyStore } = await import('./postgres/store.js');
    const store = await PostgresKeyStore.open(settings.url, undefined, 1, settings.timeoutMs);
    try {
      return { report: await store.importFile(file), target: withoutPassword(settings.url) };
    } finally {
      await store.close();
    }
  }
  throw new KeyStoreOpenError(`store import: unknown key store type '${(settings as { type: string }).type}'`);
}

/** The file store's default file name: a new SQLite store beside one imports it. */
const LEGACY_FILE = 'keys.json';

export class KeyStoreOpenError extends Error {
  override name = 'KeyStoreOpenError';
}

/** Pure: the URL as it may be shown: scheme, host, port and database, without user info or query. */
export function withoutPassword(url: string): string {
  try {
    const parsed = new URL(url);
    return `${parsed.protocol}//${parsed.host}${parsed.pathname}`;
  } catch {
    return 'the configured URL';
  }
}

function reasonOf(err: unknown): string {
  const { code, message } = (err ?? {}) as { code?: unknown; message?: unknown };
  if (typeof code === 'string') return code;
  // pg's own messages name no secret ("timeout expired", "password authentication failed for user ..."),
  // but quote nothing from them past the first line.
  return String(message ?? err).split('\n')[0]!.slice(0, 200);
}
