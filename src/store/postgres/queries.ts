/**
 * The PostgreSQL store's accounts half: accounts, people and their identities, members, sessions,
 * one-time tokens, counters, the audit trail, daily usage and quota counters (store.ts adds the
 * keys and the change feed). Every query has a deadline on our side.
 */
import type pg from 'pg';
import { postgresDuplicate, withAccountName } from '../errors';
import { StoreDeadlineExceeded } from '../guarded';
import { ledgerSpans, monthStart } from '../ledger-spans';
import {
  type BreakdownQuery,
  type UsageShare,
  ALERTS_KEPT_DAYS,
  type AccountChanges,
  type AccountRecord,
  type AlertRecord,
  type AuditEvent,
  type AuditFilter,
  type IdentityRecord,
  type MembershipRecord,
  type OneTimeToken,
  type PersonRecord,
  type Role,
  type RoleChange,
  type SessionRecord,
  type UsageDay,
} from '../types';
import {
  accountParams,
  auditParams,
  identityParams,
  instant,
  liveToken,
  maybeInstant,
  memberParams,
  sessionParams,
  toAccount,
  toAlert,
  toAudit,
  toIdentity,
  toMember,
  toPerson,
  toSession,
  tokenParams,
  type AccountRow,
  type AlertRow,
  type AuditRow,
  type IdentityRow,
  type MemberRow,
  type PersonRow,
  type SessionRow,
  type TokenRow,
} from '../sql/rows';
import { ACCOUNT_UPDATES, columnsSet } from '../sql/updates';
import { putMemberKeepingOwner, removeMemberKeepingOwner, setMemberRole } from './members';
import { queryWithin } from './query';
import { insertSql } from './rows';

/** Expired counters are deleted at most this often by each process. */
const PRUNE_COUNTERS_EVERY_MS = 60_000;

export class PostgresAccountStore {
  private countersPrunedAt = 0;
  private alertsPrunedAt = -Infinity;

  protected constructor(
    protected readonly pool: pg.Pool,
    protected readonly timeoutMs: number,
  ) {}

  async createAccount(record: AccountRecord): Promise<void> {
    try {
      const params = accountParams(record);
      await this.query(insertSql('chatgate_accounts', params), Object.values(params));
    } catch (err) {
      throw withAccountName(err, record.name);
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

  async listAccounts(ids?: readonly string[]): Promise<AccountRecord[]> {
    const { rows } =
      ids === undefined
        ? await this.query<AccountRow>('select * from chatgate_accounts order by created_at, id')
        : await this.query<AccountRow>('select * from chatgate_accounts where id = any($1::text[]) order by created_at, id', [ids]);
    return rows.map(toAccount);
  }

  async updateAccount(id: string, changes: AccountChanges): Promise<AccountRecord | undefined> {
    const columns = columnsSet(ACCOUNT_UPDATES, changes);
    if (columns.length === 0) return this.getAccount(id);
    const assignments = columns.map(([name], i) => `${name} = $${i + 2}`).join(', ');
    try {
      const { rows } = await this.query<AccountRow>(`update chatgate_accounts set ${assignments} where id = $1 returning *`, [id, ...columns.map(([, value]) => value)]);
      return rows[0] && toAccount(rows[0]);
    } catch (err) {
      throw withAccountName(err, changes.name);
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
      [record.email, record.admin, record.passwordHash, instant(record.createdAt), record.passwordWithOidc ?? null],
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
    const { rows } = await this.query<IdentityRow>('select * from chatgate_identities where email = $1 order by created_at, issuer', [email]);
    return rows.map(toIdentity);
  }

  async bindIdentity(record: IdentityRecord): Promise<boolean> {
    // Both unique constraints (issuer + subject, issuer + email) decide: of two binds at once, one wins.
    const params = identityParams(record);
    const { rowCount } = await this.query(`${insertSql('chatgate_identities', params)} on conflict do nothing`, Object.values(params));
    return (rowCount ?? 0) > 0;
  }

  async putMember(record: MembershipRecord, options: { keepOwner?: boolean } = {}): Promise<MembershipRecord> {
    if (options.keepOwner) return putMemberKeepingOwner(this.pool, this.timeoutMs, record);
    const params = memberParams(record);
    const { rows } = await this.query<MemberRow>(`${insertSql('chatgate_members', params)} on conflict (account_id, email) do update set role = excluded.role returning *`, Object.values(params));
    return toMember(rows[0]!);
  }

  setMemberRole(accountId: string, email: string, role: Role, options: { keepOwner?: boolean } = {}): Promise<RoleChange | undefined> {
    return setMemberRole(this.pool, this.timeoutMs, accountId, email, role, options.keepOwner ?? false);
  }

  async removeMember(accountId: string, email: string, options: { keepOwner?: boolean } = {}): Promise<boolean> {
    if (options.keepOwner) return removeMemberKeepingOwner(this.pool, this.timeoutMs, accountId, email);
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
    const params = sessionParams(record);
    await this.query(insertSql('chatgate_sessions', params), Object.values(params));
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
    const params = tokenParams(token); // $1 the digest, $2 the kind, $3 the email
    // One statement: the expired tokens and, for a set-password link, the person's older links go
    // as the new one comes (of two links made at once, both may stay: the first used voids the other).
    await this.query(
      `with gone as (delete from chatgate_tokens where expires_at < now() or (kind = 'password' and $2 = 'password' and email = $3))
       ${insertSql('chatgate_tokens', params)}`,
      Object.values(params),
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
    return liveToken(rows[0], now);
  }

  async findToken(digest: string, kind: OneTimeToken['kind'], now: Date): Promise<OneTimeToken | undefined> {
    const { rows } = await this.query<TokenRow>('select * from chatgate_tokens where digest = $1 and kind = $2', [digest, kind]);
    return liveToken(rows[0], now);
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
    const params = auditParams(event);
    await this.query(insertSql('chatgate_audit', params), Object.values(params));
  }

  async listAudit(accountId: string | null, limit: number, filter: AuditFilter = {}): Promise<AuditEvent[]> {
    const { rows } = await this.query<AuditRow>(
      `select * from chatgate_audit where ($1::text is null or account_id = $1) and ($3::text is null or action = $3) and ($4::timestamptz is null or at >= $4)
       order by at desc, id desc limit $2`,
      [accountId, limit, filter.action ?? null, maybeInstant(filter.since)],
    );
    return rows.map(toAudit);
  }

  async usage(accountId: string, from: string, to: string): Promise<UsageDay[]> {
    const { rows } = await this.query<{ date: string; account_id: string; key_id: string; requests: string; refused: string; cost_nanos: string; prompt_tokens: string; completion_tokens: string }>(
      `select to_char(date, 'YYYY-MM-DD') as date, account_id, key_id, requests, refused, cost_nanos, prompt_tokens, completion_tokens
       from chatgate_usage_daily where account_id = $1 and date between $2 and $3 order by date, key_id`,
      [accountId, from, to],
    );
    return rows.map((row) => ({ date: row.date, accountId: row.account_id, keyId: row.key_id, requests: Number(row.requests), refused: Number(row.refused), costNanos: Number(row.cost_nanos), promptTokens: Number(row.prompt_tokens), completionTokens: Number(row.completion_tokens) }));
  }

  async usageBreakdown(accountId: string, from: string, to: string, query: BreakdownQuery): Promise<UsageShare[]> {
    const group = query.by === 'model' ? 'model' : 'end_user';
    const spans = ledgerSpans(from, to, new Date().toISOString().slice(0, 10));
    // $1 the account, $2 the key or null, $3 the end user or null, $4 the months, then each range of days, then the limit.
    const filters = 'account_id = $1 and ($2::text is null or key_id = $2) and ($3::text is null or end_user = $3)';
    const dayRanges = spans.days.map((_, i) => `date between $${5 + 2 * i}::date and $${6 + 2 * i}::date`).join(' or ');
    const columns = `${group} as grp, requests, refused, cost_nanos, prompt_tokens, completion_tokens`;
    const { rows } = await this.query<{ grp: string; requests: string; refused: string; cost_nanos: string; prompt_tokens: string; completion_tokens: string }>(
      `select grp, sum(requests) as requests, sum(refused) as refused, sum(cost_nanos) as cost_nanos, sum(prompt_tokens) as prompt_tokens, sum(completion_tokens) as completion_tokens
       from (
         select ${columns} from chatgate_usage_ledger_monthly where ${filters} and month = any($4::date[])
         ${dayRanges ? `union all select ${columns} from chatgate_usage_ledger where ${filters} and (${dayRanges})` : ''}
       ) used
       group by grp order by 4 desc, sum(prompt_tokens + completion_tokens) desc, 2 desc, 1 limit $${5 + 2 * spans.days.length}`,
      [accountId, query.keyId ?? null, query.endUser ?? null, spans.months, ...spans.days.flatMap((span) => [span.from, span.to]), query.limit],
    );
    return rows.map((row) => ({ group: row.grp, requests: Number(row.requests), refused: Number(row.refused), costNanos: Number(row.cost_nanos), promptTokens: Number(row.prompt_tokens), completionTokens: Number(row.completion_tokens) }));
  }

  async pruneUsage(before: string, limit: number): Promise<number> {
    let deleted = 0;
    // Whole months only: a month's sums stay those of its days.
    for (const [table, column] of [['chatgate_usage_ledger', 'date'], ['chatgate_usage_daily', 'date'], ['chatgate_usage_ledger_monthly', 'month']] as const) {
      const { rowCount } = await this.query(`delete from ${table} where ctid in (select ctid from ${table} where ${column} < $1 limit $2)`, [monthStart(before), limit - deleted]);
      deleted += rowCount ?? 0;
      if (deleted >= limit) break;
    }
    return deleted;
  }

  async addQuotaUsage(amounts: ReadonlyMap<string, number>): Promise<void> {
    if (amounts.size === 0) return;
    await this.query(
      `insert into chatgate_quota_usage as q (scope, tokens) select * from unnest($1::text[], $2::bigint[])
       on conflict (scope) do update set tokens = q.tokens + excluded.tokens, updated_at = now()`,
      [[...amounts.keys()], [...amounts.values()]],
    );
  }

  async claimAlert(alert: AlertRecord, leaseMs: number, now: Date): Promise<boolean> {
    if (now.getTime() - this.alertsPrunedAt >= PRUNE_COUNTERS_EVERY_MS) {
      this.alertsPrunedAt = now.getTime();
      await this.query('delete from chatgate_alerts where at < $1', [new Date(now.getTime() - ALERTS_KEPT_DAYS * 86_400_000)]);
    }
    const { rowCount } = await this.query(
      `insert into chatgate_alerts as a (id, account_id, key_id, kind, period, period_start, threshold, spent, lim, at, claimed_until)
       values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
       on conflict (id) do update set claimed_until = excluded.claimed_until where a.sent_at is null and a.claimed_until < $12`,
      [alert.id, alert.accountId, alert.keyId, alert.kind, alert.period, alert.periodStart, alert.threshold, alert.spent, alert.limit, alert.at, new Date(now.getTime() + leaseMs), now],
    );
    return (rowCount ?? 0) > 0;
  }

  async alertSent(id: string, at: Date): Promise<void> {
    await this.query('update chatgate_alerts set sent_at = coalesce(sent_at, $2) where id = $1', [id, at]);
  }

  async listAlerts(accountId: string, since: Date): Promise<AlertRecord[]> {
    const { rows } = await this.query<AlertRow>('select * from chatgate_alerts where account_id = $1 and at >= $2 order by at desc, id', [accountId, since]);
    return rows.map(toAlert);
  }

  async listUnsentAlerts(now: Date): Promise<AlertRecord[]> {
    const { rows } = await this.query<AlertRow>('select * from chatgate_alerts where sent_at is null and claimed_until < $1 order by at, id limit 100', [now]);
    return rows.map(toAlert);
  }

  async quotaUsage(scopes: readonly string[]): Promise<Map<string, number>> {
    const totals = new Map(scopes.map((scope) => [scope, 0]));
    if (scopes.length === 0) return totals;
    const { rows } = await this.query<{ scope: string; tokens: string }>('select scope, tokens from chatgate_quota_usage where scope = any($1::text[])', [scopes]);
    for (const row of rows) totals.set(row.scope, Number(row.tokens));
    return totals;
  }

  /**
   * One query on a pooled connection, bounded by `timeoutMs` from our side. A connection whose query
   * outlived it is destroyed, not returned to the pool: it is stuck behind a server that does not
   * answer, and would hold the next query too. A unique value taken is DuplicateRecord, as on every backend.
   */
  protected async query<R extends pg.QueryResultRow = pg.QueryResultRow>(sql: string, params: unknown[] = []): Promise<pg.QueryResult<R>> {
    const client = await this.pool.connect();
    let stuck = false;
    try {
      return await queryWithin<R>(client, sql, params, this.timeoutMs);
    } catch (err) {
      stuck = err instanceof StoreDeadlineExceeded;
      throw postgresDuplicate(err) ?? err;
    } finally {
      client.release(stuck ? new Error('query outlived its deadline') : undefined);
    }
  }
}
