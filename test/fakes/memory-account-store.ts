/**
 * The account half of the store contract in memory, for unit tests of what sits above the store (the
 * real backends pass the same contract in test/store/contract.test.ts). Records are copied in and out,
 * as a real store's are.
 */
import { losesLastOwner } from './last-owner';
import { AccountNameTaken, ALERTS_KEPT_DAYS, DuplicateRecord, LastOwner, type AccountChanges, type AccountRecord, type AccountStore, type AlertRecord, type AuditEvent, type AuditFilter, type IdentityRecord, type MembershipRecord, type OneTimeToken, type PersonRecord, type Role, type SessionRecord, type UsageDay, type BreakdownQuery, type ServerSecret } from '../../src/store/types';
import { breakdownOf, pruneRows, type LedgerRow } from './usage-ledger';
import { accountChanged, auditKept, byCreation, newestFirst } from './account-changes';

const copy = <T>(value: T): T => (value === undefined ? value : structuredClone(value));

export class MemoryAccountStore implements AccountStore {
  protected readonly accounts = new Map<string, AccountRecord>();
  protected readonly people = new Map<string, PersonRecord>();
  protected members: MembershipRecord[] = [];
  protected readonly sessions = new Map<string, SessionRecord>();
  protected readonly tokens = new Map<string, OneTimeToken>();
  protected readonly counters = new Map<string, { count: number; expiresAt: Date }>();
  protected readonly identities: IdentityRecord[] = [];
  protected readonly audit: AuditEvent[] = [];
  readonly usageDays: UsageDay[] = [];
  readonly usageLedger: LedgerRow[] = [];
  protected readonly quota = new Map<string, number>();

  async createAccount(record: AccountRecord): Promise<void> {
    if ([...this.accounts.values()].some((a) => a.name === record.name)) throw new AccountNameTaken(record.name);
    if (this.accounts.has(record.id)) throw new DuplicateRecord('account', 'id');
    this.accounts.set(record.id, copy(record));
  }
  async getAccount(id: string) {
    return copy(this.accounts.get(id));
  }
  async findAccountByName(name: string) {
    return copy([...this.accounts.values()].find((a) => a.name === name));
  }
  async listAccounts(ids?: readonly string[]) {
    return [...this.accounts.values()]
      .filter((account) => ids === undefined || ids.includes(account.id))
      .sort(byCreation)
      .map(copy);
  }
  async updateAccount(id: string, changes: AccountChanges) {
    const account = this.accounts.get(id);
    if (!account) return undefined;
    if (changes.name !== undefined && [...this.accounts.values()].some((a) => a.name === changes.name && a.id !== id)) throw new AccountNameTaken(changes.name);
    const updated = accountChanged(account, changes);
    this.accounts.set(id, updated);
    return copy(updated);
  }
  async getPerson(email: string) {
    return copy(this.people.get(email));
  }
  async putPerson(record: PersonRecord) {
    const existing = this.people.get(record.email);
    const person = existing
      ? { ...existing, admin: record.admin, passwordHash: record.passwordHash ?? existing.passwordHash, ...(record.passwordWithOidc !== undefined ? { passwordWithOidc: record.passwordWithOidc } : {}) }
      : copy(record);
    this.people.set(record.email, person);
    return copy(person);
  }
  async setPassword(email: string, passwordHash: string | null) {
    const person = this.people.get(email);
    if (!person) return undefined;
    person.passwordHash = passwordHash;
    for (const [digest, token] of this.tokens) if (token.kind === 'password' && token.email === email) this.tokens.delete(digest);
    return copy(person);
  }
  async findIdentity(issuer: string, subject: string) {
    return copy(this.identities.find((i) => i.issuer === issuer && i.subject === subject));
  }
  async identitiesOf(email: string) {
    return this.identities
      .filter((i) => i.email === email)
      .sort((a, b) => order(a.createdAt, b.createdAt) || order(a.issuer, b.issuer))
      .map(copy);
  }
  async bindIdentity(record: IdentityRecord) {
    if (this.identities.some((i) => i.issuer === record.issuer && (i.subject === record.subject || i.email === record.email))) return false;
    this.identities.push(copy(record));
    return true;
  }
  async putMember(record: MembershipRecord, options: { keepOwner?: boolean } = {}) {
    if (options.keepOwner && record.role !== 'owner' && losesLastOwner(this.members, record.accountId, record.email)) throw new LastOwner(record.accountId, record.email);
    const existing = this.members.find((m) => m.accountId === record.accountId && m.email === record.email);
    if (existing) existing.role = record.role;
    else this.members.push(copy(record));
    return copy(existing ?? record);
  }
  async setMemberRole(accountId: string, email: string, role: Role, options: { keepOwner?: boolean } = {}) {
    if (options.keepOwner && role !== 'owner' && losesLastOwner(this.members, accountId, email)) throw new LastOwner(accountId, email);
    const existing = this.members.find((m) => m.accountId === accountId && m.email === email);
    if (!existing) return undefined;
    const from = existing.role;
    existing.role = role;
    return { member: copy(existing), from };
  }
  async removeMember(accountId: string, email: string, options: { keepOwner?: boolean } = {}) {
    if (options.keepOwner && losesLastOwner(this.members, accountId, email)) throw new LastOwner(accountId, email);
    const before = this.members.length;
    this.members = this.members.filter((m) => !(m.accountId === accountId && m.email === email));
    return this.members.length !== before;
  }
  async listMembers(accountId: string) {
    return this.members
      .filter((m) => m.accountId === accountId)
      .sort((a, b) => order(a.addedAt, b.addedAt) || order(a.email, b.email))
      .map(copy);
  }
  async membershipsOf(email: string) {
    return this.members
      .filter((m) => m.email === email)
      .sort((a, b) => order(a.addedAt, b.addedAt) || order(a.accountId, b.accountId))
      .map(copy);
  }
  async createSession(record: SessionRecord) {
    // Ended ones go as new ones come (before the digest is checked, as the SQL stores do it).
    for (const [digest, session] of this.sessions) if (session.expiresAt < new Date().toISOString()) this.sessions.delete(digest);
    if (this.sessions.has(record.digest)) throw new DuplicateRecord('session', 'digest');
    this.sessions.set(record.digest, copy(record));
  }
  async findSession(digest: string) {
    return copy(this.sessions.get(digest));
  }
  async updateSession(digest: string, changes: { lastSeenAt?: string; accountId?: string | null }) {
    const session = this.sessions.get(digest);
    if (session) Object.assign(session, Object.fromEntries(Object.entries(changes).filter(([, value]) => value !== undefined)));
  }
  async deleteSession(digest: string) {
    this.sessions.delete(digest);
  }
  async deleteSessionsOf(email: string, exceptDigest?: string) {
    let ended = 0;
    for (const [digest, session] of this.sessions) {
      if (session.email === email && digest !== exceptDigest) {
        this.sessions.delete(digest);
        ended++;
      }
    }
    return ended;
  }
  async createToken(token: OneTimeToken) {
    const now = new Date().toISOString();
    for (const [digest, other] of this.tokens) if (other.expiresAt < now || voidedBy(token, other)) this.tokens.delete(digest);
    if (this.tokens.has(token.digest)) throw new DuplicateRecord('token', 'digest');
    this.tokens.set(token.digest, copy(token));
  }
  async takeToken(digest: string, kind: OneTimeToken['kind'], now: Date) {
    const token = this.tokens.get(digest);
    if (!token || token.kind !== kind) return undefined;
    this.tokens.delete(digest);
    for (const [other, sibling] of this.tokens) if (voidedBy(token, sibling)) this.tokens.delete(other);
    return token.expiresAt > now.toISOString() ? token : undefined;
  }
  async findToken(digest: string, kind: OneTimeToken['kind'], now: Date) {
    const token = this.tokens.get(digest);
    return token && token.kind === kind && token.expiresAt > now.toISOString() ? copy(token) : undefined;
  }
  async bumpCounters(counters: ReadonlyArray<{ name: string; expiresAt: Date }>, now: Date) {
    return counters.map(({ name, expiresAt }) => {
      const seen = this.counters.get(name);
      const counter = seen && seen.expiresAt > now ? { count: seen.count + 1, expiresAt: seen.expiresAt } : { count: 1, expiresAt };
      this.counters.set(name, counter);
      return counter.count;
    });
  }
  async clearCounters(names: readonly string[]) {
    for (const name of names) this.counters.delete(name);
  }
  async appendAudit(event: AuditEvent) {
    if (this.audit.some((kept) => kept.id === event.id)) throw new DuplicateRecord('audit', 'id');
    this.audit.push(copy(event));
  }
  async listAudit(accountId: string | null, limit: number, filter: AuditFilter = {}) {
    return newestFirst(this.audit.filter((e) => auditKept(e, accountId, filter)))
      .slice(0, limit)
      .map(copy);
  }
  async usage(accountId: string, from: string, to: string) {
    return this.usageDays
      .filter((row) => row.accountId === accountId && row.date >= from && row.date <= to)
      .sort((a, b) => order(a.date, b.date) || order(a.keyId, b.keyId))
      .map(copy);
  }
  async usageBreakdown(accountId: string, from: string, to: string, query: BreakdownQuery) {
    return breakdownOf(this.usageLedger, accountId, from, to, query);
  }
  async pruneUsage(before: string, limit: number) {
    return pruneRows([this.usageLedger, this.usageDays], before, limit);
  }
  async addQuotaUsage(amounts: ReadonlyMap<string, number>) {
    for (const [scope, tokens] of amounts) this.quota.set(scope, (this.quota.get(scope) ?? 0) + tokens);
  }
  async quotaUsage(scopes: readonly string[]) {
    return new Map(scopes.map((scope) => [scope, this.quota.get(scope) ?? 0]));
  }

  private readonly alerts = new Map<string, AlertRecord & { claimedUntil: number }>();
  private readonly secrets = new Map<string, ServerSecret>();
  async getServerSecret(id: string) {
    const kept = this.secrets.get(id);
    return kept && { ...kept };
  }
  async putServerSecret(secret: ServerSecret) {
    if (!this.secrets.has(secret.id)) this.secrets.set(secret.id, { ...secret });
    return { ...this.secrets.get(secret.id)! };
  }
  async claimAlert(alert: AlertRecord, leaseMs: number, now: Date) {
    for (const [id, kept] of this.alerts) if (Date.parse(kept.at) < now.getTime() - ALERTS_KEPT_DAYS * 86_400_000) this.alerts.delete(id);
    const held = this.alerts.get(alert.id);
    if (held && (held.sentAt !== null || held.claimedUntil >= now.getTime())) return false;
    this.alerts.set(alert.id, { ...(held ?? alert), claimedUntil: now.getTime() + leaseMs });
    return true;
  }
  async alertSent(id: string, at: Date) {
    const held = this.alerts.get(id);
    if (held && held.sentAt === null) held.sentAt = at.toISOString();
  }
  async listUnsentAlerts(now: Date) {
    return [...this.alerts.values()]
      .filter((alert) => alert.sentAt === null && alert.claimedUntil < now.getTime())
      .sort((a, b) => order(a.at, b.at) || order(a.id, b.id))
      .map(({ claimedUntil: _claimedUntil, ...alert }) => ({ ...alert }))
      .slice(0, 100);
  }
  async listAlerts(accountId: string, since: Date) {
    return [...this.alerts.values()]
      .filter((alert) => alert.accountId === accountId && Date.parse(alert.at) >= since.getTime())
      .sort((a, b) => (a.at < b.at ? 1 : a.at > b.at ? -1 : a.id < b.id ? -1 : 1))
      .map(({ claimedUntil: _claimedUntil, ...alert }) => ({ ...alert }));
  }
}

const order = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/** A new set-password link voids the older ones for the same person (and a used one, its siblings). */
function voidedBy(token: OneTimeToken, other: OneTimeToken): boolean {
  return token.kind === 'password' && other.kind === 'password' && other.email !== null && other.email === token.email;
}
