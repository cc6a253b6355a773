/**
 * The shared key store: PostgreSQL through `pg`. The schema comes from versioned migrations applied
 * at start under an advisory lock, so replicas starting together apply each one once. Keys are stored
 * as digests only and looked up by digest on a unique index. A trigger NOTIFYs `chatgate_keys` with
 * the digest of every key that changes, whoever changed it, and every replica LISTENs, so a revoked
 * key leaves every cache at once. The listening connection reconnects by itself; while it is down the
 * cache TTL still bounds how stale a replica can be, and after it is back every cache is dropped.
 */
import { EventEmitter } from 'node:events';
import pg from 'pg';
import { StoreDeadlineExceeded } from './guarded';
import type { KeyChanges, KeyRecord, KeyStore, KeyUse } from './types';

const CHANNEL = 'chatgate_keys';
/** Arbitrary, fixed: the advisory lock that serialises migrations across replicas. */
const MIGRATION_LOCK = 7_462_301;
const RECONNECT_DELAYS_MS = [100, 250, 500, 1000, 2000, 5000];

export const MIGRATIONS: ReadonlyArray<{ version: number; sql: string }> = [
  {
    version: 1,
    sql: `
      create table chatgate_keys (
        id text primary key,
        name text not null,
        digest text not null,
        prefix text not null,
        created_at timestamptz not null,
        revoked_at timestamptz,
        expires_at timestamptz,
        models text[] not null default '{}',
        last_used_at timestamptz
      );
      create unique index chatgate_keys_digest on chatgate_keys (digest);
      create function chatgate_keys_notify() returns trigger language plpgsql as $$
      begin
        if tg_op = 'INSERT' then
          perform pg_notify('${CHANNEL}', new.digest);
        else
          perform pg_notify('${CHANNEL}', old.digest);
          if tg_op = 'UPDATE' and new.digest <> old.digest then
            perform pg_notify('${CHANNEL}', new.digest);
          end if;
        end if;
        return null;
      end $$;
      create trigger chatgate_keys_changed
        after insert or delete or update of name, digest, revoked_at, expires_at, models on chatgate_keys
        for each row execute function chatgate_keys_notify();
    `,
  },
  {
    version: 2,
    sql: `
      alter table chatgate_keys
        add column rpm integer,
        add column tpm integer,
        add column max_concurrent integer,
        add column requests_total bigint not null default 0,
        add column prompt_tokens_total bigint not null default 0,
        add column completion_tokens_total bigint not null default 0;
      drop trigger chatgate_keys_changed on chatgate_keys;
      create trigger chatgate_keys_changed
        after insert or delete or update of name, digest, revoked_at, expires_at, models, rpm, tpm, max_concurrent on chatgate_keys
        for each row execute function chatgate_keys_notify();
    `,
  },
];

interface KeyRow {
  id: string;
  name: string;
  digest: string;
  prefix: string;
  created_at: Date;
  revoked_at: Date | null;
  expires_at: Date | null;
  models: string[];
  last_used_at: Date | null;
  rpm: number | null;
  tpm: number | null;
  max_concurrent: number | null;
  /** bigint columns arrive as strings */
  requests_total: string;
  prompt_tokens_total: string;
  completion_tokens_total: string;
}

export interface PostgresEvents {
  /** The notification connection failed or came back; for logs. Never given the URL (it may hold a password). */
  listener(state: 'lost' | 'restored', error?: Error): void;
}

export class PostgresKeyStore implements KeyStore {
  private readonly changes = new EventEmitter();
  private listenerClient: pg.Client | undefined;
  private closed = false;
  private reconnectAttempt = 0;
  private reconnectTimer: NodeJS.Timeout | undefined;

  private constructor(
    private readonly url: string,
    private readonly pool: pg.Pool,
    private readonly events: PostgresEvents,
    private readonly timeoutMs: number,
  ) {}

  /**
   * Connects, applies pending migrations and starts listening for changes. `timeoutMs` bounds the wait
   * for a connection and each query, on our side (GuardedKeyStore gives every call its deadline too).
   */
  static async open(url: string, events: PostgresEvents = { listener: () => undefined }, poolSize = 10, timeoutMs = 5000): Promise<PostgresKeyStore> {
    const pool = new pg.Pool({ connectionString: url, max: poolSize, connectionTimeoutMillis: timeoutMs, statement_timeout: Math.max(timeoutMs, 5000) });
    pool.on('error', () => undefined); // an idle client lost (database restart): the pool replaces it
    const store = new PostgresKeyStore(url, pool, events, timeoutMs);
    try {
      await migrate(pool);
      await store.listen();
    } catch (err) {
      await pool.end();
      throw err;
    }
    return store;
  }

  async findByDigest(digest: string): Promise<KeyRecord | undefined> {
    return this.one('select * from chatgate_keys where digest = $1', [digest]);
  }

  async get(id: string): Promise<KeyRecord | undefined> {
    return this.one('select * from chatgate_keys where id = $1', [id]);
  }

  async list(): Promise<KeyRecord[]> {
    const { rows } = await this.query<KeyRow>('select * from chatgate_keys order by created_at, id');
    return rows.map(toRecord);
  }

  async insert(record: KeyRecord): Promise<void> {
    await this.query(
      `insert into chatgate_keys (id, name, digest, prefix, created_at, revoked_at, expires_at, models, last_used_at, rpm, tpm, max_concurrent,
         requests_total, prompt_tokens_total, completion_tokens_total)
       values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`,
      [
        record.id,
        record.name,
        record.digest,
        record.prefix,
        record.createdAt,
        record.revokedAt,
        record.expiresAt,
        record.models,
        record.lastUsedAt,
        record.rateLimit.requestsPerMinute,
        record.rateLimit.tokensPerMinute,
        record.rateLimit.maxConcurrent,
        record.usage.requests,
        record.usage.promptTokens,
        record.usage.completionTokens,
      ],
    );
  }

  async update(id: string, changes: KeyChanges): Promise<KeyRecord | undefined> {
    const columns: Array<[string, unknown]> = [];
    if (changes.name !== undefined) columns.push(['name', changes.name]);
    if (changes.models !== undefined) columns.push(['models', changes.models]);
    if (changes.expiresAt !== undefined) columns.push(['expires_at', changes.expiresAt]);
    if (changes.rateLimit?.requestsPerMinute !== undefined) columns.push(['rpm', changes.rateLimit.requestsPerMinute]);
    if (changes.rateLimit?.tokensPerMinute !== undefined) columns.push(['tpm', changes.rateLimit.tokensPerMinute]);
    if (changes.rateLimit?.maxConcurrent !== undefined) columns.push(['max_concurrent', changes.rateLimit.maxConcurrent]);
    if (columns.length === 0) return this.get(id);
    const assignments = columns.map(([column], i) => `${column} = $${i + 2}`).join(', ');
    return this.one(`update chatgate_keys set ${assignments} where id = $1 returning *`, [id, ...columns.map(([, value]) => value)]);
  }

  async revoke(id: string, at: Date): Promise<KeyRecord | undefined> {
    return this.one('update chatgate_keys set revoked_at = coalesce(revoked_at, $2) where id = $1 returning *', [id, at]);
  }

  async rotate(id: string, digest: string, prefix: string): Promise<KeyRecord | undefined> {
    return this.one('update chatgate_keys set digest = $2, prefix = $3 where id = $1 returning *', [id, digest, prefix]);
  }

  async recordUse(uses: ReadonlyMap<string, KeyUse>): Promise<void> {
    if (uses.size === 0) return;
    const batch = [...uses.entries()];
    await this.query(
      `update chatgate_keys k set
         last_used_at = greatest(coalesce(k.last_used_at, u.at), u.at),
         requests_total = k.requests_total + u.requests,
         prompt_tokens_total = k.prompt_tokens_total + u.prompt,
         completion_tokens_total = k.completion_tokens_total + u.completion
       from unnest($1::text[], $2::timestamptz[], $3::bigint[], $4::bigint[], $5::bigint[]) as u(id, at, requests, prompt, completion)
       where k.id = u.id`,
      [
        batch.map(([id]) => id),
        batch.map(([, use]) => use.at),
        batch.map(([, use]) => use.requests),
        batch.map(([, use]) => use.promptTokens),
        batch.map(([, use]) => use.completionTokens),
      ],
    );
  }

  onChange(listener: (digests: string[] | undefined) => void): void {
    this.changes.on('change', listener);
  }

  async ping(): Promise<void> {
    await this.query('select 1');
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.reconnectTimer);
    this.changes.removeAllListeners();
    // A server that does not answer would hold these for ever: the process is stopping anyway.
    const gaveUp = new Promise<void>((resolve) => setTimeout(resolve, this.timeoutMs).unref());
    await Promise.race([Promise.all([this.listenerClient?.end().catch(() => undefined), this.pool.end().catch(() => undefined)]), gaveUp]);
  }

  private async one(sql: string, params: unknown[]): Promise<KeyRecord | undefined> {
    const { rows } = await this.query<KeyRow>(sql, params);
    return rows[0] ? toRecord(rows[0]) : undefined;
  }

  /**
   * One query on a pooled connection, bounded by `timeoutMs` from our side. A connection whose query
   * outlived it is destroyed, not returned to the pool: it is stuck behind a server that does not
   * answer, and would hold the next query too.
   */
  private async query<R extends pg.QueryResultRow = pg.QueryResultRow>(sql: string, params: unknown[] = []): Promise<pg.QueryResult<R>> {
    const client = await this.pool.connect();
    let timer: NodeJS.Timeout | undefined;
    let stuck = false;
    const running = client.query<R>(sql, params);
    try {
      return await Promise.race([
        running,
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => {
            stuck = true;
            reject(new StoreDeadlineExceeded(this.timeoutMs));
          }, this.timeoutMs);
        }),
      ]);
    } finally {
      clearTimeout(timer);
      if (stuck) running.catch(() => undefined);
      client.release(stuck ? new Error('query outlived its deadline') : undefined);
    }
  }

  private async listen(): Promise<void> {
    const client = new pg.Client({ connectionString: this.url, connectionTimeoutMillis: 5000, keepAlive: true });
    const lost = (error?: Error) => {
      if (this.listenerClient !== client || this.closed) return;
      this.listenerClient = undefined;
      client.end().catch(() => undefined);
      this.events.listener('lost', error);
      this.scheduleReconnect();
    };
    client.on('error', lost);
    client.on('end', () => lost());
    client.on('notification', (message) => {
      if (message.channel === CHANNEL && message.payload) this.changes.emit('change', [message.payload]);
    });
    try {
      await client.connect();
      await client.query(`listen ${CHANNEL}`);
    } catch (err) {
      await client.end().catch(() => undefined); // a client connected but not listening would stay open
      throw err;
    }
    if (this.closed) {
      await client.end().catch(() => undefined); // closed while this reconnect was under way
      throw new Error('key store closed');
    }
    this.listenerClient = client;
  }

  private scheduleReconnect(): void {
    const delay = RECONNECT_DELAYS_MS[Math.min(this.reconnectAttempt++, RECONNECT_DELAYS_MS.length - 1)];
    this.reconnectTimer = setTimeout(async () => {
      if (this.closed) return;
      try {
        await this.listen();
        this.reconnectAttempt = 0;
        this.events.listener('restored');
        // Whatever changed while nobody was listening: every cached key is suspect.
        this.changes.emit('change', undefined);
      } catch {
        if (!this.closed) this.scheduleReconnect();
      }
    }, delay);
    this.reconnectTimer.unref();
  }
}

async function migrate(pool: pg.Pool): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query('begin');
    await client.query('select pg_advisory_xact_lock($1)', [MIGRATION_LOCK]);
    await client.query('create table if not exists chatgate_schema_migrations (version integer primary key, applied_at timestamptz not null default now())');
    const { rows } = await client.query<{ version: number }>('select version from chatgate_schema_migrations');
    const applied = new Set(rows.map((row) => row.version));
    for (const migration of MIGRATIONS) {
      if (applied.has(migration.version)) continue;
      await client.query(migration.sql);
      await client.query('insert into chatgate_schema_migrations (version) values ($1)', [migration.version]);
    }
    await client.query('commit');
  } catch (err) {
    await client.query('rollback').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}

function toRecord(row: KeyRow): KeyRecord {
  return {
    id: row.id,
    name: row.name,
    digest: row.digest,
    prefix: row.prefix,
    createdAt: row.created_at.toISOString(),
    revokedAt: row.revoked_at?.toISOString() ?? null,
    expiresAt: row.expires_at?.toISOString() ?? null,
    models: row.models,
    lastUsedAt: row.last_used_at?.toISOString() ?? null,
    rateLimit: { requestsPerMinute: row.rpm, tokensPerMinute: row.tpm, maxConcurrent: row.max_concurrent },
    usage: { requests: Number(row.requests_total), promptTokens: Number(row.prompt_tokens_total), completionTokens: Number(row.completion_tokens_total) },
  };
}
