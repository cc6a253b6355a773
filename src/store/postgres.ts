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
import { EventEmitter } from 'node:events';
import pg from 'pg';
import { StoreDeadlineExceeded } from './guarded';
import {
  AccountNameTaken,
  type AccountChanges,
  type AccountRecord,
  type AuditEvent,
  type IdentityRecord,
  type KeyAuthRecord,
  type KeyChanges,
  type KeyRecord,
  type KeyUse,
  type MembershipRecord,
  type OneTimeToken,
  type PersonRecord,
  type SessionRecord,
  type Store,
  type UsageDay,
} from './types';

import { migrate } from './postgres-migrations';
import { ChangeFeed, type PostgresEvents } from './postgres-notify';

export type { PostgresEvents } from './postgres-notify';
import { toAccount, toAuthRecord, toIdentity, toMember, toPerson, toRecord, toSession, type AccountRow, type AuditRow, type IdentityRow, type KeyRow, type MemberRow, type PersonRow, type SessionRow, type TokenRow } from './postgres-rows';


/** The key columns the code reads: what authenticating needs (the usage figures live in chatgate_key_usage). */
const KEY_COLUMNS = ['id', 'name', 'digest', 'prefix', 'created_at', 'revoked_at', 'expires_at', 'models', 'endpoints', 'rpm', 'tpm', 'max_concurrent', 'account_id', 'created_by', 'tokens_per_day', 'tokens_per_month'];
/** A key row with its usage figures: `k` the key row (or a CTE returning KEY_COLUMNS), `u` its usage row if any. */
const WITH_USAGE = `select ${KEY_COLUMNS.map((column) => `k.${column}`).join(', ')},
  u.requests as requests_total, u.prompt_tokens as prompt_tokens_total, u.completion_tokens as completion_tokens_total, u.last_used_at`;

/** Expired counters are deleted at most this often by each process. */
const PRUNE_COUNTERS_EVERY_MS = 60_000;

/** A key row as KEY_COLUMNS reads it; the usage fields (null without a usage row) only where it is joined. */


export class PostgresKeyStore implements Store {
  private readonly changes = new EventEmitter();
  private readonly feed: ChangeFeed;
  private countersPrunedAt = 0;

  private constructor(
    url: string,
    private readonly pool: pg.Pool,
    events: PostgresEvents,
    private readonly timeoutMs: number,
  ) {
    this.feed = new ChangeFeed(url, events, (digests) => this.changes.emit('change', digests));
  }

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
      await store.feed.listen();
    } catch (err) {
      await pool.end();
      throw err;
    }
    return store;
  }

  /** The hot path's one index probe: the key row alone, never its usage. */
  async findByDigest(digest: string): Promise<KeyAuthRecord | undefined> {
    const { rows } = await this.query<KeyRow>(`select ${KEY_COLUMNS.join(', ')} from chatgate_keys where digest = $1`, [digest]);
    return rows[0] && toAuthRecord(rows[0]);
  }

  async get(id: string): Promise<KeyRecord | undefined> {
    return this.one(`${WITH_USAGE} from chatgate_keys k left join chatgate_key_usage u on u.key_id = k.id where k.id = $1`, [id]);
  }

  async list(accountId?: string): Promise<KeyRecord[]> {
    const from = 'from chatgate_keys k left join chatgate_key_usage u on u.key_id = k.id';
    const { rows } =
      accountId === undefined
        ? await this.query<KeyRow>(`${WITH_USAGE} ${from} order by k.created_at, k.id`)
        : await this.query<KeyRow>(`${WITH_USAGE} ${from} where k.account_id = $1 order by k.created_at, k.id`, [accountId]);
    return rows.map(toRecord);
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
    await this.query(
      `with k as (
         insert into chatgate_keys (id, name, digest, prefix, created_at, revoked_at, expires_at, models, rpm, tpm, max_concurrent,
           account_id, created_by, tokens_per_day, tokens_per_month, endpoints)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $10, $11, $12, $16, $17, $18, $19, $20)
         returning id
       )
       insert into chatgate_key_usage (key_id, requests, prompt_tokens, completion_tokens, last_used_at)
         select id, $13, $14, $15, $9 from k where $13::bigint <> 0 or $14::bigint <> 0 or $15::bigint <> 0 or $9::timestamptz is not null`,
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
        record.accountId,
        record.createdBy,
        record.quota.tokensPerDay,
        record.quota.tokensPerMonth,
        record.endpoints,
      ],
    );
  }

  async update(id: string, changes: KeyChanges): Promise<KeyRecord | undefined> {
    const columns: Array<[string, unknown]> = [];
    if (changes.name !== undefined) columns.push(['name', changes.name]);
    if (changes.models !== undefined) columns.push(['models', changes.models]);
    if (changes.endpoints !== undefined) columns.push(['endpoints', changes.endpoints]);
    if (changes.expiresAt !== undefined) columns.push(['expires_at', changes.expiresAt]);
    if (changes.rateLimit?.requestsPerMinute !== undefined) columns.push(['rpm', changes.rateLimit.requestsPerMinute]);
    if (changes.rateLimit?.tokensPerMinute !== undefined) columns.push(['tpm', changes.rateLimit.tokensPerMinute]);
    if (changes.rateLimit?.maxConcurrent !== undefined) columns.push(['max_concurrent', changes.rateLimit.maxConcurrent]);
    if (changes.quota?.tokensPerDay !== undefined) columns.push(['tokens_per_day', changes.quota.tokensPerDay]);
    if (changes.quota?.tokensPerMonth !== undefined) columns.push(['tokens_per_month', changes.quota.tokensPerMonth]);
    if (changes.createdBy !== undefined) columns.push(['created_by', changes.createdBy]);
    if (columns.length === 0) return this.get(id);
    const assignments = columns.map(([column], i) => `${column} = $${i + 2}`).join(', ');
    return this.changed(`update chatgate_keys set ${assignments} where id = $1`, [id, ...columns.map(([, value]) => value)]);
  }

  async revoke(id: string, at: Date): Promise<KeyRecord | undefined> {
    return this.changed('update chatgate_keys set revoked_at = coalesce(revoked_at, $2) where id = $1', [id, at]);
  }

  async rotate(id: string, digest: string, prefix: string): Promise<KeyRecord | undefined> {
    return this.changed('update chatgate_keys set digest = $2, prefix = $3 where id = $1', [id, digest, prefix]);
  }

  async recordUse(uses: readonly KeyUse[]): Promise<void> {
    if (uses.length === 0) return;
    const column = <T>(pick: (use: KeyUse) => T) => uses.map(pick);
    // One statement: the keys' totals and latest use (their usage rows: key rows are only read, to
    // skip ids of no key), and the daily rows. Rows are written in key order, so that two replicas
    // flushing the same keys at once wait for each other rather than deadlock.
    await this.query(
      `with u as (
         select * from unnest($1::text[], $2::text[], $3::date[], $4::timestamptz[], $5::bigint[], $6::bigint[], $7::bigint[])
           as u(key_id, account_id, date, at, requests, prompt, completion)
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
       )
       insert into chatgate_usage_daily as d (key_id, date, account_id, requests, prompt_tokens, completion_tokens)
       select key_id, date, account_id, sum(requests), sum(prompt), sum(completion) from u group by key_id, date, account_id order by key_id, date
       on conflict (key_id, date) do update set
         requests = d.requests + excluded.requests,
         prompt_tokens = d.prompt_tokens + excluded.prompt_tokens,
         completion_tokens = d.completion_tokens + excluded.completion_tokens`,
      [
        column((use) => use.keyId),
        column((use) => use.accountId),
        column((use) => use.date),
        column((use) => use.at),
        column((use) => use.requests),
        column((use) => use.promptTokens),
        column((use) => use.completionTokens),
      ],
    );
  }

  async createAccount(record: AccountRecord): Promise<void> {
    try {
      await this.query('insert into chatgate_accounts (id, name, created_at, tokens_per_day, tokens_per_month) values ($1, $2, $3, $4, $5)', [
        record.id,
        record.name,
        record.createdAt,
        record.quota.tokensPerDay,
        record.quota.tokensPerMonth,
      ]);
    } catch (err) {
      if ((err as { code?: string; constraint?: string }).code === '23505' && (err as { constraint?: string }).constraint === 'chatgate_accounts_name_key') throw new AccountNameTaken(record.name);
      throw err;
    }
  }

  async getAccount(id: string): Promise<AccountRecord | undefined> {
    const { rows } = await this.query<AccountRow>('select * from chatgate_accounts where id = $1', [id]);
    return rows[0] && toAccount(rows[0]);
  }

  async findAccountByName(name: string): Promise<AccountRecord | undefined> {
    const { rows } = await this.query<AccountRow>('select * from chatgate_accounts where name = $1', [name]);
    return rows[0] && toAccount(rows[0]);
  }

  async listAccounts(): Promise<AccountRecord[]> {
    const { rows } = await this.query<AccountRow>('select * from chatgate_accounts order by created_at, id');
    return rows.map(toAccount);
  }

  async updateAccount(id: string, changes: AccountChanges): Promise<AccountRecord | undefined> {
    const columns: Array<[string, unknown]> = [];
    if (changes.name !== undefined) columns.push(['name', changes.name]);
    if (changes.quota?.tokensPerDay !== undefined) columns.push(['tokens_per_day', changes.quota.tokensPerDay]);
    if (changes.quota?.tokensPerMonth !== undefined) columns.push(['tokens_per_month', changes.quota.tokensPerMonth]);
    if (columns.length === 0) return this.getAccount(id);
    const assignments = columns.map(([name], i) => `${name} = $${i + 2}`).join(', ');
    try {
      const { rows } = await this.query<AccountRow>(`update chatgate_accounts set ${assignments} where id = $1 returning *`, [id, ...columns.map(([, value]) => value)]);
      return rows[0] && toAccount(rows[0]);
    } catch (err) {
      if ((err as { code?: string }).code === '23505' && changes.name !== undefined) throw new AccountNameTaken(changes.name);
      throw err;
    }
  }

  async getPerson(email: string): Promise<PersonRecord | undefined> {
    const { rows } = await this.query<PersonRow>('select * from chatgate_people where email = $1', [email]);
    return rows[0] && toPerson(rows[0]);
  }

  async putPerson(record: PersonRecord): Promise<PersonRecord> {
    const { rows } = await this.query<PersonRow>(
      `insert into chatgate_people (email, admin, password_hash, created_at, password_with_oidc) values ($1, $2, $3, $4, coalesce($5, false))
       on conflict (email) do update set admin = excluded.admin, password_hash = coalesce(excluded.password_hash, chatgate_people.password_hash),
         password_with_oidc = coalesce($5, chatgate_people.password_with_oidc)
       returning *`,
      [record.email, record.admin, record.passwordHash, record.createdAt, record.passwordWithOidc ?? null],
    );
    return toPerson(rows[0]!);
  }

  async setPassword(email: string, passwordHash: string | null): Promise<PersonRecord | undefined> {
    // One statement: the new password and the end of every link that could set another.
    const { rows } = await this.query<PersonRow>(
      `with person as (update chatgate_people set password_hash = $2 where email = $1 returning *),
            voided as (delete from chatgate_tokens where kind = 'password' and email = $1)
       select * from person`,
      [email, passwordHash],
    );
    return rows[0] && toPerson(rows[0]);
  }

  async findIdentity(issuer: string, subject: string): Promise<IdentityRecord | undefined> {
    const { rows } = await this.query<IdentityRow>('select * from chatgate_identities where issuer = $1 and subject = $2', [issuer, subject]);
    return rows[0] && toIdentity(rows[0]);
  }

  async identitiesOf(email: string): Promise<IdentityRecord[]> {
    const { rows } = await this.query<IdentityRow>('select * from chatgate_identities where email = $1 order by created_at', [email]);
    return rows.map(toIdentity);
  }

  async bindIdentity(record: IdentityRecord): Promise<boolean> {
    // Both unique constraints (issuer + subject, issuer + email) decide: of two binds at once, one wins.
    const { rowCount } = await this.query('insert into chatgate_identities (issuer, subject, email, created_at) values ($1, $2, $3, $4) on conflict do nothing', [
      record.issuer,
      record.subject,
      record.email,
      record.createdAt,
    ]);
    return (rowCount ?? 0) > 0;
  }

  async putMember(record: MembershipRecord): Promise<MembershipRecord> {
    const { rows } = await this.query<MemberRow>(
      `insert into chatgate_members (account_id, email, role, added_at, added_by) values ($1, $2, $3, $4, $5)
       on conflict (account_id, email) do update set role = excluded.role
       returning *`,
      [record.accountId, record.email, record.role, record.addedAt, record.addedBy],
    );
    return toMember(rows[0]!);
  }

  async removeMember(accountId: string, email: string): Promise<boolean> {
    const { rowCount } = await this.query('delete from chatgate_members where account_id = $1 and email = $2', [accountId, email]);
    return (rowCount ?? 0) > 0;
  }

  async listMembers(accountId: string): Promise<MembershipRecord[]> {
    const { rows } = await this.query<MemberRow>('select * from chatgate_members where account_id = $1 order by added_at, email', [accountId]);
    return rows.map(toMember);
  }

  async membershipsOf(email: string): Promise<MembershipRecord[]> {
    const { rows } = await this.query<MemberRow>('select * from chatgate_members where email = $1 order by added_at, account_id', [email]);
    return rows.map(toMember);
  }

  async createSession(record: SessionRecord): Promise<void> {
    await this.query('delete from chatgate_sessions where expires_at < now()'); // ended ones go as new ones come
    await this.query('insert into chatgate_sessions (digest, email, account_id, via, created_at, last_seen_at, expires_at) values ($1, $2, $3, $4, $5, $6, $7)', [
      record.digest,
      record.email,
      record.accountId,
      record.via,
      record.createdAt,
      record.lastSeenAt,
      record.expiresAt,
    ]);
  }

  async findSession(digest: string): Promise<SessionRecord | undefined> {
    const { rows } = await this.query<SessionRow>('select * from chatgate_sessions where digest = $1', [digest]);
    return rows[0] && toSession(rows[0]);
  }

  async updateSession(digest: string, changes: { lastSeenAt?: string; accountId?: string | null }): Promise<void> {
    await this.query(
      `update chatgate_sessions set last_seen_at = coalesce($2, last_seen_at), account_id = case when $3::boolean then $4 else account_id end where digest = $1`,
      [digest, changes.lastSeenAt ?? null, changes.accountId !== undefined, changes.accountId ?? null],
    );
  }

  async deleteSession(digest: string): Promise<void> {
    await this.query('delete from chatgate_sessions where digest = $1', [digest]);
  }

  async deleteSessionsOf(email: string, exceptDigest?: string): Promise<number> {
    const { rowCount } = await this.query('delete from chatgate_sessions where email = $1 and digest is distinct from $2', [email, exceptDigest ?? null]);
    return rowCount ?? 0;
  }

  async createToken(token: OneTimeToken): Promise<void> {
    // One statement: the expired tokens and, for a set-password link, the person's older links go
    // as the new one comes (of two links made at once, both may stay: the first used voids the other).
    await this.query(
      `with gone as (delete from chatgate_tokens where expires_at < now() or (kind = 'password' and $2 = 'password' and email = $3))
       insert into chatgate_tokens (digest, kind, email, data, expires_at) values ($1, $2, $3, $4, $5)`,
      [token.digest, token.kind, token.email, token.data, token.expiresAt],
    );
  }

  async takeToken(digest: string, kind: OneTimeToken['kind'], now: Date): Promise<OneTimeToken | undefined> {
    // Deleted as it is read: of two uses at once, one gets it; a set-password link takes its siblings with it.
    const { rows } = await this.query<TokenRow>(
      `with taken as (delete from chatgate_tokens where digest = $1 and kind = $2 returning *),
            siblings as (delete from chatgate_tokens t using taken where taken.kind = 'password' and t.kind = 'password' and t.email = taken.email and t.digest <> taken.digest)
       select * from taken`,
      [digest, kind],
    );
    const row = rows[0];
    if (!row || row.expires_at <= now) return undefined;
    return { digest: row.digest, kind: row.kind as OneTimeToken['kind'], email: row.email, data: row.data, expiresAt: row.expires_at.toISOString() };
  }

  async bumpCounters(counters: ReadonlyArray<{ name: string; expiresAt: Date }>, now: Date): Promise<number[]> {
    if (counters.length === 0) return [];
    if (new Set(counters.map((c) => c.name)).size !== counters.length) throw new Error('bumpCounters: a counter is named twice');
    // Sorted, so that concurrent bumps of the same counters lock their rows in one order (no deadlock).
    const sorted = [...counters].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    const { rows } = await this.query<{ name: string; count: number }>(
      `insert into chatgate_counters as c (name, count, expires_at)
         select name, 1, expires_at from unnest($1::text[], $2::timestamptz[]) as t(name, expires_at)
       on conflict (name) do update set
         count = case when c.expires_at > $3 then c.count + 1 else 1 end,
         expires_at = case when c.expires_at > $3 then c.expires_at else excluded.expires_at end
       returning name, count`,
      [sorted.map((c) => c.name), sorted.map((c) => c.expiresAt), now],
    );
    if (Date.now() - this.countersPrunedAt > PRUNE_COUNTERS_EVERY_MS) {
      this.countersPrunedAt = Date.now();
      await this.query('delete from chatgate_counters where expires_at < $1', [now]);
    }
    const counts = new Map(rows.map((row) => [row.name, row.count]));
    return counters.map((c) => counts.get(c.name)!);
  }

  async clearCounters(names: readonly string[]): Promise<void> {
    if (names.length === 0) return;
    await this.query('delete from chatgate_counters where name = any($1::text[])', [names]);
  }

  async appendAudit(event: AuditEvent): Promise<void> {
    await this.query('insert into chatgate_audit (id, account_id, at, actor, action, target, client, details) values ($1, $2, $3, $4, $5, $6, $7, $8)', [
      event.id,
      event.accountId,
      event.at,
      event.actor,
      event.action,
      event.target,
      event.client,
      event.details,
    ]);
  }

  async listAudit(accountId: string | null, limit: number): Promise<AuditEvent[]> {
    const { rows } =
      accountId === null
        ? await this.query<AuditRow>('select * from chatgate_audit order by at desc, id desc limit $1', [limit])
        : await this.query<AuditRow>('select * from chatgate_audit where account_id = $1 order by at desc, id desc limit $2', [accountId, limit]);
    return rows.map((row) => ({ id: row.id, accountId: row.account_id, at: row.at.toISOString(), actor: row.actor, action: row.action, target: row.target, client: row.client, details: row.details }));
  }

  async usage(accountId: string, from: string, to: string): Promise<UsageDay[]> {
    const { rows } = await this.query<{ date: string; account_id: string; key_id: string; requests: string; prompt_tokens: string; completion_tokens: string }>(
      `select to_char(date, 'YYYY-MM-DD') as date, account_id, key_id, requests, prompt_tokens, completion_tokens
       from chatgate_usage_daily where account_id = $1 and date between $2 and $3 order by date, key_id`,
      [accountId, from, to],
    );
    return rows.map((row) => ({ date: row.date, accountId: row.account_id, keyId: row.key_id, requests: Number(row.requests), promptTokens: Number(row.prompt_tokens), completionTokens: Number(row.completion_tokens) }));
  }

  async addQuotaUsage(amounts: ReadonlyMap<string, number>): Promise<void> {
    if (amounts.size === 0) return;
    await this.query(
      `insert into chatgate_quota_usage as q (scope, tokens) select * from unnest($1::text[], $2::bigint[])
       on conflict (scope) do update set tokens = q.tokens + excluded.tokens, updated_at = now()`,
      [[...amounts.keys()], [...amounts.values()]],
    );
  }

  async quotaUsage(scopes: readonly string[]): Promise<Map<string, number>> {
    const totals = new Map(scopes.map((scope) => [scope, 0]));
    if (scopes.length === 0) return totals;
    const { rows } = await this.query<{ scope: string; tokens: string }>('select scope, tokens from chatgate_quota_usage where scope = any($1::text[])', [scopes]);
    for (const row of rows) totals.set(row.scope, Number(row.tokens));
    return totals;
  }

  onChange(listener: (digests: string[] | undefined) => void): void {
    this.changes.on('change', listener);
  }

  async ping(): Promise<void> {
    await this.query('select 1');
  }

  async close(): Promise<void> {
    this.changes.removeAllListeners();
    // A server that does not answer would hold these for ever: the process is stopping anyway.
    const gaveUp = new Promise<void>((resolve) => setTimeout(resolve, this.timeoutMs).unref());
    await Promise.race([Promise.all([this.feed.close(), this.pool.end().catch(() => undefined)]), gaveUp]);
  }

  private async one(sql: string, params: unknown[]): Promise<KeyRecord | undefined> {
    const { rows } = await this.query<KeyRow>(sql, params);
    return rows[0] ? toRecord(rows[0]) : undefined;
  }

  /** A change of one key row (`update ... where id = $1`, without returning), answered with the whole record. */
  private changed(update: string, params: unknown[]): Promise<KeyRecord | undefined> {
    return this.one(`with k as (${update} returning ${KEY_COLUMNS.join(', ')}) ${WITH_USAGE} from k left join chatgate_key_usage u on u.key_id = k.id`, params);
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
}
