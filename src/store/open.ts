/**
 * The key store the config names: the file store (embedded default) or PostgreSQL (shared mode),
 * behind the guard that gives every call a deadline. A store that cannot be opened at start says so
 * by name (`key store: cannot connect to postgres://db:5432/chatgate (ECONNREFUSED)`), never with the
 * URL's password.
 */
import path from 'node:path';
import type { Config } from '../config';
import { FileKeyStore } from './file';
import { GuardedKeyStore, type StoreHealthEvents } from './guarded';
import type { PostgresEvents } from './postgres';

export interface KeyStoreEvents extends Partial<PostgresEvents>, Partial<StoreHealthEvents> {}

export async function openKeyStore(config: Pick<Config, 'keyStore'>, events: KeyStoreEvents = {}): Promise<GuardedKeyStore> {
  const health: StoreHealthEvents = { down: events.down ?? (() => undefined), up: events.up ?? (() => undefined) };
  const settings = config.keyStore;
  if (settings.type === 'postgres') {
    const { PostgresKeyStore } = await import('./postgres'); // pg only in shared mode
    try {
      const store = await PostgresKeyStore.open(settings.url, { listener: events.listener ?? (() => undefined) }, settings.poolSize, settings.timeoutMs);
      return new GuardedKeyStore(store, settings.timeoutMs, health);
    } catch (err) {
      throw new KeyStoreOpenError(`key store: cannot connect to ${withoutPassword(settings.url)} (${reasonOf(err)})`, { cause: err });
    }
  }
  return new GuardedKeyStore(new FileKeyStore(path.resolve(settings.path)), settings.timeoutMs, health);
}

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
