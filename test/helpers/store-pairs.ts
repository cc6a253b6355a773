/**
 * Two handles on one SQL store, as two processes or replicas would have them: SQLite (two
 * connections to one file) and PostgreSQL (two pools on a fresh database), for tests that run the
 * same checks on both.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PostgresKeyStore } from '../../src/store/postgres/store';
import { SqliteKeyStore } from '../../src/store/sqlite/store';
import type { Store } from '../../src/store/types';
import { createTestDatabase } from './postgres';

export interface StorePair {
  store: Store;
  other: Store;
  close(): Promise<void>;
}

export const SQL_STORE_PAIRS: Array<[kind: 'sqlite' | 'postgres', open: () => Promise<StorePair>]> = [
  [
    'sqlite',
    async () => {
      const dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-pair-'));
      const file = path.join(dir, 'chatgate.db');
      const [store, other] = [new SqliteKeyStore(file), new SqliteKeyStore(file)];
      return {
        store,
        other,
        close: async () => {
          await Promise.all([store.close(), other.close()]);
          rmSync(dir, { recursive: true, force: true });
        },
      };
    },
  ],
  [
    'postgres',
    async () => {
      const database = await createTestDatabase();
      const [store, other] = await Promise.all([PostgresKeyStore.open(database.url), PostgresKeyStore.open(database.url)]);
      return {
        store,
        other,
        close: async () => {
          await Promise.all([store.close(), other.close()]);
          await database.drop();
        },
      };
    },
  ],
];
