/**
 * The account half of the store contract in memory, for unit tests of what sits above the store (the
 * real backends pass the same contract in test/store/contract.test.ts). Records are copied in and out,
 * as a real store's are.
 */
import { AccountNameTaken, type AccountChanges, type AccountRecord, type AccountStore, type AuditEvent, type MembershipRecord, type OneTimeToken, type PersonRecord, type SessionRecord, type UsageDay } from '../../src/store/types';

const copy = <T>(value: T): T => (value === undefined ? value : structuredClone(value));

export class MemoryAccountStore implements AccountStore {
  protected readonly accounts = new Map<string, AccountRecord>();
  protected readonly people = new Map<string, PersonRecord>();
  protected members: MembershipRecord[] = [];
  protected readonly sessions = new Map<string, SessionRecord>();
  protected readonly tokens = new Map<string, OneTimeToken>();
  protected readonly failures = new Map<string, { failures: number; since: Date }>();
  protected readonly audit: AuditEvent[] = [];
  readonly usageDays: UsageDay[] = [];
  protected readonly quota = new Map<string, number>();

  async createAccount(record: AccountRecord): Promise<void> {
    if ([...this.accounts.values()].some((a) => a.name === record.name)) throw new AccountNameTaken(record.name);
    this.accounts.set(record.id, copy(record));
  }
  async getAccount(id: string) {
    return copy(this.accounts.get(id));
  }
  async findAccountByName(name: string) {
    return copy([...this.accounts.values()].find((a) => a.name === name));
  }
  async listAccounts() {
    return [...this.accounts.values()].map(copy);
  }
  async updateAccount(id: string, changes: AccountChanges) {
    const account = this.accounts.get(id);
    if (!account) return undefined;
    if (changes.name !== undefined) account.name = changes.name;
    account.quota = { ...account.quota, ...changes.quota };
    return copy(account);
  }
  async getPerson(email: string) {
    return copy(this.people.get(email));
  }
  async putPerson(record: PersonRecord) {
    const existing = this.people.get(record.email);
    const person = existing ? { ...existing, admin: record.admin, passwordHash: record.passwordHash ?? existing.passwordHash } : copy(record);
    this.people.set(record.email, person);
    return copy(person);
  }
  async putMember(record: MembershipRecord) {
    const existing = this.members.find((m) => m.accountId === record.accountId && m.email === record.email);
    if (existing) existing.role = record.role;
    else this.members.push(copy(record));
    return copy(existing ?? record);
  }
  async removeMember(accountId: string, email: string) {
    const before = this.members.length;
    this.members = this.members.filter((m) => !(m.accountId === accountId && m.email === email));
    return this.members.length !== before;
  }
  async listMembers(accountId: string) {
    return this.members.filter((m) => m.accountId === accountId).map(copy);
  }
  async membershipsOf(email: string) {
    return this.members.filter((m) => m.email === email).map(copy);
  }
  async createSession(record: SessionRecord) {
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
  async createToken(token: OneTimeToken) {
    this.tokens.set(token.digest, copy(token));
  }
  async takeToken(digest: string, kind: OneTimeToken['kind'], now: Date) {
    const token = this.tokens.get(digest);
    if (!token || token.kind !== kind) return undefined;
    this.tokens.delete(digest);
    return token.expiresAt > now.toISOString() ? token : undefined;
  }
  async noteSignInFailure(email: string, now: Date, windowMs: number) {
    const seen = this.failures.get(email);
    const entry = seen && now.getTime() - seen.since.getTime() < windowMs ? { failures: seen.failures + 1, since: seen.since } : { failures: 1, since: now };
    this.failures.set(email, entry);
    return { ...entry };
  }
  async clearSignInFailures(email: string) {
    this.failures.delete(email);
  }
  async signInFailures(email: string, now: Date, windowMs: number) {
    const seen = this.failures.get(email);
    return seen && now.getTime() - seen.since.getTime() < windowMs ? { ...seen } : { failures: 0, since: now };
  }
  async appendAudit(event: AuditEvent) {
    this.audit.push(copy(event));
  }
  async listAudit(accountId: string | null, limit: number) {
    return this.audit
      .filter((e) => accountId === null || e.accountId === accountId)
      .slice(-limit)
      .reverse()
      .map(copy);
  }
  async usage(accountId: string, from: string, to: string) {
    return this.usageDays.filter((row) => row.accountId === accountId && row.date >= from && row.date <= to).map(copy);
  }
  async addQuotaUsage(amounts: ReadonlyMap<string, number>) {
    for (const [scope, tokens] of amounts) this.quota.set(scope, (this.quota.get(scope) ?? 0) + tokens);
  }
  async quotaUsage(scopes: readonly string[]) {
    return new Map(scopes.map((scope) => [scope, this.quota.get(scope) ?? 0]));
  }
}
