/**
 * Where things are kept: the data directory (`dataDir`), how long a start waits for the key store
 * (`store`), and the key store itself (`keyStore`: SQLite, the default, or PostgreSQL).
 */
import { z } from 'zod';
import { milliseconds } from './parts';

export const dataDirSection = z.string().min(1).default('./data');

/** Starting while the key store (PostgreSQL) is away: wait for it, or give up (exit 1) after startupTimeoutMs; null: wait as long as it takes. */
export const storeSection = z.strictObject({ startupTimeoutMs: milliseconds.nullable().default(null) }).prefault({});

export const keyStoreSection = z
  .discriminatedUnion('type', [
    // The embedded default: one SQLite file, shared by the gateway, its processes and the CLI.
    // Its path defaults to <dataDir>/chatgate.db (filled in below, where dataDir is known).
    z.strictObject({ type: z.literal('sqlite'), path: z.string().min(1).optional(), timeoutMs: milliseconds.default(1_000) }),
    // Retired: the JSON file store, rewritten whole on every change. Named here only to say how to move off it.
    z.object({ type: z.literal('file'), path: z.unknown().optional() }).transform((retired, ctx) => {
      const file = typeof retired.path === 'string' ? retired.path : './data/keys.json';
      ctx.addIssue({ code: 'custom', message: `type 'file' (a JSON file rewritten whole on every change) is no longer a key store: set keyStore to {type: sqlite} (the default; a new SQLite file beside a keys.json imports it at its first start), or import it once with 'chatgate store import ${file}'` });
      return z.NEVER;
    }),
    z.strictObject({
      type: z.literal('postgres'),
      url: z.string().regex(/^postgres(ql)?:\/\//, 'must be a postgres:// URL'),
      // Per process (a cluster's primary too), plus one connection that listens for key changes.
      poolSize: z.number().int().min(1).max(100).default(10),
      /** Every call to the store gives up after this long, measured by the gateway (a frozen server enforces nothing). */
      timeoutMs: milliseconds.default(1_000),
    }),
  ])
  .prefault({ type: 'sqlite' });
