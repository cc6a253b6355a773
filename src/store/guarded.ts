/**
 * Every call to the key store, with a deadline measured on our side and one verdict on the store's
 * health. A frozen database (a partition, a stuck primary) never answers, and its statement_timeout
 * is enforced by the very server that is frozen: only a timer of ours bounds a call. A call that
 * fails because the store cannot be reached (the deadline, a refused or broken connection, a server
 * shutting down) becomes 503 `key_store_unavailable`, whoever made it (the request path, the admin
 * API, the CLI); an error the store reports about the query itself passes through as it is.
 *
 * The first such failure after a success is reported once (`down`), and the first success after it
 * once (`up`): an outage is one log line and its end another, not a line per request. Only a call
 * begun after the last verdict can change it: a call sent before a freeze whose answer is read after
 * the freeze was noticed (an event loop held up, then its timers run before its sockets) does not end
 * the outage, and one sent during it that times out after the store came back does not begin another.
 * The key cache reads `reachable` to serve known keys without waiting while the store is away.
 */
import { errors, GatewayError } from '../errors';
import { DuplicateRecord } from './errors';
import type {
  AccountChanges,
  AccountRecord,
  AlertRecord,
  ServerSecret,
  AuditEvent,
  AuditFilter,
  IdentityRecord,
  KeyAuthRecord,
  KeyChanges,
  KeyRecord,
  KeyUse,
  MembershipRecord,
  RoleChange,
  OneTimeToken,
  PersonRecord,
  Role,
  SessionRecord,
  Store,
  UsageDay,
  BreakdownQuery,
  UsageShare,
} from './types';

export interface StoreHealthEvents {
  /** The store stopped answering; `cause` is the first failure (its message names no secret). */
  down(cause: unknown): void;
  /** The store answers again. */
  up(): void;
}

/** The store cannot be read at all (the key file is unreadable or not a key file): as good as away. */
export class StoreUnreadable extends Error {
  override name = 'StoreUnreadable';
}

/** A deadline of ours passed: the store may still do the work later, but nobody waits for it. */
export class StoreDeadlineExceeded extends Error {
  override name = 'StoreDeadlineExceeded';
  constructor(ms: number) {
    super(`the key store did not answer within ${ms} ms`);
  }
}

export class GuardedKeyStore implements Store {
  private up = true;
  /** Counts the verdicts: a call's outcome moves it only when no verdict came since the call began. */
  private verdicts = 0;

  constructor(
    private readonly inner: Store,
    private readonly timeoutMs: number,
    private readonly events: StoreHealthEvents = { down: () => undefined, up: () => undefined },
  ) {}

  /** False from a failure to reach the store until its next success. */
  get reachable(): boolean {
    return this.up;
  }

  /** Whether the inner store's change feed delivers every change now (no call: a property). */
  get changeFeedLive(): boolean {
    return this.inner.changeFeedLive;
  }

  findByDigest(digest: string): Promise<KeyAuthRecord | undefined> {
    return this.call(() => this.inner.findByDigest(digest));
  }
  hasKeys(): Promise<boolean> {
    return this.call(() => this.inner.hasKeys());
  }
  get(id: string): Promise<KeyRecord | undefined> {
    return this.call(() => this.inner.get(id));
  }
  list(accountId?: string): Promise<KeyRecord[]> {
    return this.call(() => this.inner.list(accountId));
  }
  insert(record: KeyRecord): Promise<void> {
    return this.call(() => this.inner.insert(record));
  }
  update(id: string, changes: KeyChanges): Promise<KeyRecord | undefined> {
    return this.call(() => this.inner.update(id, changes));
  }
  revoke(id: string, at: Date): Promise<KeyRecord | undefined> {
    return this.call(() => this.inner.revoke(id, at));
  }
  rotate(id: string, digest: string, prefix: string, graceUntil?: Date): Promise<KeyRecord | undefined> {
    return this.call(() => this.inner.rotate(id, digest, prefix, graceUntil));
  }
  // An empty batch asks the store nothing, so it is answered here and says nothing of the store's
  // health: a success that never reached a frozen database must not log that it answers again.
  recordUse(uses: readonly KeyUse[], batch?: string): Promise<void> {
    if (uses.length === 0) return Promise.resolve();
    return this.call(() => this.inner.recordUse(uses, batch));
  }
  createAccount(record: AccountRecord): Promise<void> {
    return this.call(() => this.inner.createAccount(record));
  }
  getAccount(id: string): Promise<AccountRecord | undefined> {
    return this.call(() => this.inner.getAccount(id));
  }
  findAccountByName(name: string): Promise<AccountRecord | undefined> {
    return this.call(() => this.inner.findAccountByName(name));
  }
  listAccounts(ids?: readonly string[]): Promise<AccountRecord[]> {
    if (ids?.length === 0) return Promise.resolve([]);
    return this.call(() => this.inner.listAccounts(ids));
  }
  updateAccount(id: string, changes: AccountChanges): Promise<AccountRecord | undefined> {
    return this.call(() => this.inner.updateAccount(id, changes));
  }
  getPerson(email: string): Promise<PersonRecord | undefined> {
    return this.call(() => this.inner.getPerson(email));
  }
  putPerson(record: PersonRecord): Promise<PersonRecord> {
    return this.call(() => this.inner.putPerson(record));
  }
  setPassword(email: string, passwordHash: string | null): Promise<PersonRecord | undefined> {
    return this.call(() => this.inner.setPassword(email, passwordHash));
  }
  findIdentity(issuer: string, subject: string): Promise<IdentityRecord | undefined> {
    return this.call(() => this.inner.findIdentity(issuer, subject));
  }
  identitiesOf(email: string): Promise<IdentityRecord[]> {
    return this.call(() => this.inner.identitiesOf(email));
  }
  bindIdentity(record: IdentityRecord): Promise<boolean> {
    return this.call(() => this.inner.bindIdentity(record));
  }
  putMember(record: MembershipRecord, options?: { keepOwner?: boolean }): Promise<MembershipRecord> {
    return this.call(() => this.inner.putMember(record, options));
  }
  setMemberRole(accountId: string, email: string, role: Role, options?: { keepOwner?: boolean }): Promise<RoleChange | undefined> {
    return this.call(() => this.inner.setMemberRole(accountId, email, role, options));
  }
  removeMember(accountId: string, email: string, options?: { keepOwner?: boolean }): Promise<boolean> {
    return this.call(() => this.inner.removeMember(accountId, email, options));
  }
  listMembers(accountId: string): Promise<MembershipRecord[]> {
    return this.call(() => this.inner.listMembers(accountId));
  }
  membershipsOf(email: string): Promise<MembershipRecord[]> {
    return this.call(() => this.inner.membershipsOf(email));
  }
  createSession(record: SessionRecord): Promise<void> {
    return this.call(() => this.inner.createSession(record));
  }
  findSession(digest: string): Promise<SessionRecord | undefined> {
    return this.call(() => this.inner.findSession(digest));
  }
  updateSession(digest: string, changes: { lastSeenAt?: string; accountId?: string | null }): Promise<void> {
    return this.call(() => this.inner.updateSession(digest, changes));
  }
  deleteSession(digest: string): Promise<void> {
    return this.call(() => this.inner.deleteSession(digest));
  }
  deleteSessionsOf(email: string, exceptDigest?: string): Promise<number> {
    return this.call(() => this.inner.deleteSessionsOf(email, exceptDigest));
  }
  createToken(token: OneTimeToken): Promise<void> {
    return this.call(() => this.inner.createToken(token));
  }
  takeToken(digest: string, kind: OneTimeToken['kind'], now: Date): Promise<OneTimeToken | undefined> {
    return this.call(() => this.inner.takeToken(digest, kind, now));
  }
  findToken(digest: string, kind: OneTimeToken['kind'], now: Date): Promise<OneTimeToken | undefined> {
    return this.call(() => this.inner.findToken(digest, kind, now));
  }
  bumpCounters(counters: ReadonlyArray<{ name: string; expiresAt: Date }>, now: Date): Promise<number[]> {
    if (counters.length === 0) return Promise.resolve([]);
    return this.call(() => this.inner.bumpCounters(counters, now));
  }
  clearCounters(names: readonly string[]): Promise<void> {
    if (names.length === 0) return Promise.resolve();
    return this.call(() => this.inner.clearCounters(names));
  }
  appendAudit(event: AuditEvent): Promise<void> {
    return this.call(() => this.inner.appendAudit(event));
  }
  listAudit(accountId: string | null, limit: number, filter?: AuditFilter): Promise<AuditEvent[]> {
    return this.call(() => this.inner.listAudit(accountId, limit, filter));
  }
  usage(accountId: string, from: string, to: string): Promise<UsageDay[]> {
    return this.call(() => this.inner.usage(accountId, from, to));
  }
  usageBreakdown(accountId: string, from: string, to: string, query: BreakdownQuery): Promise<UsageShare[]> {
    return this.call(() => this.inner.usageBreakdown(accountId, from, to, query));
  }
  pruneUsage(before: string, limit: number): Promise<number> {
    return this.call(() => this.inner.pruneUsage(before, limit));
  }
  addQuotaUsage(amounts: ReadonlyMap<string, number>): Promise<void> {
    if (amounts.size === 0) return Promise.resolve();
    return this.call(() => this.inner.addQuotaUsage(amounts));
  }
  quotaUsage(scopes: readonly string[]): Promise<Map<string, number>> {
    if (scopes.length === 0) return Promise.resolve(new Map());
    return this.call(() => this.inner.quotaUsage(scopes));
  }
  listExpiring(from: Date, to: Date): Promise<KeyRecord[]> {
    return this.call(() => this.inner.listExpiring(from, to));
  }
  claimAlert(alert: AlertRecord, leaseMs: number, now: Date): Promise<boolean> {
    return this.call(() => this.inner.claimAlert(alert, leaseMs, now));
  }
  alertSent(id: string, at: Date): Promise<void> {
    return this.call(() => this.inner.alertSent(id, at));
  }
  listAlerts(accountId: string, since: Date): Promise<AlertRecord[]> {
    return this.call(() => this.inner.listAlerts(accountId, since));
  }
  listUnsentAlerts(now: Date): Promise<AlertRecord[]> {
    return this.call(() => this.inner.listUnsentAlerts(now));
  }
  getServerSecret(id: string): Promise<ServerSecret | undefined> {
    return this.call(() => this.inner.getServerSecret(id));
  }
  putServerSecret(secret: ServerSecret): Promise<ServerSecret> {
    return this.call(() => this.inner.putServerSecret(secret));
  }
  onChange(listener: (digests: string[] | undefined) => void): void {
    this.inner.onChange(listener);
  }
  ping(): Promise<void> {
    return this.call(() => this.inner.ping());
  }
  close(): Promise<void> {
    return this.inner.close();
  }

  private async call<T>(operation: () => Promise<T>): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new StoreDeadlineExceeded(this.timeoutMs)), this.timeoutMs);
    });
    const begun = this.verdicts;
    const work = operation();
    try {
      const result = await Promise.race([work, deadline]);
      this.succeeded(begun);
      return result;
    } catch (err) {
      if (!isUnreachable(err)) {
        this.succeeded(begun); // the store answered, with an error about the call
        throw err;
      }
      work.catch(() => undefined); // settles after we gave up on it
      this.failed(begun, err);
      const unavailable = errors.keyStoreUnavailable();
      unavailable.cause = err;
      throw unavailable;
    } finally {
      clearTimeout(timer);
    }
  }

  private failed(begun: number, cause: unknown): void {
    if (!this.up || begun !== this.verdicts) return;
    this.up = false;
    this.verdicts++;
    this.events.down(cause);
  }

  private succeeded(begun: number): void {
    if (this.up || begun !== this.verdicts) return;
    this.up = true;
    this.verdicts++;
    this.events.up();
  }
}

/**
 * Pure: does this failure say the store cannot be reached (rather than that it refused the call)?
 * PostgreSQL's own errors carry a SQLSTATE; only its connection (08), resource (53) and operator
 * intervention (57: shutting down, cannot connect now) classes say the server is away or overloaded.
 * Node's network errors and our deadline always do. A failure the file store meets on the disk is
 * not a network failure: it passes through, and its caller answers 500.
 */
export function isUnreachable(err: unknown): boolean {
  if (err instanceof StoreDeadlineExceeded || err instanceof StoreUnreadable) return true;
  if (err instanceof GatewayError || err instanceof DuplicateRecord) return false;
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code !== 'string') {
    // pg reports a connection it lost, or one that timed out, without a code, as a plain Error. Only
    // a plain Error's text is read: our own errors (a duplicate's message holds the name a client
    // chose, e.g. an account named 'Connection terminated') never speak for the store's health.
    if (typeof err !== 'object' || err === null || Object.getPrototypeOf(err) !== Error.prototype) return false;
    const message = String((err as Error | null)?.message ?? '');
    return /Connection terminated|connection timeout|timeout exceeded when trying to connect|Client has encountered a connection error|Client was closed/i.test(message);
  }
  if (/^[0-9A-Z]{5}$/.test(code) && !code.startsWith('E')) return ['08', '53', '57'].includes(code.slice(0, 2));
  return NETWORK_ERRORS.has(code);
}

const NETWORK_ERRORS = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN', 'ECONNABORTED']);
