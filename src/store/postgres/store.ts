/**
 * The shared key store: PostgreSQL through `pg`. The schema comes from versioned migrations applied
 * at start under an advisory lock, so replicas starting together apply each one once. Keys are stored
 * as digests only and looked up by digest on a unique index. A trigger NOTIFYs `chatgate_keys` with
 * the digest of every key that changes, whoever changed it, and every replica LISTENs, so a revoked
 * key leaves every cache at once. The listening connection answers a heartbeat every 5 s (a silent cut
 * is noticed within 10 s) and reconnects by itself; `changeFeedLive` says whether it is up, and while
 * it is down the cache's short TTL bounds how stale a replica can be; after it is back every cached
 * key is confirmed again. A start asks `hasKeys()` (limit 1), never lists. What keys used goes to
 * usage rows (chatgate_key_usage, chatgate_usage_daily), never to key rows: findByDigest, the hot
 * path, reads the key row alone.
 */
import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import pg from 'pg';
import type { ImportReport } from '../import-plan';
import { keyParams, toAuthRecord, toKey, usageParams, type KeyRow } from '../sql/rows';
import { columnsSet, KEY_UPDATES } from '../sql/updates';
import { addUse } from '../sql/usage';
import type { KeyAuthRecord, KeyChanges, KeyRecord, KeyUse, ServerSecret, Store } from '../types';
import { importFileIntoPostgres } from './import';
import { migrate } from './migrations';
import { ChangeFeed, type PostgresEvents } from './notify';
import { PostgresAccountStore } from './queries';
import { insertSql, KEY_COLUMNS, WITH_USAGE } from './rows';

export type { PostgresEvents } from './notify';

/** Recorded usage batch ids older than a day are deleted at most this often by each process. */
const BATCHES_PRUNE_EVERY_MS = 3_600_000;


export class PostgresKeyStore extends PostgresAccountStore implements Store {
  private readonly changes = new EventEmitter();
  private batchesPrunedAt = Date.now();
  private readonly feed: ChangeFeed;

  private constructor(url: string, pool: pg.Pool, events: PostgresEvents, timeoutMs: number) {
    super(pool, timeoutMs);
    this.feed = new ChangeFeed(url, events, (digests) => this.changes.emit('change', digests), (sql, params) => pool.query(sql, params));
  }

  /**
   * Connects, applies pending migrations and starts listening for changes. `timeoutMs` bounds the wait
   * for a connection and each query, on our side (GuardedKeyStore gives every call its deadline too).
   */
  static async open(url: string, events: PostgresEvents = { listener: () => undefined }, poolSize = 10, timeoutMs = 5000): Promise<PostgresKeyStore> {
    const pool = new pg.Pool({ connectionString: url, max: poolSize, connectionTimeoutMillis: timeoutMs, statement_timeout: Math.max(timeoutMs, 5000) });
    pool.on('error', () => undefined); // an idle client lost (database restart): the pool replaces it
    // A connection lost while checked out (a query under way when the network or the server dropped
    // it) emits 'error' on its client, which nothing else listens to then: unheard, it would end the
    // process. The query fails with it (503 and served stale), and the pool drops the client.
    pool.on('connect', (client) => client.on('error', () => undefined));
    const store = new PostgresKeyStore(url, pool, events, timeoutMs);
    try {
      await migrate(pool);
      await store.feed.listen();
    } catch (err) {
      await pool.end();
      throw err;
    }
    return store;
  }

  /** The hot path's one index probe: the key row alone, never its usage. */
  async findByDigest(digest: string): Promise<KeyAuthRecord | undefined> {
    // One round trip, also for a made-up key: the key's secret, or one a rotation replaced while the
    // key's secret is still the one that rotation made (the caller compares the grace's end).
    const { rows } = await this.query<KeyRow>(
      `select ${KEY_COLUMNS.join(', ')} from chatgate_keys where digest = $1 or (previous_digest = $1 and previous_for = digest) order by digest = $1 desc limit 1`,
      [digest],
    );
    const record = rows[0] && toAuthRecord(rows[0]);
    if (!record || record.digest === digest) return record;
    return record.previousKeyExpiresAt ? { ...record, previousKey: true } : undefined;
  }

  async get(id: string): Promise<KeyRecord | undefined> {
    return this.one(`${WITH_USAGE} from chatgate_keys k left join chatgate_key_usage u on u.key_id = k.id where k.id = $1`, [id]);
  }

  async listExpiring(from: Date, to: Date): Promise<KeyRecord[]> {
    const { rows } = await this.query<KeyRow>(
      `${WITH_USAGE} from chatgate_keys k left join chatgate_key_usage u on u.key_id = k.id where k.expires_at > $1 and k.expires_at <= $2 and k.revoked_at is null order by k.expires_at, k.id`,
      [from, to],
    );
    return rows.map(toKey);
  }

  async list(accountId?: string): Promise<KeyRecord[]> {
    const from = 'from chatgate_keys k left join chatgate_key_usage u on u.key_id = k.id';
    const { rows } =
      accountId === undefined
        ? await this.query<KeyRow>(`${WITH_USAGE} ${from} order by k.created_at, k.id`)
        : await this.query<KeyRow>(`${WITH_USAGE} ${from} where k.account_id = $1 order by k.created_at, k.id`, [accountId]);
    return rows.map(toKey);
  }

  async hasKeys(): Promise<boolean> {
    const { rows } = await this.query('select 1 from chatgate_keys limit 1');
    return rows.length > 0;
  }

  /** The LISTEN connection is up and answered its last heartbeat (a silent cut is noticed within HEARTBEAT_MS + HEARTBEAT_DEADLINE_MS). */
  get changeFeedLive(): boolean {
    return this.feed.live;
  }

  async insert(record: KeyRecord): Promise<void> {
    // One statement: the key row, and its usage row when it comes with usage (an imported key).
    const key = keyParams(record);
    const usage = usageParams(record);
    const values = Object.values(key);
    if (!usage) {
      await this.query(insertSql('chatgate_keys', key), values);
      return;
    }
    await this.query(`with k as (${insertSql('chatgate_keys', key)} returning id) ${insertSql('chatgate_key_usage', usage, values.length + 1)}`, [...values, ...Object.values(usage)]);
  }

  async update(id: string, changes: KeyChanges): Promise<KeyRecord | undefined> {
    const columns = columnsSet(KEY_UPDATES, changes);
    if (columns.length === 0) return this.get(id);
    const assignments = columns.map(([column], i) => `${column} = $${i + 2}`).join(', ');
    return this.changed(`update chatgate_keys set ${assignments} where id = $1`, [id, ...columns.map(([, value]) => value)]);
  }

  async revoke(id: string, at: Date): Promise<KeyRecord | undefined> {
    return this.changed('update chatgate_keys set revoked_at = coalesce(revoked_at, $2) where id = $1', [id, at]);
  }

  async rotate(id: string, digest: string, prefix: string, graceUntil?: Date): Promise<KeyRecord | undefined> {
    // The old secrets are the ones to forget here at once (the new one was never cached): the one
    // replaced, and one still in an earlier grace.
    const { rows } = await this.query<{ digest: string; previous_digest: string | null }>('select digest, previous_digest from chatgate_keys where id = $1', [id]);
    const record = await this.changed(
      'update chatgate_keys set previous_digest = case when $4::timestamptz is null then null else digest end, previous_until = $4, previous_for = $2, digest = $2, prefix = $3 where id = $1',
      [id, digest, prefix, graceUntil ?? null],
    );
    if (record && rows[0]) this.changes.emit('change', [rows[0].digest, ...(rows[0].previous_digest ? [rows[0].previous_digest] : [])]);
    return record;
  }

  async recordUse(uses: readonly KeyUse[], batch: string = randomUUID()): Promise<void> {
    if (uses.length === 0) return;
    const column = <T>(pick: (use: KeyUse) => T) => uses.map(pick);
    // One statement: the batch's id (nothing more when it is there already: this batch landed before),
    // the keys' totals and latest use (their usage rows: key rows are only read, to skip ids of no
    // key), the ledger's rows (by day, and by month) and the daily rows. Rows are written in key order, so that two replicas flushing the same
    // keys at once wait for each other rather than deadlock.
    await this.query(
      `with b as (
         insert into chatgate_usage_batches (id) values ($10) on conflict do nothing returning id
       ), u as (
         select * from unnest($1::text[], $2::text[], $3::date[], $4::timestamptz[], $5::bigint[], $6::bigint[], $7::bigint[], $8::bigint[], $9::bigint[], $11::text[], $12::text[])
           as u(key_id, account_id, date, at, requests, prompt, completion, refused, cost, model, end_user)
         where exists (select 1 from b)
       ), totals as (
         insert into chatgate_key_usage as t (key_id, requests, prompt_tokens, completion_tokens, last_used_at)
         select s.key_id, s.requests, s.prompt, s.completion, s.at
         from (select key_id, max(at) as at, sum(requests) as requests, sum(prompt) as prompt, sum(completion) as completion from u group by key_id) s
         where exists (select 1 from chatgate_keys k where k.id = s.key_id)
         order by s.key_id
         on conflict (key_id) do update set
           requests = t.requests + excluded.requests,
           prompt_tokens = t.prompt_tokens + excluded.prompt_tokens,
           completion_tokens = t.completion_tokens + excluded.completion_tokens,
           last_used_at = greatest(t.last_used_at, excluded.last_used_at)
       ), ledger as (
         insert into chatgate_usage_ledger as l (account_id, date, key_id, model, end_user, requests, refused, prompt_tokens, completion_tokens, cost_nanos)
         select account_id, date, key_id, model, end_user, sum(requests), sum(refused), sum(prompt), sum(completion), sum(cost)
         from u group by account_id, date, key_id, model, end_user
         having sum(requests) + sum(refused) + sum(prompt) + sum(completion) + sum(cost) > 0
         order by account_id, date, key_id, model, end_user
         on conflict (account_id, date, key_id, model, end_user) do update set ${addUse('l')}
       ), monthly as (
         insert into chatgate_usage_ledger_monthly as m (account_id, month, key_id, model, end_user, requests, refused, prompt_tokens, completion_tokens, cost_nanos)
         select account_id, date_trunc('month', date)::date, key_id, model, end_user, sum(requests), sum(refused), sum(prompt), sum(completion), sum(cost)
         from u group by 1, 2, 3, 4, 5
         having sum(requests) + sum(refused) + sum(prompt) + sum(completion) + sum(cost) > 0
         order by 1, 2, 3, 4, 5
         on conflict (account_id, month, key_id, model, end_user) do update set ${addUse('m')}
       )
       insert into chatgate_usage_daily as d (key_id, date, account_id, requests, prompt_tokens, completion_tokens, refused, cost_nanos)
       select key_id, date, account_id, sum(requests), sum(prompt), sum(completion), sum(refused), sum(cost) from u group by key_id, date, account_id order by key_id, date
       on conflict (key_id, date) do update set ${addUse('d')}`,
      [
        column((use) => use.keyId),
        column((use) => use.accountId),
        column((use) => use.date),
        column((use) => use.at),
        column((use) => use.requests),
        column((use) => use.promptTokens),
        column((use) => use.completionTokens),
        column((use) => use.refused),
        column((use) => use.costNanos),
        batch,
        column((use) => use.model),
        column((use) => use.endUser),
      ],
    );
    if (Date.now() - this.batchesPrunedAt > BATCHES_PRUNE_EVERY_MS) {
      // Not part of this call (its deadline is the usage's), and a bounded delete: a slow one must not
      // read as the store being away. What it leaves, the next one takes.
      this.batchesPrunedAt = Date.now();
      void this.query(`delete from chatgate_usage_batches where id in (select id from chatgate_usage_batches where at < now() - interval '1 day' limit 50000)`).catch(() => undefined);
    }
  }

  onChange(listener: (digests: string[] | undefined) => void): void {
    this.changes.on('change', listener);
  }

  async ping(): Promise<void> {
    await this.query('select 1');
  }

  async getServerSecret(id: string): Promise<ServerSecret | undefined> {
    const { rows } = await this.query<{ id: string; secret: string; created_at: Date }>('select * from chatgate_server_secrets where id = $1', [id]);
    return rows[0] && { id: rows[0].id, secret: rows[0].secret, createdAt: rows[0].created_at.toISOString() };
  }

  async putServerSecret(secret: ServerSecret): Promise<ServerSecret> {
    const { rows } = await this.query<{ id: string; secret: string; created_at: Date }>(
      'insert into chatgate_server_secrets (id, secret, created_at) values ($1, $2, $3) on conflict (id) do nothing returning *',
      [secret.id, secret.secret, secret.createdAt],
    );
    // Not inserted: another replica's is kept (read anew: the insert's snapshot may predate its commit).
    const kept = rows[0] ? { id: rows[0].id, secret: rows[0].secret, createdAt: rows[0].created_at.toISOString() } : await this.getServerSecret(secret.id);
    if (!kept) throw new Error(`server secret ${secret.id}: neither made nor found`);
    return kept;
  }

  /** `chatgate store import`: a file store's keys.json, every record kind, in one transaction. */
  importFile(file: string): Promise<ImportReport> {
    return importFileIntoPostgres(this.pool, file, this.timeoutMs);
  }

  async close(): Promise<void> {
    this.changes.removeAllListeners();
    // A server that does not answer would hold these for ever: the process is stopping anyway.
    const gaveUp = new Promise<void>((resolve) => setTimeout(resolve, this.timeoutMs).unref());
    await Promise.race([Promise.all([this.feed.close(), this.pool.end().catch(() => undefined)]), gaveUp]);
  }

  private async one(sql: string, params: unknown[]): Promise<KeyRecord | undefined> {
    const { rows } = await this.query<KeyRow>(sql, params);
    return rows[0] ? toKey(rows[0]) : undefined;
  }

  /** A change of one key row (`update ... where id = $1`, without returning), answered with the whole record. */
  private async changed(update: string, params: unknown[]): Promise<KeyRecord | undefined> {
    const { rows } = await this.query<KeyRow>(`with k as (${update} returning ${KEY_COLUMNS.join(', ')}) ${WITH_USAGE} from k left join chatgate_key_usage u on u.key_id = k.id`, params);
    const row = rows[0];
    // This process's own cache forgets the key at once, without waiting for the notification to come
    // back (it does not while the listening connection is down or reconnecting): by its secret, and
    // by the one a rotation's grace still lets work.
    if (row) this.changes.emit('change', row.previous_digest ? [row.digest, row.previous_digest] : [row.digest]);
    return row && toKey(row);
  }
}
