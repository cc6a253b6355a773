/**
 * The backends of the account side of the store contract, each as two handles on one store (as two
 * processes or replicas would have): the file store fake, SQLite (two connections to one file),
 * PostgreSQL (two pools on a fresh database) and the memory fake the unit tests use (one object: its
 * two handles are the same). Every handle records the methods a test calls (contract-methods.ts).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PostgresKeyStore } from '../../src/store/postgres/store';
import { SqliteKeyStore } from '../../src/store/sqlite/store';
import type { AccountStore, KeyUse, Store } from '../../src/store/types';
import { FileKeyStore } from '../fakes/file-store';
import { MemoryAccountStore } from '../fakes/memory-account-store';
import { addUses } from '../fakes/usage-ledger';
import { createTestDatabase } from '../helpers/postgres';
import { recorded } from './contract-methods';

export interface ContractBackend {
  store: AccountStore;
  other: AccountStore;
  /** What the key store's recordUse adds to usage (the memory fake holds no keys: its rows are added to). */
  recordUse(uses: readonly KeyUse[]): Promise<void>;
  /** Whether the two handles are one object (the memory fake): what one writes, the other need not read anew. */
  oneObject: boolean;
  /** Every method called on either handle. */
  called: Set<string>;
  close(): Promise<void>;
}

function pairOf(store: Store, other: Store, close: () => Promise<void>): ContractBackend {
  const called = new Set<string>();
  return { store: recorded(store, called), other: recorded(other, called), recordUse: (uses) => store.recordUse(uses), oneObject: false, called, close };
}

function temporaryFile(name: string): { file: string; remove: () => void } {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-contract-'));
  return { file: path.join(dir, name), remove: () => rmSync(dir, { recursive: true, force: true }) };
}

export const CONTRACT_BACKENDS: Array<[kind: string, open: () => Promise<ContractBackend>]> = [
  [
    'file fake',
    async () => {
      const { file, remove } = temporaryFile('keys.json');
      const [store, other] = [new FileKeyStore(file), new FileKeyStore(file)];
      return pairOf(store, other, async () => {
        await Promise.all([store.close(), other.close()]);
        remove();
      });
    },
  ],
  [
    'sqlite',
    async () => {
      const { file, remove } = temporaryFile('chatgate.db');
      const [store, other] = [new SqliteKeyStore(file), new SqliteKeyStore(file)];
      return pairOf(store, other, async () => {
        await Promise.all([store.close(), other.close()]);
        remove();
      });
    },
  ],
  [
    'postgres',
    async () => {
      const database = await createTestDatabase();
      const [store, other] = await Promise.all([PostgresKeyStore.open(database.url), PostgresKeyStore.open(database.url)]);
      return pairOf(store, other, async () => {
        await Promise.all([store.close(), other.close()]);
        await database.drop();
      });
    },
  ],
  [
    'memory fake',
    async () => {
      const memory = new MemoryAccountStore();
      const called = new Set<string>();
      const handle = recorded(memory, called);
      return { store: handle, other: handle, recordUse: async (uses) => addUses(memory.usageDays, memory.usageLedger, uses), oneObject: true, called, close: async () => undefined };
    },
  ],
];

/**
 * A contract suite's backend: opened before the suite's tests, handed to `use` (which keeps what it
 * needs in the suite's own variables), and closed after them.
 */
export function withBackend(open: () => Promise<ContractBackend>, use: (backend: ContractBackend) => void): void {
  let backend: ContractBackend | undefined;
  beforeAll(async () => {
    backend = await open();
    use(backend);
  });
  afterAll(() => backend?.close());
}
