/**
 * The embedded store: one JSON file (mode 0600) of key digests, accounts, members, console sessions,
 * one-time tokens, daily usage, quota counters and the audit trail, replaced atomically on every
 * write. The gateway and the `chatgate` CLI share the file; a reader re-reads it when its size or
 * modification time changes. Key changes made through this instance are announced at once, changes
 * made by another process within about a second (onChange). Made for one host: shared mode is
 * PostgreSQL.
 */
import { EventEmitter } from 'node:events';
import { randomBytes } from 'node:crypto';
import { promises as fs, unwatchFile, watchFile } from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { definedFields } from '../common/defined-fields';
import { DEFAULT_ACCOUNT_ID } from './default-account';
import { StoreUnreadable } from './guarded';
import {
  AccountNameTaken,
  DEFAULT_ACCOUNT_NAME,
  NO_QUOTA,
  type AccountChanges,
  type AccountRecord,
  type AuditEvent,
  type IdentityRecord,
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

/** How often the file's stamp is polled for changes made by other processes. */
const WATCH_INTERVAL_MS = 1000;
/** Daily usage is kept this long; quota counters of days and months before it are dropped. */
const USAGE_DAYS_KEPT = 400;

/** Everything a key file holds (parseContents reads it; the SQLite store's import takes it). */
export interface Data {
  keys: KeyRecord[];
  accounts: AccountRecord[];
  people: PersonRecord[];
  members: MembershipRecord[];
  sessions: SessionRecord[];
  tokens: OneTimeToken[];
  identities: IdentityRecord[];
  /** Short-lived counters (sign-in attempts), each gone after its expiry. */
  counters: Array<{ name: string; count: number; expiresAt: string }>;
  audit: AuditEvent[];
  usage: UsageDay[];
  quotaUsage: Record<string, number>;
}

interface Snapshot {
  stamp: string;
  data: Data;
  byDigest: Map<string, KeyRecord>;
}

/** A change of the data: what to write, and the digests of keys it changed (for caches). */
type Change<T> = (data: Data) => { data: Data; changed?: string[]; result: T };

export class FileKeyStore implements Store {
  private snapshot: Snapshot | undefined;
  private readonly changes = new EventEmitter();
  /** Writes one at a time, each on the latest contents. */
  private writing: Promise<unknown> = Promise.resolve();
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

  async hasKeys(): Promise<boolean> {
    return (await this.read()).keys.length > 0;
  }

  /** Changes of other processes are seen by the stamp poll, which onChange starts and close() stops. */
  get changeFeedLive(): boolean {
    return this.watching;
  }

  insert(record: KeyRecord): Promise<void> {
    return this.modify((data) => {
      if (data.keys.some((k) => k.id === record.id || k.digest === record.digest)) {
        throw new Error(`key store already holds a key with id ${record.id}`);
      }
      return { data: { ...data, keys: [...data.keys, record] }, result: undefined };
    });
  }

  update(id: string, changes: KeyChanges): Promise<KeyRecord | undefined> {
    const { rateLimit, quota, ...fields } = changes;
    return this.changeKey(id, (k) => ({
      ...k,
      ...definedFields(fields),
      rateLimit: { ...k.rateLimit, ...definedFields(rateLimit) },
      quota: { ...k.quota, ...definedFields(quota) },
    }));
  }

  revoke(id: string, at: Date): Promise<KeyRecord | undefined> {
    return this.changeKey(id, (k) => (k.revokedAt ? k : { ...k, revokedAt: at.toISOString() }));
  }

  rotate(id: string, digest: string, prefix: string): Promise<KeyRecord | undefined> {
    return this.changeKey(id, (k) => ({ ...k, digest, prefix }));
  }

  async recordUse(uses: readonly KeyUse[]): Promise<void> {
    if (uses.length === 0) return;
    await this.modify((data) => {
      const byKey = new Map<string, KeyUse[]>();
      for (const use of uses) byKey.set(use.keyId, [...(byKey.get(use.keyId) ?? []), use]);
      const keys = data.keys.map((k) => {
        const mine = byKey.get(k.id);
        if (!mine) return k;
        const latest = mine.reduce((at, use) => (use.at.toISOString() > at ? use.at.toISOString() : at), k.lastUsedAt ?? '');
        return {
          ...k,
          lastUsedAt: latest || null,
          usage: {
            requests: k.usage.requests + sum(mine, 'requests'),
            promptTokens: k.usage.promptTokens + sum(mine, 'promptTokens'),
            completionTokens: k.usage.completionTokens + sum(mine, 'completionTokens'),
          },
        };
      });
      const usage = [...data.usage];
      for (const use of uses) {
        const day = usage.find((row) => row.keyId === use.keyId && row.date === use.date);
        if (day) {
          day.requests += use.requests;
          day.promptTokens += use.promptTokens;
          day.completionTokens += use.completionTokens;
        } else {
          usage.push({ date: use.date, accountId: use.accountId, keyId: use.keyId, requests: use.requests, promptTokens: use.promptTokens, completionTokens: use.completionTokens });
        }
      }
      const oldest = daysBefore(new Date(), USAGE_DAYS_KEPT);
      return { data: { ...data, keys, usage: usage.filter((row) => row.date >= oldest) }, result: undefined };
    });
  }

  async createAccount(record: AccountRecord): Promise<void> {
    await this.modify((data) => {
      if (data.accounts.some((a) => a.name === record.name)) throw new AccountNameTaken(record.name);
      if (data.accounts.some((a) => a.id === record.id)) throw new Error(`key store already holds an account with id ${record.id}`);
      return { data: { ...data, accounts: [...data.accounts, record] }, result: undefined };
    });
  }

  async getAccount(id: string): Promise<AccountRecord | undefined> {
    return (await this.read()).accounts.find((a) => a.id === id);
  }

  async findAccountByName(name: string): Promise<AccountRecord | undefined> {
    return (await this.read()).accounts.find((a) => a.name === name);
  }

  async listAccounts(): Promise<AccountRecord[]> {
    return (await this.read()).accounts;
  }

  updateAccount(id: string, changes: AccountChanges): Promise<AccountRecord | undefined> {
    return this.modify((data) => {
      const existing = data.accounts.find((a) => a.id === id);
      if (!existing) return { data, result: undefined };
      if (changes.name !== undefined && data.accounts.some((a) => a.name === changes.name && a.id !== id)) throw new AccountNameTaken(changes.name);
      const updated: AccountRecord = { ...existing, ...definedFields({ name: changes.name }), quota: { ...existing.quota, ...definedFields(changes.quota) } };
      return { data: { ...data, accounts: data.accounts.map((a) => (a.id === id ? updated : a)) }, result: updated };
    });
  }

  async getPerson(email: string): Promise<PersonRecord | undefined> {
    return (await this.read()).people.find((p) => p.email === email);
  }

  putPerson(record: PersonRecord): Promise<PersonRecord> {
    return this.modify((data) => {
      const existing = data.people.find((p) => p.email === record.email);
      const person = existing
        ? { ...existing, admin: record.admin, passwordHash: record.passwordHash ?? existing.passwordHash, ...definedFields({ passwordWithOidc: record.passwordWithOidc }) }
        : record;
      return { data: { ...data, people: [...data.people.filter((p) => p.email !== record.email), person] }, result: person };
    });
  }

  setPassword(email: string, passwordHash: string | null): Promise<PersonRecord | undefined> {
    return this.modify((data) => {
      const existing = data.people.find((p) => p.email === email);
      if (!existing) return { data, result: undefined };
      const person = { ...existing, passwordHash };
      return {
        data: {
          ...data,
          people: data.people.map((p) => (p.email === email ? person : p)),
          tokens: data.tokens.filter((t) => !(t.kind === 'password' && t.email === email)),
        },
        result: person,
      };
    });
  }

  async findIdentity(issuer: string, subject: string): Promise<IdentityRecord | undefined> {
    return (await this.read()).identities.find((i) => i.issuer === issuer && i.subject === subject);
  }

  async identitiesOf(email: string): Promise<IdentityRecord[]> {
    return (await this.read()).identities.filter((i) => i.email === email);
  }

  bindIdentity(record: IdentityRecord): Promise<boolean> {
    return this.modify((data) => {
      const taken = data.identities.some((i) => i.issuer === record.issuer && (i.subject === record.subject || i.email === record.email));
      return taken ? { data, result: false } : { data: { ...data, identities: [...data.identities, record] }, result: true };
    });
  }

  putMember(record: MembershipRecord): Promise<MembershipRecord> {
    return this.modify((data) => {
      const existing = data.members.find((m) => m.accountId === record.accountId && m.email === record.email);
      const member = existing ? { ...existing, role: record.role } : record;
      const others = data.members.filter((m) => !(m.accountId === record.accountId && m.email === record.email));
      return { data: { ...data, members: [...others, member] }, result: member };
    });
  }

  removeMember(accountId: string, email: string): Promise<boolean> {
    return this.modify((data) => {
      const members = data.members.filter((m) => !(m.accountId === accountId && m.email === email));
      return { data: { ...data, members }, result: members.length !== data.members.length };
    });
  }

  async listMembers(accountId: string): Promise<MembershipRecord[]> {
    return (await this.read()).members.filter((m) => m.accountId === accountId);
  }

  async membershipsOf(email: string): Promise<MembershipRecord[]> {
    return (await this.read()).members.filter((m) => m.email === email);
  }

  async createSession(record: SessionRecord): Promise<void> {
    await this.modify((data) => {
      const now = new Date().toISOString();
      const live = data.sessions.filter((s) => s.expiresAt > now); // ended ones go as new ones come
      return { data: { ...data, sessions: [...live, record] }, result: undefined };
    });
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
    await this.modify((data) => {
      const now = new Date().toISOString();
      const kept = data.tokens.filter((t) => t.expiresAt > now && !voidedBy(token, t));
      return { data: { ...data, tokens: [...kept, token] }, result: undefined };
    });
  }

  takeToken(digest: string, kind: OneTimeToken['kind'], now: Date): Promise<OneTimeToken | undefined> {
    return this.modify((data) => {
      const token = data.tokens.find((t) => t.digest === digest && t.kind === kind);
      const tokens = data.tokens.filter((t) => t !== token && !(token && voidedBy(token, t)));
      return { data: { ...data, tokens }, result: token && token.expiresAt > now.toISOString() ? token : undefined };
    });
  }

  bumpCounters(counters: ReadonlyArray<{ name: string; expiresAt: Date }>, now: Date): Promise<number[]> {
    return this.modify((data) => {
      const at = now.toISOString();
      const live = new Map(data.counters.filter((c) => c.expiresAt > at).map((c) => [c.name, c]));
      const result = counters.map(({ name, expiresAt }) => {
        const counter = live.get(name) ?? { name, count: 0, expiresAt: expiresAt.toISOString() };
        const bumped = { ...counter, count: counter.count + 1 };
        live.set(name, bumped);
        return bumped.count;
      });
      return { data: { ...data, counters: [...live.values()] }, result };
    });
  }

  async clearCounters(names: readonly string[]): Promise<void> {
    const data = await this.read();
    if (!data.counters.some((c) => names.includes(c.name))) return; // nothing to write
    await this.modify((latest) => ({ data: { ...latest, counters: latest.counters.filter((c) => !names.includes(c.name)) }, result: undefined }));
  }

  async appendAudit(event: AuditEvent): Promise<void> {
    await this.modify((data) => ({ data: { ...data, audit: [...data.audit, event] }, result: undefined }));
  }

  async listAudit(accountId: string | null, limit: number): Promise<AuditEvent[]> {
    const audit = (await this.read()).audit.filter((e) => accountId === null || e.accountId === accountId);
    return audit.slice(-limit).reverse();
  }

  async usage(accountId: string, from: string, to: string): Promise<UsageDay[]> {
    return (await this.read()).usage.filter((row) => row.accountId === accountId && row.date >= from && row.date <= to).sort(byDateThenKey);
  }

  async addQuotaUsage(amounts: ReadonlyMap<string, number>): Promise<void> {
    if (amounts.size === 0) return;
    await this.modify((data) => {
      const quotaUsage = { ...data.quotaUsage };
      for (const [scope, tokens] of amounts) quotaUsage[scope] = (quotaUsage[scope] ?? 0) + tokens;
      // Counters of periods long gone are dropped: a scope ends with its day or month.
      const oldest = daysBefore(new Date(), 62);
      for (const scope of Object.keys(quotaUsage)) if (periodOf(scope) < oldest.slice(0, periodOf(scope).length)) delete quotaUsage[scope];
      return { data: { ...data, quotaUsage }, result: undefined };
    });
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
    await this.writing.catch(() => undefined);
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

  private modify<T>(apply: Change<T>): Promise<T> {
    const run = this.writing.then(() =>
      // The lock file orders this read-change-replace against other instances and processes (the CLI,
      // the admin API, usage flushes), so no writer replaces the file with contents it read too early.
      withLockFile(`${this.file}.lock`, async () => {
        this.snapshot = undefined;
        const { data, changed, result } = apply((await this.current()).data);
        await this.write(data);
        if (changed && changed.length > 0) this.changes.emit('change', changed);
        return result;
      }),
    );
    this.writing = run.catch(() => undefined);
    return run;
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
    try {
      const stat = await fs.stat(this.file, { bigint: true });
      return `${stat.size}:${stat.mtimeNs}:${stat.ino}`;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 'absent';
      throw err;
    }
  }

  private async write(data: Data): Promise<void> {
    await fs.mkdir(path.dirname(this.file), { recursive: true, mode: 0o700 });
    const contents = { version: 2, ...data };
    const temporary = `${this.file}.${randomBytes(6).toString('hex')}.tmp`;
    await fs.writeFile(temporary, JSON.stringify(contents, null, 2) + '\n', { mode: 0o600 });
    await fs.rename(temporary, this.file);
    this.snapshot = undefined;
  }
}

function emptyData(): Data {
  return { keys: [], accounts: [], people: [], members: [], sessions: [], tokens: [], identities: [], counters: [], audit: [], usage: [], quotaUsage: {} };
}

/** A new set-password link voids the older ones for the same person (and a used one, its siblings). */
function voidedBy(token: OneTimeToken, other: OneTimeToken): boolean {
  return token.kind === 'password' && other.kind === 'password' && other.email !== null && other.email === token.email;
}

/** The account a file of version 1 had implicitly: every key belonged to it. */
function defaultAccount(createdAt: string): AccountRecord {
  return { id: DEFAULT_ACCOUNT_ID, name: DEFAULT_ACCOUNT_NAME, createdAt, quota: { ...NO_QUOTA } };
}

const sum = (uses: readonly KeyUse[], field: 'requests' | 'promptTokens' | 'completionTokens') => uses.reduce((total, use) => total + use[field], 0);
const byDateThenKey = (a: UsageDay, b: UsageDay) => (a.date === b.date ? a.keyId.localeCompare(b.keyId) : a.date.localeCompare(b.date));
const daysBefore = (now: Date, days: number) => new Date(now.getTime() - days * 86_400_000).toISOString().slice(0, 10);
/** A quota scope ends with its period: `...:d:2026-11-27` or `...:m:2026-11`. */
const periodOf = (scope: string) => scope.slice(scope.lastIndexOf(':') + 1);

const LOCK_RETRY_MS = 5;
const LOCK_WAIT_MS = 10_000;

/**
 * Runs `critical` while holding `lockFile` (created exclusively, naming our pid and a token of this
 * hold); a lock left by a dead process is taken over.
 */
async function withLockFile<T>(lockFile: string, critical: () => Promise<T>): Promise<T> {
  await fs.mkdir(path.dirname(lockFile), { recursive: true, mode: 0o700 });
  const giveUpAt = Date.now() + LOCK_WAIT_MS;
  for (;;) {
    try {
      await fs.writeFile(lockFile, `${process.pid} ${randomBytes(6).toString('hex')}`, { flag: 'wx', mode: 0o600 });
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const stale = await staleLock(lockFile);
      if (stale !== undefined) {
        await removeStaleLock(lockFile, stale);
        continue;
      }
      if (Date.now() > giveUpAt) throw new Error(`key store is locked by another process (${lockFile}); remove the file if no chatgate process holds it`);
      await new Promise((resolve) => setTimeout(resolve, LOCK_RETRY_MS));
    }
  }
  try {
    return await critical();
  } finally {
    await fs.rm(lockFile, { force: true });
  }
}

/** The lock's contents when the process it names is gone; undefined while it lives (or the file is being written, or gone). */
async function staleLock(lockFile: string): Promise<string | undefined> {
  const contents = await fs.readFile(lockFile, 'utf8').catch(() => '');
  const pid = Number(contents.split(' ')[0]);
  if (!Number.isInteger(pid) || pid <= 0) return undefined;
  try {
    process.kill(pid, 0);
    return undefined;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ESRCH' ? contents : undefined;
  }
}

/**
 * Removes the stale lock seen with these contents, and no other: two waiters may both see the dead
 * holder, and the first to take over writes a lock of its own, which the second must not delete. So
 * the file is moved aside under a name of our own and read: a live lock moved by mistake is put back
 * (link, which fails only if yet another lock appeared meanwhile).
 */
export async function removeStaleLock(lockFile: string, seen: string): Promise<void> {
  const aside = `${lockFile}.${randomBytes(6).toString('hex')}.stale`;
  try {
    await fs.rename(lockFile, aside);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return; // taken away already
    throw err;
  }
  if ((await fs.readFile(aside, 'utf8')) !== seen) await fs.link(aside, lockFile).catch(() => undefined);
  await fs.rm(aside, { force: true });
}

/**
 * The file is written by this code, but people edit it by hand too: a record the request path could
 * not use (models not a list, a date that does not parse) refuses the whole file, naming the record
 * and field, as a file that is not JSON does, rather than failing requests one by one. Values are
 * never quoted (a digest is a secret's fingerprint). Fields a newer version may add are kept. The
 * rules are no stricter than what the CLI and the admin API write (a limit of 1e20 is a whole number).
 * A file of version 1 (keys only) reads as version 2: its keys belong to the account `default`.
 */
const timestamp = z.string().refine((value) => !Number.isNaN(Date.parse(value)), 'not a date');
const wholeNumber = z.number().min(0).refine(Number.isInteger, 'not a whole number');
const ownLimit = wholeNumber.nullable().default(null);
const count = wholeNumber.default(0);
const quota = z.looseObject({ tokensPerDay: ownLimit, tokensPerMonth: ownLimit }).prefault({});
const fileRecord = z.looseObject({
  id: z.string().min(1),
  name: z.string(),
  digest: z.string().regex(/^[0-9a-f]{64}$/, 'not a SHA-256 digest in hex'),
  prefix: z.string(),
  createdAt: timestamp,
  revokedAt: timestamp.nullable(),
  expiresAt: timestamp.nullable(),
  models: z.array(z.string()),
  // Files written before a field existed get its neutral value.
  endpoints: z.array(z.string()).default([]),
  lastUsedAt: timestamp.nullable().default(null),
  rateLimit: z.looseObject({ requestsPerMinute: ownLimit, tokensPerMinute: ownLimit, maxConcurrent: ownLimit }).prefault({}),
  usage: z.looseObject({ requests: count, promptTokens: count, completionTokens: count }).prefault({}),
  accountId: z.string().min(1).default(DEFAULT_ACCOUNT_ID),
  createdBy: z.string().default('admin-token'),
  quota,
}) satisfies z.ZodType<KeyRecord>;
const accountRecord = z.looseObject({ id: z.string().min(1), name: z.string().min(1), createdAt: timestamp, quota }) satisfies z.ZodType<AccountRecord>;
const personRecord = z.looseObject({ email: z.string().min(1), admin: z.boolean().default(false), passwordHash: z.string().nullable().default(null), createdAt: timestamp, passwordWithOidc: z.boolean().optional() }) satisfies z.ZodType<PersonRecord>;
const memberRecord = z.looseObject({ accountId: z.string(), email: z.string(), role: z.enum(['owner', 'member']), addedAt: timestamp, addedBy: z.string() }) satisfies z.ZodType<MembershipRecord>;
const sessionRecord = z.looseObject({
  digest: z.string(),
  email: z.string(),
  accountId: z.string().nullable(),
  via: z.enum(['password', 'oidc']),
  createdAt: timestamp,
  lastSeenAt: timestamp,
  expiresAt: timestamp,
}) satisfies z.ZodType<SessionRecord>;
const tokenRecord = z.looseObject({ digest: z.string(), kind: z.enum(['password', 'oidc']), email: z.string().nullable(), data: z.record(z.string(), z.string()), expiresAt: timestamp }) satisfies z.ZodType<OneTimeToken>;
const identityRecord = z.looseObject({ issuer: z.string().min(1), subject: z.string().min(1), email: z.string().min(1), createdAt: timestamp }) satisfies z.ZodType<IdentityRecord>;
const auditRecord = z.looseObject({
  id: z.string(),
  accountId: z.string().nullable(),
  at: timestamp,
  actor: z.string(),
  action: z.string(),
  target: z.string(),
  client: z.string().nullable(),
  details: z.record(z.string(), z.unknown()).default({}),
}) satisfies z.ZodType<AuditEvent>;
const usageRecord = z.looseObject({ date: z.string(), accountId: z.string(), keyId: z.string(), requests: count, promptTokens: count, completionTokens: count }) satisfies z.ZodType<UsageDay>;
const fileShape = z.looseObject({
  version: z.union([z.literal(1), z.literal(2)]),
  keys: z.array(z.unknown()),
  accounts: z.array(z.unknown()).default([]),
  people: z.array(z.unknown()).default([]),
  members: z.array(z.unknown()).default([]),
  sessions: z.array(z.unknown()).default([]),
  tokens: z.array(z.unknown()).default([]),
  identities: z.array(z.unknown()).default([]),
  counters: z.array(z.looseObject({ name: z.string(), count, expiresAt: timestamp })).default([]),
  audit: z.array(z.unknown()).default([]),
  usage: z.array(z.unknown()).default([]),
  quotaUsage: z.record(z.string(), wholeNumber).default({}),
});

export function parseContents(text: string, file: string): Data {
  const shape = fileShape.safeParse(parseJson(text, file));
  if (!shape.success) throw new Error(`${file} is not a chatgate key file (expected {"version":2,"keys":[...],...})`);
  const contents = shape.data;
  const records = <T>(name: string, schema: z.ZodType<T>, values: unknown[]): T[] => {
    const parsed = z.array(schema).safeParse(values);
    if (parsed.success) return parsed.data;
    const issue = parsed.error.issues[0]!;
    const at = issue.path.map((part) => (typeof part === 'number' ? `[${part}]` : `.${String(part)}`)).join('');
    throw new Error(`${file} holds a record the gateway cannot use: ${name}${at}: ${issue.message}`);
  };
  const keys = records('keys', fileRecord, contents.keys);
  const accounts: AccountRecord[] = records('accounts', accountRecord, contents.accounts);
  // Keys that belong to `default` (every key of a version 1 file) need the account to exist.
  if (keys.some((k) => k.accountId === DEFAULT_ACCOUNT_ID) && !accounts.some((a) => a.id === DEFAULT_ACCOUNT_ID)) {
    accounts.unshift(defaultAccount(keys.map((k) => k.createdAt).sort()[0] ?? new Date().toISOString()));
  }
  return {
    keys,
    accounts,
    people: records('people', personRecord, contents.people),
    members: records('members', memberRecord, contents.members),
    sessions: records('sessions', sessionRecord, contents.sessions),
    tokens: records('tokens', tokenRecord, contents.tokens),
    identities: records('identities', identityRecord, contents.identities),
    counters: contents.counters,
    audit: records('audit', auditRecord, contents.audit),
    usage: records('usage', usageRecord, contents.usage),
    quotaUsage: contents.quotaUsage,
  };
}

/** JSON.parse's own message quotes the text around the error, which may be part of a digest. */
function parseJson(text: string, file: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    throw new Error(`${file} is not valid JSON`);
  }
}
