/**
 * The embedded store, the default: one SQLite file (default <dataDir>/chatgate.db) holding keys by digest, accounts, people and
 * their identities, members (members.ts), console sessions and one-time tokens (sessions.ts), counters, usage (usage.ts), quota counters,
 * alerts (alerts.ts) and the audit trail, each in its table with the indexes its lookups use; a key create is one insert,
 * whatever the number of keys. The gateway, the CLI and `server.processes` siblings share the file (database.ts;
 * checkpoints.ts); a key change made by any of them reaches the others' caches within POLL_MS (changes.ts).
 */
import { randomUUID } from 'node:crypto';
import type { AccountChanges, AccountRecord, AlertRecord, AuditEvent, AuditFilter, IdentityRecord, KeyAuthRecord, KeyChanges, KeyRecord, KeyUse, MembershipRecord, OneTimeToken, PersonRecord, Role, RoleChange, SessionRecord, Store, UsageDay, BreakdownQuery, UsageShare, ServerSecret } from '../types';
import { withAccountName } from '../errors';
import { SqliteAlerts } from './alerts';
import { ChangeFeed, type ChangeListener } from './changes';
import { SqliteMembers } from './members';
import { SqliteSessions } from './sessions';
import { SqliteUsage } from './usage';
import { SqliteDatabase } from './database';
import * as rows from './rows';
import * as statements from './statements';
import { daysBefore } from '../sql/rows';
import { ACCOUNT_UPDATES, columnsSet, KEY_UPDATES } from '../sql/updates';
import type { AccountRow, AuditRow, IdentityRow, KeyRow, PersonRow } from './rows';

/** Quota counters of days and months before this are dropped. */
const QUOTA_DAYS_KEPT = 62;
/** Expired sessions, tokens and counters, and used batch ids, are deleted at most this often by each process. */
const PRUNE_EVERY_MS = 60_000;

export class SqliteKeyStore implements Store {
  readonly sql: SqliteDatabase;
  private readonly feed: ChangeFeed;
  private readonly prunedAt = new Map<string, number>();
  private readonly sessions: SqliteSessions;
  private readonly members: SqliteMembers;
  private readonly alerts: SqliteAlerts;
  private readonly usageRows: SqliteUsage;

  /** Opens (and creates, and migrates) the file. `busyTimeoutMs`: how long a writer waits for another's lock. */
  constructor(file: string, busyTimeoutMs = 1000) {
    this.sql = new SqliteDatabase(file, busyTimeoutMs);
    this.feed = new ChangeFeed(this.sql.db);
    this.sessions = new SqliteSessions(this.sql);
    this.members = new SqliteMembers(this.sql);
    this.alerts = new SqliteAlerts(this.sql);
    this.usageRows = new SqliteUsage(this.sql);
  }

  /** Whether this open made the file's schema: a new store. */
  get created(): boolean {
    return this.sql.created;
  }

  /** The hot path's index probe: the key row alone, never its usage (as PostgreSQL's). */
  findByDigest(digest: string): Promise<KeyAuthRecord | undefined> {
    return this.sql.read(() => {
      const row = this.sql.get<KeyRow>('select * from chatgate_keys where digest = ?', digest);
      if (row) return rows.toAuthRecord(row);
      // A secret a rotation replaced, while its grace lasts (the caller compares the time).
      const earlier = this.sql.get<KeyRow>('select * from chatgate_keys where previous_digest = ? and previous_for = digest', digest);
      const record = earlier && rows.toAuthRecord(earlier);
      return record?.previousKeyExpiresAt ? { ...record, previousKey: true as const } : undefined;
    });
  }

  get(id: string): Promise<KeyRecord | undefined> {
    return this.sql.read(() => this.byId(id));
  }

  list(accountId?: string): Promise<KeyRecord[]> {
    return this.sql.read(() =>
      (accountId === undefined
        ? this.sql.all<KeyRow>(`${rows.KEY_SELECT} order by k.created_at, k.id`)
        : this.sql.all<KeyRow>(`${rows.KEY_SELECT} where k.account_id = ? order by k.created_at, k.id`, accountId)
      ).map(rows.toKey),
    );
  }

  /** Whether the store holds any key, without reading them (start-up's emptiness check). */
  listExpiring(from: Date, to: Date): Promise<KeyRecord[]> {
    return this.sql.read(() => this.sql.all<KeyRow>(`${rows.KEY_SELECT} where k.expires_at > ? and k.expires_at <= ? and k.revoked_at is null order by k.expires_at, k.id`, rows.instant(from), rows.instant(to)).map(rows.toKey));
  }

  hasKeys(): Promise<boolean> {
    return this.sql.read(() => this.sql.get('select 1 from chatgate_keys limit 1') !== undefined);
  }

  async insert(record: KeyRecord): Promise<void> {
    await this.changeKeys(() => {
      this.sql.run(rows.insertSql('insert', 'chatgate_keys', rows.KEY_COLUMNS), rows.keyParams(record));
      const usage = rows.usageParams(record);
      if (usage) this.sql.run(rows.insertSql('insert', 'chatgate_key_usage', rows.USAGE_COLUMNS), usage);
    });
  }

  update(id: string, changes: KeyChanges): Promise<KeyRecord | undefined> {
    // The lists as JSON text (the one thing SQLite writes otherwise).
    const columns = columnsSet(KEY_UPDATES, changes).map(([column, value]) => [column, Array.isArray(value) ? JSON.stringify(value) : value] as const);
    if (columns.length === 0) return this.get(id);
    const assignments = columns.map(([column]) => `${column} = ?`).join(', ');
    return this.changeKeys(() => this.changed(id, `update chatgate_keys set ${assignments} where id = ?`, ...columns.map(([, value]) => value), id));
  }

  revoke(id: string, at: Date): Promise<KeyRecord | undefined> {
    return this.changeKeys(() => this.changed(id, 'update chatgate_keys set revoked_at = coalesce(revoked_at, ?) where id = ?', rows.instant(at), id));
  }

  rotate(id: string, digest: string, prefix: string, graceUntil?: Date): Promise<KeyRecord | undefined> {
    const until = graceUntil ? rows.instant(graceUntil) : null;
    return this.changeKeys(() =>
      this.changed(id, 'update chatgate_keys set previous_digest = case when ? is null then null else digest end, previous_until = ?, previous_for = ?, digest = ?, prefix = ? where id = ?', until, until, digest, digest, prefix, id),
    );
  }

  /** A batch recorded before (sent again after a deadline of the caller's) adds nothing; a serving process writes it off the event loop. */
  async recordUse(uses: readonly KeyUse[], batch: string = randomUUID()): Promise<void> {
    if (uses.length === 0) return;
    const prune: Array<readonly [string, string[]]> = [];
    this.prune('usage', () => prune.push(['delete from chatgate_usage_batches where at < ?', [new Date(Date.now() - 86_400_000).toISOString()]]));
    await this.sql.writeOffLoop(['insert or ignore into chatgate_usage_batches (id, at) values (?, ?)', [batch, new Date().toISOString()]], [...this.usageRows.writes(uses), ...prune]);
  }

  async createAccount(record: AccountRecord): Promise<void> {
    try {
      await this.sql.write(() => this.sql.run(rows.insertSql('insert', 'chatgate_accounts', statements.ACCOUNT_COLUMNS), rows.accountParams(record)));
    } catch (err) {
      throw withAccountName(err, record.name);
    }
  }

  getAccount(id: string): Promise<AccountRecord | undefined> {
    return this.sql.read(() => this.account('select * from chatgate_accounts where id = ?', id));
  }

  findAccountByName(name: string): Promise<AccountRecord | undefined> {
    return this.sql.read(() => this.account('select * from chatgate_accounts where name = ?', name));
  }

  listAccounts(ids?: readonly string[]): Promise<AccountRecord[]> {
    return this.sql.read(() =>
      (ids === undefined
        ? this.sql.all<AccountRow>('select * from chatgate_accounts order by created_at, id')
        : this.sql.all<AccountRow>('select * from chatgate_accounts where id in (select value from json_each(?)) order by created_at, id', JSON.stringify(ids))
      ).map(rows.toAccount),
    );
  }

  async updateAccount(id: string, changes: AccountChanges): Promise<AccountRecord | undefined> {
    const columns = columnsSet(ACCOUNT_UPDATES, changes);
    if (columns.length === 0) return this.getAccount(id);
    const assignments = columns.map(([column]) => `${column} = ?`).join(', ');
    try {
      return await this.sql.write(() => this.account(`update chatgate_accounts set ${assignments} where id = ? returning *`, ...columns.map(([, value]) => value), id));
    } catch (err) {
      throw withAccountName(err, changes.name);
    }
  }

  getPerson(email: string): Promise<PersonRecord | undefined> {
    return this.sql.read(() => this.person('select * from chatgate_people where email = ?', email));
  }

  putPerson(record: PersonRecord): Promise<PersonRecord> {
    return this.sql.write(
      () =>
        this.person(
          `insert into chatgate_people (email, admin, password_hash, created_at, password_with_oidc) values (@email, @admin, @password_hash, @created_at, coalesce(@password_with_oidc, 0))
           on conflict (email) do update set admin = excluded.admin, password_hash = coalesce(excluded.password_hash, chatgate_people.password_hash),
             password_with_oidc = coalesce(@password_with_oidc, chatgate_people.password_with_oidc)
           returning *`,
          rows.personParams(record),
        )!,
    );
  }

  setPassword(email: string, passwordHash: string | null): Promise<PersonRecord | undefined> {
    // One step: the new password and the end of every link that could set another.
    return this.sql.write(() => {
      const person = this.person('update chatgate_people set password_hash = ? where email = ? returning *', passwordHash, email);
      if (person) this.sql.run("delete from chatgate_tokens where kind = 'password' and email = ?", email);
      return person;
    });
  }

  findIdentity(issuer: string, subject: string): Promise<IdentityRecord | undefined> {
    return this.sql.read(() => {
      const row = this.sql.get<IdentityRow>('select * from chatgate_identities where issuer = ? and subject = ?', issuer, subject);
      return row && rows.toIdentity(row);
    });
  }

  identitiesOf(email: string): Promise<IdentityRecord[]> {
    return this.sql.read(() => this.sql.all<IdentityRow>('select * from chatgate_identities where email = ? order by created_at, issuer', email).map(rows.toIdentity));
  }

  bindIdentity(record: IdentityRecord): Promise<boolean> {
    // Both unique constraints (issuer + subject, issuer + email) decide: of two binds at once, one wins.
    return this.sql.write(() => this.sql.run(rows.insertSql('insert or ignore', 'chatgate_identities', statements.IDENTITY_COLUMNS), rows.identityParams(record)).changes > 0);
  }

  putMember(record: MembershipRecord, options?: { keepOwner?: boolean }): Promise<MembershipRecord> {
    return this.members.put(record, options);
  }
  setMemberRole(accountId: string, email: string, role: Role, options?: { keepOwner?: boolean }): Promise<RoleChange | undefined> {
    return this.members.setRole(accountId, email, role, options);
  }
  removeMember(accountId: string, email: string, options?: { keepOwner?: boolean }): Promise<boolean> {
    return this.members.remove(accountId, email, options);
  }
  listMembers(accountId: string): Promise<MembershipRecord[]> {
    return this.members.list(accountId);
  }
  membershipsOf(email: string): Promise<MembershipRecord[]> {
    return this.members.membershipsOf(email);
  }

  createSession(record: SessionRecord): Promise<void> {
    return this.sessions.createSession(record);
  }
  findSession(digest: string): Promise<SessionRecord | undefined> {
    return this.sessions.findSession(digest);
  }
  updateSession(digest: string, changes: { lastSeenAt?: string; accountId?: string | null }): Promise<void> {
    return this.sessions.updateSession(digest, changes);
  }
  deleteSession(digest: string): Promise<void> {
    return this.sessions.deleteSession(digest);
  }
  deleteSessionsOf(email: string, exceptDigest?: string): Promise<number> {
    return this.sessions.deleteSessionsOf(email, exceptDigest);
  }
  createToken(token: OneTimeToken): Promise<void> {
    return this.sessions.createToken(token);
  }
  takeToken(digest: string, kind: OneTimeToken['kind'], now: Date): Promise<OneTimeToken | undefined> {
    return this.sessions.takeToken(digest, kind, now);
  }
  findToken(digest: string, kind: OneTimeToken['kind'], now: Date): Promise<OneTimeToken | undefined> {
    return this.sessions.findToken(digest, kind, now);
  }
  claimAlert(alert: AlertRecord, leaseMs: number, now: Date): Promise<boolean> {
    return this.alerts.claim(alert, leaseMs, now);
  }
  alertSent(id: string, at: Date): Promise<void> {
    return this.alerts.sent(id, at);
  }
  listAlerts(accountId: string, since: Date): Promise<AlertRecord[]> {
    return this.alerts.list(accountId, since);
  }
  listUnsentAlerts(now: Date): Promise<AlertRecord[]> {
    return this.alerts.unsent(now);
  }

  getServerSecret(id: string): Promise<ServerSecret | undefined> {
    return this.sql.read(() => this.sql.get<{ id: string; secret: string; created_at: string }>('select * from chatgate_server_secrets where id = ?', id)).then((row) => row && { id: row.id, secret: row.secret, createdAt: row.created_at });
  }
  putServerSecret(secret: ServerSecret): Promise<ServerSecret> {
    return this.sql.write(() => this.sql.run('insert into chatgate_server_secrets (id, secret, created_at) values (?, ?, ?) on conflict (id) do nothing', secret.id, secret.secret, secret.createdAt)).then(async () => (await this.getServerSecret(secret.id))!);
  }

  bumpCounters(counters: ReadonlyArray<{ name: string; expiresAt: Date }>, now: Date): Promise<number[]> {
    if (counters.length === 0) return Promise.resolve([]);
    const at = now.toISOString();
    return this.sql.write(() => {
      const counts = counters.map(
        ({ name, expiresAt }) =>
          this.sql.get<{ count: number }>(
            statements.BUMP_COUNTER,
            { name, expiresAt: expiresAt.toISOString(), now: at },
          )!.count,
      );
      this.prune('counters', () => this.sql.run('delete from chatgate_counters where expires_at <= ?', at));
      return counts;
    });
  }

  async clearCounters(names: readonly string[]): Promise<void> {
    if (names.length === 0) return;
    await this.sql.write(() => this.sql.run(`delete from chatgate_counters where name in (${names.map(() => '?').join(', ')})`, ...names));
  }

  async appendAudit(event: AuditEvent): Promise<void> {
    await this.sql.write(() => this.sql.run(rows.insertSql('insert', 'chatgate_audit', statements.AUDIT_COLUMNS), rows.auditParams(event)));
  }

  listAudit(accountId: string | null, limit: number, filter: AuditFilter = {}): Promise<AuditEvent[]> {
    const where = ['(@account is null or account_id = @account)', '(@action is null or action = @action)', '(@since is null or at >= @since)'].join(' and ');
    const params = { account: accountId, action: filter.action ?? null, since: filter.since === undefined ? null : rows.instant(filter.since), limit };
    return this.sql.read(() => this.sql.all<AuditRow>(`select * from chatgate_audit where ${where} order by at desc, seq desc limit @limit`, params).map(rows.toAudit));
  }

  usage(accountId: string, from: string, to: string): Promise<UsageDay[]> {
    return this.usageRows.days(accountId, from, to);
  }

  usageBreakdown(accountId: string, from: string, to: string, query: BreakdownQuery): Promise<UsageShare[]> {
    return this.usageRows.breakdown(accountId, from, to, query);
  }

  pruneUsage(before: string, limit: number): Promise<number> {
    return this.usageRows.prune(before, limit);
  }


  async addQuotaUsage(amounts: ReadonlyMap<string, number>): Promise<void> {
    if (amounts.size === 0) return;
    const batch = JSON.stringify(Array.from(amounts, ([scope, tokens]) => [scope, rows.periodOf(scope), tokens]));
    await this.sql.write(() => {
      this.sql.run(statements.ADD_QUOTA_USAGE, batch);
      // Counters of periods long gone are dropped: a scope ends with its day or month.
      const oldest = daysBefore(new Date(), QUOTA_DAYS_KEPT);
      this.prune('quota', () => this.sql.run('delete from chatgate_quota_usage where period < substr(?, 1, length(period))', oldest));
    });
  }

  /** One statement for every scope asked, on the event loop: 1.2-1.3 µs a scope (one select each took 2.9-3.6). */
  quotaUsage(scopes: readonly string[]): Promise<Map<string, number>> {
    if (scopes.length === 0) return Promise.resolve(new Map());
    const asked = JSON.stringify(scopes);
    return this.sql.read(() => {
      const totals = new Map(scopes.map((scope) => [scope, 0]));
      for (const row of this.sql.all<{ scope: string; tokens: number }>(statements.QUOTA_USAGE, asked)) totals.set(row.scope, row.tokens);
      return totals;
    });
  }

  /**
   * Every key change, whoever made it: this handle's at once, another connection's (the CLI, another
   * process) within POLL_MS.
   */
  onChange(listener: ChangeListener): void {
    this.feed.listen(listener);
  }

  /** True while the change feed polls and its polls answer (see changes.ts). */
  get changeFeedLive(): boolean {
    return this.feed.live;
  }

  async ping(): Promise<void> {
    await this.sql.read(() => this.sql.get('select 1 from chatgate_schema_migrations limit 1'));
  }

  async close(): Promise<void> {
    this.feed.close();
    await this.sql.close(); // and its checkpoint thread: nothing of this store touches the file after it
  }

  /** A change to keys, then the change log read at once, so this process's caches hear of it before the call returns. */
  private async changeKeys<T>(work: () => T): Promise<T> {
    const result = await this.sql.write(() => {
      this.feed.prune(Date.now());
      return work();
    });
    try {
      this.feed.read();
    } catch {
      // Read again at the next poll.
    }
    return result;
  }

  private byId(id: string): KeyRecord | undefined {
    return this.key(`${rows.KEY_SELECT} where k.id = ?`, id);
  }

  /** Runs an update of one key, then reads it back whole (undefined: no key has that id). */
  private changed(id: string, sql: string, ...params: unknown[]): KeyRecord | undefined {
    return this.sql.run(sql, ...params).changes > 0 ? this.byId(id) : undefined;
  }

  private key(sql: string, ...params: unknown[]): KeyRecord | undefined {
    const row = this.sql.get<KeyRow>(sql, ...params);
    return row && rows.toKey(row);
  }

  private account(sql: string, ...params: unknown[]): AccountRecord | undefined {
    const row = this.sql.get<AccountRow>(sql, ...params);
    return row && rows.toAccount(row);
  }

  private person(sql: string, ...params: unknown[]): PersonRecord | undefined {
    const row = this.sql.get<PersonRow>(sql, ...params);
    return row && rows.toPerson(row);
  }

  /** Runs a clean-up of expired or old rows at most once a PRUNE_EVERY_MS per kind, inside the caller's transaction. */
  private prune(kind: string, clean: () => void): void {
    const now = Date.now();
    if (now - (this.prunedAt.get(kind) ?? 0) < PRUNE_EVERY_MS) return;
    this.prunedAt.set(kind, now);
    clean();
  }
}
