/**
 * The retired JSON file store, kept as a test fake: the third backend of the store contract, and the
 * writer of the keys.json files the import tests read (src/store/file-schema.ts reads them). One JSON
 * file (mode 0600) of everything a store holds, replaced atomically on every write; a reader re-reads
 * it when its size or time changes; changes by another process are announced within about a second.
 */
import { EventEmitter } from 'node:events';
import { promises as fs, unwatchFile, watchFile } from 'node:fs';
import { definedFields } from '../../src/common/defined-fields';
import { StoreUnreadable } from '../../src/store/guarded';
import { fileStamp, replaceFile, withLockFile } from './file-store-lock';
import { applyBatch, ChangeBatches, type BatchChange, type QueuedChange } from './file-store-batches';
import { withAudit, withCountersBumped, withIdentity, withMember, withMemberRole, withoutMember, withPassword, withPerson, withQuotaUsage, withSession, withToken, withTokenTaken, withUse } from './file-store-data';
import { accountChanged, auditKept, byCreation, newestFirst } from './account-changes';
import { addToLedger, breakdownOf, ledgerOf, pruneRows, type LedgerRow } from './usage-ledger';
import { MemoryAccountStore } from './memory-account-store';
import { byDateThenKey, daysBefore, emptyData, parseContents, type Data } from '../../src/store/file-schema';

export { removeStaleLock } from './file-store-lock';
export { parseContents, type Data } from '../../src/store/file-schema';
import { AccountNameTaken, DuplicateRecord, type AccountChanges, type AccountRecord, type AlertRecord, type AuditEvent, type AuditFilter, type IdentityRecord, type KeyChanges, type KeyRecord, type KeyUse, type MembershipRecord, type OneTimeToken, type PersonRecord, type Role, type RoleChange, type SessionRecord, type Store, type UsageDay, type BreakdownQuery, type UsageShare, type ServerSecret } from '../../src/store/types';

/** How often the file's stamp is polled for changes made by other processes. */
const WATCH_INTERVAL_MS = 1000;
/** Daily usage is kept this long; quota counters of days and months before it are dropped. */
const USAGE_DAYS_KEPT = 400;

interface Snapshot {
  stamp: string;
  data: Data;
  byDigest: Map<string, KeyRecord>;
}

type Change<T> = BatchChange<Data, T>;

/** Usage batch ids recorded, by file. */
const recordedBatches = new Map<string, Set<string>>();

export class FileKeyStore implements Store {
  private snapshot: Snapshot | undefined;
  private readonly changes = new EventEmitter();
  /** Changes queued while a write is under way go in the next one together. */
  private readonly batches = new ChangeBatches<Data>((batch) => this.writeBatch(batch));
  private watching = false;

  constructor(readonly file: string) {}

  async findByDigest(digest: string): Promise<KeyRecord | undefined> {
    return (await this.current()).byDigest.get(digest);
  }

  async get(id: string): Promise<KeyRecord | undefined> {
    return (await this.read()).keys.find((k) => k.id === id);
  }

  async list(accountId?: string): Promise<KeyRecord[]> {
    return (await this.read()).keys.filter((k) => accountId === undefined || k.accountId === accountId);
  }

  async listExpiring(from: Date, to: Date): Promise<KeyRecord[]> {
    return (await this.list())
      .filter((k) => !k.revokedAt && k.expiresAt !== null && Date.parse(k.expiresAt) > from.getTime() && Date.parse(k.expiresAt) <= to.getTime())
      .sort((a, b) => Date.parse(a.expiresAt!) - Date.parse(b.expiresAt!) || (a.id < b.id ? -1 : 1));
  }

  async hasKeys(): Promise<boolean> {
    return (await this.read()).keys.length > 0;
  }

  /** Changes of other processes are seen by the stamp poll, which onChange starts and close() stops. */
  get changeFeedLive(): boolean {
    return this.watching;
  }

  insert(record: KeyRecord): Promise<void> {
    return this.modify((data) => {
      if (data.keys.some((k) => k.id === record.id || k.digest === record.digest)) throw new DuplicateRecord('key', data.keys.some((k) => k.id === record.id) ? 'id' : 'digest');
      return { data: { ...data, keys: [...data.keys, record] }, result: undefined };
    });
  }

  update(id: string, changes: KeyChanges): Promise<KeyRecord | undefined> {
    const { rateLimit, quota, budget, ...fields } = changes;
    return this.changeKey(id, (k) => ({
      ...k,
      ...definedFields(fields),
      rateLimit: { ...k.rateLimit, ...definedFields(rateLimit) },
      quota: { ...k.quota, ...definedFields(quota) },
      budget: { ...k.budget, ...definedFields(budget) },
    }));
  }

  revoke(id: string, at: Date): Promise<KeyRecord | undefined> {
    return this.changeKey(id, (k) => (k.revokedAt ? k : { ...k, revokedAt: at.toISOString() }));
  }

  rotate(id: string, digest: string, prefix: string): Promise<KeyRecord | undefined> {
    return this.changeKey(id, (k) => ({ ...k, digest, prefix }));
  }

  async recordUse(uses: readonly KeyUse[], batch?: string): Promise<void> {
    if (uses.length === 0) return;
    // The batches recorded, kept by this process for the file (a fake: the SQL stores keep them in a table).
    const recorded = recordedBatches.get(this.file) ?? new Set<string>();
    recordedBatches.set(this.file, recorded);
    if (batch !== undefined && recorded.has(batch)) return;
    if (batch !== undefined) recorded.add(batch); // before the write: a second call meanwhile skips it
    try {
      await this.modify((data) => ({ data: withUse(data, uses, daysBefore(new Date(), USAGE_DAYS_KEPT)), result: undefined }));
      addToLedger(this.ledger(), uses);
    } catch (err) {
      if (batch !== undefined) recorded.delete(batch);
      throw err;
    }
  }

  async createAccount(record: AccountRecord): Promise<void> {
    await this.modify((data) => {
      if (data.accounts.some((a) => a.name === record.name)) throw new AccountNameTaken(record.name);
      if (data.accounts.some((a) => a.id === record.id)) throw new DuplicateRecord('account', 'id');
      return { data: { ...data, accounts: [...data.accounts, record] }, result: undefined };
    });
  }

  async getAccount(id: string): Promise<AccountRecord | undefined> {
    return (await this.read()).accounts.find((a) => a.id === id);
  }

  async findAccountByName(name: string): Promise<AccountRecord | undefined> {
    return (await this.read()).accounts.find((a) => a.name === name);
  }

  async listAccounts(ids?: readonly string[]): Promise<AccountRecord[]> {
    const accounts = (await this.read()).accounts;
    return (ids === undefined ? accounts : accounts.filter((account) => ids.includes(account.id))).sort(byCreation);
  }

  updateAccount(id: string, changes: AccountChanges): Promise<AccountRecord | undefined> {
    return this.modify((data) => {
      const existing = data.accounts.find((a) => a.id === id);
      if (!existing) return { data, result: undefined };
      if (changes.name !== undefined && data.accounts.some((a) => a.name === changes.name && a.id !== id)) throw new AccountNameTaken(changes.name);
      const updated = accountChanged(existing, changes);
      return { data: { ...data, accounts: data.accounts.map((a) => (a.id === id ? updated : a)) }, result: updated };
    });
  }

  async getPerson(email: string): Promise<PersonRecord | undefined> {
    return (await this.read()).people.find((p) => p.email === email);
  }

  putPerson(record: PersonRecord): Promise<PersonRecord> {
    return this.modify((data) => withPerson(data, record));
  }

  setPassword(email: string, passwordHash: string | null): Promise<PersonRecord | undefined> {
    return this.modify((data) => withPassword(data, email, passwordHash));
  }

  async findIdentity(issuer: string, subject: string): Promise<IdentityRecord | undefined> {
    return (await this.read()).identities.find((i) => i.issuer === issuer && i.subject === subject);
  }

  async identitiesOf(email: string): Promise<IdentityRecord[]> {
    return (await this.read()).identities.filter((i) => i.email === email).sort((a, b) => order(a.createdAt, b.createdAt) || order(a.issuer, b.issuer));
  }

  bindIdentity(record: IdentityRecord): Promise<boolean> {
    return this.modify((data) => withIdentity(data, record));
  }

  putMember(record: MembershipRecord, options: { keepOwner?: boolean } = {}): Promise<MembershipRecord> {
    return this.modify((data) => withMember(data, record, options));
  }

  setMemberRole(accountId: string, email: string, role: Role, options: { keepOwner?: boolean } = {}): Promise<RoleChange | undefined> {
    return this.modify((data) => withMemberRole(data, accountId, email, role, options));
  }

  removeMember(accountId: string, email: string, options: { keepOwner?: boolean } = {}): Promise<boolean> {
    return this.modify((data) => withoutMember(data, accountId, email, options));
  }

  async listMembers(accountId: string): Promise<MembershipRecord[]> {
    return (await this.read()).members.filter((m) => m.accountId === accountId).sort((a, b) => order(a.addedAt, b.addedAt) || order(a.email, b.email));
  }

  async membershipsOf(email: string): Promise<MembershipRecord[]> {
    return (await this.read()).members.filter((m) => m.email === email).sort((a, b) => order(a.addedAt, b.addedAt) || order(a.accountId, b.accountId));
  }

  async createSession(record: SessionRecord): Promise<void> {
    await this.modify((data) => withSession(data, record, new Date()));
  }

  async findSession(digest: string): Promise<SessionRecord | undefined> {
    return (await this.read()).sessions.find((s) => s.digest === digest);
  }

  async updateSession(digest: string, changes: { lastSeenAt?: string; accountId?: string | null }): Promise<void> {
    await this.modify((data) => ({
      data: { ...data, sessions: data.sessions.map((s) => (s.digest === digest ? { ...s, ...definedFields(changes) } : s)) },
      result: undefined,
    }));
  }

  async deleteSession(digest: string): Promise<void> {
    await this.modify((data) => ({ data: { ...data, sessions: data.sessions.filter((s) => s.digest !== digest) }, result: undefined }));
  }

  deleteSessionsOf(email: string, exceptDigest?: string): Promise<number> {
    return this.modify((data) => {
      const sessions = data.sessions.filter((s) => s.email !== email || s.digest === exceptDigest);
      return { data: { ...data, sessions }, result: data.sessions.length - sessions.length };
    });
  }

  async createToken(token: OneTimeToken): Promise<void> {
    await this.modify((data) => withToken(data, token, new Date()));
  }

  takeToken(digest: string, kind: OneTimeToken['kind'], now: Date): Promise<OneTimeToken | undefined> {
    return this.modify((data) => withTokenTaken(data, digest, kind, now));
  }

  async findToken(digest: string, kind: OneTimeToken['kind'], now: Date): Promise<OneTimeToken | undefined> {
    const token = (await this.read()).tokens.find((t) => t.digest === digest && t.kind === kind);
    return token && token.expiresAt > now.toISOString() ? token : undefined;
  }

  bumpCounters(counters: ReadonlyArray<{ name: string; expiresAt: Date }>, now: Date): Promise<number[]> {
    return this.modify((data) => withCountersBumped(data, counters, now));
  }

  async clearCounters(names: readonly string[]): Promise<void> {
    const data = await this.read();
    if (!data.counters.some((c) => names.includes(c.name))) return; // nothing to write
    await this.modify((latest) => ({ data: { ...latest, counters: latest.counters.filter((c) => !names.includes(c.name)) }, result: undefined }));
  }

  async appendAudit(event: AuditEvent): Promise<void> {
    await this.modify((data) => withAudit(data, event));
  }

  async listAudit(accountId: string | null, limit: number, filter: AuditFilter = {}): Promise<AuditEvent[]> {
    return newestFirst((await this.read()).audit.filter((e) => auditKept(e, accountId, filter))).slice(0, limit);
  }

  async usage(accountId: string, from: string, to: string): Promise<UsageDay[]> {
    return (await this.read()).usage.filter((row) => row.accountId === accountId && row.date >= from && row.date <= to).sort(byDateThenKey);
  }

  async usageBreakdown(accountId: string, from: string, to: string, query: BreakdownQuery): Promise<UsageShare[]> {
    return breakdownOf(this.ledger(), accountId, from, to, query);
  }

  async pruneUsage(before: string, limit: number): Promise<number> {
    const ledgerGone = pruneRows([this.ledger()], before, limit);
    return this.modify((data) => {
      const usage = [...data.usage];
      const gone = pruneRows([usage], before, limit - ledgerGone);
      return { data: { ...data, usage }, result: ledgerGone + gone };
    });
  }

  private ledger(): LedgerRow[] {
    return ledgerOf(this.file);
  }

  async addQuotaUsage(amounts: ReadonlyMap<string, number>): Promise<void> {
    if (amounts.size === 0) return;
    await this.modify((data) => ({ data: withQuotaUsage(data, amounts, daysBefore(new Date(), 62)), result: undefined }));
  }

  /** Alerts and server secrets: the retired file store never had them; this fake keeps them in this process, shared by the handles on one file. */
  claimAlert(alert: AlertRecord, leaseMs: number, now: Date): Promise<boolean> {
    return this.sharedHere.claimAlert(alert, leaseMs, now);
  }
  alertSent(id: string, at: Date): Promise<void> {
    return this.sharedHere.alertSent(id, at);
  }
  listAlerts(accountId: string, since: Date): Promise<AlertRecord[]> {
    return this.sharedHere.listAlerts(accountId, since);
  }
  listUnsentAlerts(now: Date): Promise<AlertRecord[]> {
    return this.sharedHere.listUnsentAlerts(now);
  }
  private static readonly shared = new Map<string, MemoryAccountStore>();
  private get sharedHere(): MemoryAccountStore {
    const here = FileKeyStore.shared.get(this.file) ?? new MemoryAccountStore();
    FileKeyStore.shared.set(this.file, here);
    return here;
  }
  getServerSecret(id: string): Promise<ServerSecret | undefined> {
    return this.sharedHere.getServerSecret(id);
  }
  putServerSecret(secret: ServerSecret): Promise<ServerSecret> {
    return this.sharedHere.putServerSecret(secret);
  }

  async quotaUsage(scopes: readonly string[]): Promise<Map<string, number>> {
    const counters = (await this.read()).quotaUsage;
    return new Map(scopes.map((scope) => [scope, counters[scope] ?? 0]));
  }

  /**
   * Changes this instance makes are announced at once; changes another process makes (the CLI, a
   * second gateway on the same file) are seen by polling the file's stamp every WATCH_INTERVAL_MS, and
   * announced with the digests of the records that differ: a key revoked with `chatgate keys revoke`
   * is refused by a running gateway within about a second.
   */
  onChange(listener: (digests: string[] | undefined) => void): void {
    this.changes.on('change', listener);
    if (this.watching) return;
    this.watching = true;
    let seen: Map<string, string> | undefined;
    const look = async () => {
      const snapshot = await this.current().catch(() => undefined);
      if (!snapshot) return;
      const now = new Map(snapshot.data.keys.map((k) => [k.digest, JSON.stringify(k)]));
      if (seen) {
        const changed = [...new Set([...now.keys(), ...seen.keys()])].filter((digest) => now.get(digest) !== seen!.get(digest));
        if (changed.length > 0) this.changes.emit('change', changed);
      }
      seen = now;
    };
    void look();
    watchFile(this.file, { interval: WATCH_INTERVAL_MS, persistent: false }, () => void look());
  }

  async ping(): Promise<void> {
    await this.current();
  }

  async close(): Promise<void> {
    if (this.watching) unwatchFile(this.file);
    this.watching = false;
    await this.batches.writing.catch(() => undefined);
    this.snapshot = undefined;
    this.changes.removeAllListeners();
  }

  private async read(): Promise<Data> {
    return (await this.current()).data;
  }

  private changeKey(id: string, apply: (record: KeyRecord) => KeyRecord): Promise<KeyRecord | undefined> {
    return this.modify((data) => {
      const existing = data.keys.find((k) => k.id === id);
      if (!existing) return { data, result: undefined };
      const updated = apply(existing);
      return { data: { ...data, keys: data.keys.map((k) => (k.id === id ? updated : k)) }, changed: [existing.digest], result: updated };
    });
  }

  /** A change, written with those queued beside it (file-batches.ts). */
  private modify<T>(apply: Change<T>): Promise<T> {
    return this.batches.add(apply);
  }

  /** One batch: under the lock, on the latest contents, one write; each change's outcome told after the lock is given back. */
  private async writeBatch(batch: ReadonlyArray<QueuedChange<Data>>): Promise<Array<() => void>> {
    // The lock file orders this read-change-replace against other instances and processes (the CLI,
    // the admin API, usage flushes), so no writer replaces the file with contents it read too early.
    return withLockFile(`${this.file}.lock`, async () => {
      this.snapshot = undefined;
      const { data, changed, outcomes } = applyBatch((await this.current()).data, batch);
      await this.write(data);
      // Written: whatever a listener does now, the batch's callers are told it went in (told it
      // failed, they would send it again, and a usage flush would be counted twice).
      try {
        if (changed.length > 0) this.changes.emit('change', changed);
      } catch {
        // a listener's own failure is not the write's
      }
      return outcomes;
    });
  }

  private async current(): Promise<Snapshot> {
    try {
      const stamp = await this.stamp();
      if (this.snapshot?.stamp === stamp) return this.snapshot;
      const data = stamp === 'absent' ? emptyData() : parseContents(await fs.readFile(this.file, 'utf8'), this.file);
      this.snapshot = { stamp, data, byDigest: new Map(data.keys.map((k) => [k.digest, k])) };
      return this.snapshot;
    } catch (err) {
      // Unreadable, or not a key file: nothing can be looked up until it is mended.
      throw new StoreUnreadable((err as Error).message, { cause: err });
    }
  }

  private async stamp(): Promise<string> {
    return fileStamp(this.file);
  }

  private async write(data: Data): Promise<void> {
    await replaceFile(this.file, { version: 2, ...data });
    this.snapshot = undefined;
  }
}

const order = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
