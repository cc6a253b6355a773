/**
 * The store contract. Backends (the file store, the embedded default; PostgreSQL for shared mode)
 * hold keys by digest (none ever sees a clear key), and the accounts that own them: their members,
 * the console's sessions and one-time tokens, daily usage, quota counters and the audit trail. Both
 * pass one contract test suite (test/store/contract.test.ts).
 */
import type { AlertRecord, BreakdownQuery, ServerSecret, UsageDay, UsageShare } from './records';

export interface KeyRecord {
  id: string;
  name: string;
  /** SHA-256 of the key, hex. Never leaves the gateway. */
  digest: string;
  /** The first characters of the key, to recognise it in a list. */
  prefix: string;
  createdAt: string;
  revokedAt: string | null;
  expiresAt: string | null;
  /** Globs over `<provider>/<model_name>` (and alias names); empty means every model. */
  models: string[];
  /** The endpoints the key may call (chat, completions, embeddings, responses); empty means every one. */
  endpoints: string[];
  /** Client addresses the key may be used from, as CIDRs (`10.0.0.0/8`, `2001:db8::/32`); empty means any. */
  allowedIps: string[];
  /** When the key was last accepted, written in batches (so minutes behind at most). */
  lastUsedAt: string | null;
  /** The key's own limits; null: the configured default; 0: no limit for this key. */
  rateLimit: KeyLimits;
  /** Totals since the key was created, written in batches. */
  usage: KeyUsage;
  /** The account that owns the key (keys made before accounts existed belong to `default`). */
  accountId: string;
  /** Who made it: a person's email, or `admin-token`. */
  createdBy: string;
  /** Tokens the key may use per UTC day and month; null: no quota of its own (the account's still holds). */
  quota: Quota;
  /**
   * Set while the secret a rotation with grace replaced still works: until this time (the rotation's
   * `graceSeconds` after it). Absent: no earlier secret works.
   */
  previousKeyExpiresAt?: string;
  /** Money the key may spend per UTC day and month, in the price table's currency; null: no budget of its own. */
  budget: Budget;
}

export interface Quota {
  tokensPerDay: number | null;
  tokensPerMonth: number | null;
}
export const NO_QUOTA: Quota = { tokensPerDay: null, tokensPerMonth: null };

/** An amount of the price table's currency per UTC day and month (`prices.currency`); null: none. */
export interface Budget {
  perDay: number | null;
  perMonth: number | null;
}
export const NO_BUDGET: Budget = { perDay: null, perMonth: null };

export interface KeyLimits {
  requestsPerMinute: number | null;
  tokensPerMinute: number | null;
  maxConcurrent: number | null;
}

export interface KeyUsage {
  requests: number;
  promptTokens: number;
  completionTokens: number;
}

export const NO_OWN_LIMITS: KeyLimits = { requestsPerMinute: null, tokensPerMinute: null, maxConcurrent: null };
export const NO_USAGE: KeyUsage = { requests: 0, promptTokens: 0, completionTokens: 0 };

/** What a batch adds to one key on one UTC day: its latest use and what it used. */
export interface KeyUse extends KeyUsage {
  /** Requests the gateway refused itself (no worker answered them); `requests` counts those served. */
  refused: number;
  /** What the answers cost by the price table, in nano-units of its currency (1e-9). */
  costNanos: number;
  keyId: string;
  accountId: string;
  /** YYYY-MM-DD, UTC. */
  date: string;
  at: Date;
  /** `<provider>/<model_name>` that answered; '' when the request was refused before a model was chosen; `*` for a key's pairs past its cap of the day. */
  model: string;
  /** The end user's digest (accounts/end-users.ts); '' when the request named none; `*` past the cap. */
  endUser: string;
}

export interface KeyChanges {
  name?: string;
  models?: string[];
  endpoints?: string[];
  allowedIps?: string[];
  expiresAt?: string | null;
  rateLimit?: Partial<KeyLimits>;
  quota?: Partial<Quota>;
  budget?: Partial<Budget>;
  /** A member's keys handed to another person when the member leaves. */
  createdBy?: string;
}

/**
 * What authenticating a request needs of a key: the record without its usage figures, which the hot
 * path never reads (a store may leave them out of findByDigest: PostgreSQL keeps them in another table).
 */
export type KeyAuthRecord = Omit<KeyRecord, 'usage' | 'lastUsedAt'> &
  Partial<Pick<KeyRecord, 'usage' | 'lastUsedAt'>> & {
    /** Found by the secret a rotation replaced (findByDigest): it works only until `previousKeyExpiresAt`. */
    previousKey?: true;
  };

export interface KeyStore {
  /**
   * The key whose secret has this digest; or whose earlier secret has it while a rotation's grace
   * lasts (marked `previousKey`, and with `previousKeyExpiresAt`; one found after the grace may be
   * returned too: the caller compares the time, as it does `expiresAt`).
   */
  findByDigest(digest: string): Promise<KeyAuthRecord | undefined>;
  get(id: string): Promise<KeyRecord | undefined>;
  /** Every key, or those of one account. */
  list(accountId?: string): Promise<KeyRecord[]>;
  /** The live (unrevoked) keys whose expiry is after `from` and at or before `to`, soonest first: an indexed read. */
  listExpiring(from: Date, to: Date): Promise<KeyRecord[]>;
  /** Whether the store holds any key at all (revoked and expired ones count): one `limit 1` read, never a list. */
  hasKeys(): Promise<boolean>;
  insert(record: KeyRecord): Promise<void>;
  update(id: string, changes: KeyChanges): Promise<KeyRecord | undefined>;
  /** Marks the key revoked (once; a second call keeps the first time). Undefined when no key has that id. */
  revoke(id: string, at: Date): Promise<KeyRecord | undefined>;
  /**
   * Gives the key a new secret: same id and settings. The old digest stops matching at once, or, with
   * `graceUntil`, matches (as `previousKey`) until then; a secret still in an earlier grace stops at once.
   */
  rotate(id: string, digest: string, prefix: string, graceUntil?: Date): Promise<KeyRecord | undefined>;
  /**
   * Adds a batch of use: to each key's totals and latest use (later times win), and to its daily usage.
   * `batch`, an id the caller makes: a batch recorded under it already (a write that outlived the
   * caller's deadline and landed anyway, then sent again) is skipped, not counted twice. Ids are kept a day.
   */
  recordUse(uses: readonly KeyUse[], batch?: string): Promise<void>;
  /**
   * Calls back with the digests of keys that changed, whoever changed them (this process, the CLI,
   * another replica), so caches can drop them; `undefined` means "anything may have changed".
   */
  onChange(listener: (digests: string[] | undefined) => void): void;
  /**
   * True while onChange is known to deliver every key change, from any process, within about a second
   * (PostgreSQL: its LISTEN connection is up and answers its heartbeat; the file store: its poll runs).
   * The key cache trusts a key for its long max age only while this holds; it is read on every lookup.
   * After a gap, the store announces `undefined` (anything may have changed).
   */
  readonly changeFeedLive: boolean;
  /** Resolves when the store can be read; rejects otherwise (readiness). */
  ping(): Promise<void>;
  close(): Promise<void>;
}

export interface AccountRecord {
  id: string;
  /** Unique; what OIDC group mappings and the CLI name it by. */
  name: string;
  createdAt: string;
  /** Tokens all the account's keys together may use per UTC day and month; null: no quota. */
  quota: Quota;
  /** Money all the account's keys together may spend per UTC day and month; null: no budget. */
  budget: Budget;
  /** The longest a key of the account may live (days from its creation); absent: no limit. */
  keyPolicy?: KeyPolicy;
  /** What each end user of the account's keys may use per UTC day (accounts/end-users.ts); absent: no limit. */
  endUserQuota?: EndUserQuota;
  /** Where the account's alerts go instead of `alerts.webhookUrl` (its owners set it; an https URL, a secret); absent: the platform's. */
  alertWebhookUrl?: string;
}

/** Per end user and UTC day: tokens, and money in the price table's currency; null: no limit of that kind. */
export interface EndUserQuota {
  tokensPerDay: number | null;
  budgetPerDay: number | null;
}

export interface KeyPolicy {
  maxLifetimeDays: number;
}

export interface AccountChanges {
  name?: string;
  quota?: Partial<Quota>;
  budget?: Partial<Budget>;
  /** null: no policy any more. */
  keyPolicy?: KeyPolicy | null;
  /** null: no end user quota any more. */
  endUserQuota?: EndUserQuota | null;
  /** null: none (the platform's webhook). */
  alertWebhookUrl?: string | null;
}

/** A person who signs in to the console, by email (lower case). */
export interface PersonRecord {
  email: string;
  /** A platform admin: manages every account. */
  admin: boolean;
  /** scrypt, salted (accounts/passwords.ts); null: no password (OIDC only, or not set yet). */
  passwordHash: string | null;
  createdAt: string;
  /**
   * Whether a person bound to an identity provider may still sign in with a password (an admin turns
   * it on). A person with no binding signs in with their password whatever this says.
   */
  passwordWithOidc?: boolean;
}

/** An OpenID Connect identity bound to a person: the issuer and subject identify them, never the email. */
export interface IdentityRecord {
  issuer: string;
  subject: string;
  /** The person it signs in as. */
  email: string;
  createdAt: string;
}

export type Role = 'owner' | 'member';

export interface MembershipRecord {
  accountId: string;
  email: string;
  role: Role;
  addedAt: string;
  /** A person's email (for one provisioned at an OIDC sign-in: their own), or `admin-token`. */
  addedBy: string;
}

/** A member's role changed by setMemberRole: the member as they now are, and the role they held just before, read in the change's own step (the same as `member.role` when it was already so). */
export type RoleChange = { member: MembershipRecord; from: Role };

/** A console session, by the SHA-256 of its cookie's token: every replica knows it, sign-out ends it everywhere. */
export interface SessionRecord {
  digest: string;
  email: string;
  /** The account the person works in now (they may belong to several). */
  accountId: string | null;
  via: 'password' | 'oidc';
  createdAt: string;
  lastSeenAt: string;
  /** The absolute end, whatever the activity. */
  expiresAt: string;
}

/** A one-time token, by digest: a set-password link, or an OIDC sign-in under way (its state). */
export interface OneTimeToken {
  digest: string;
  kind: 'password' | 'oidc';
  email: string | null;
  /** What the kind needs: for oidc, the PKCE verifier and nonce. */
  data: Record<string, string>;
  expiresAt: string;
}

export interface AuditEvent {
  id: string;
  /** The account it concerns; null for what concerns none (a failed sign-in of an unknown email). */
  accountId: string | null;
  at: string;
  /** A person's email, or `admin-token`. */
  actor: string;
  /** `key.created`, `key.revoked`, `member.added`, `session.created`, ... */
  action: string;
  /** What it was done to: a key id, an email, an account id. */
  target: string;
  /** The client's address. */
  client: string | null;
  details: Record<string, unknown>;
}

export { ALERTS_KEPT_DAYS, type AlertRecord, type BreakdownQuery, type ServerSecret, type UsageDay, type UsageShare } from './records';

/** Which audit events a listing keeps: those of one action, those at or after an instant (ISO 8601). */
export interface AuditFilter {
  action?: string;
  since?: string;
}

export interface AccountStore {
  /** Refuses a name another account has (AccountNameTaken), and an id another has (DuplicateRecord). */
  createAccount(record: AccountRecord): Promise<void>;
  getAccount(id: string): Promise<AccountRecord | undefined>;
  findAccountByName(name: string): Promise<AccountRecord | undefined>;
  /** Every account; or those with these ids (one read, however many: the quota syncs ask for the accounts in use). */
  listAccounts(ids?: readonly string[]): Promise<AccountRecord[]>;
  updateAccount(id: string, changes: AccountChanges): Promise<AccountRecord | undefined>;

  getPerson(email: string): Promise<PersonRecord | undefined>;
  /** Creates the person, or changes `admin`, `passwordWithOidc` (when given) and (when given) the password hash of one that exists. */
  putPerson(record: PersonRecord): Promise<PersonRecord>;
  /**
   * Sets (or, with null, removes) the person's password, and in the same step voids every set-password
   * link made for them. Undefined when there is no such person.
   */
  setPassword(email: string, passwordHash: string | null): Promise<PersonRecord | undefined>;

  /** The identity with this issuer and subject, if one is bound. */
  findIdentity(issuer: string, subject: string): Promise<IdentityRecord | undefined>;
  /** The person's identities, of every issuer. */
  identitiesOf(email: string): Promise<IdentityRecord[]>;
  /**
   * Binds an identity to a person, unless that issuer and subject are bound already, or the person
   * has another identity from that issuer (two sign-ins at once: one wins). True when this call bound it.
   */
  bindIdentity(record: IdentityRecord): Promise<boolean>;
  /** Adds a member, or changes the role of one; with keepOwner, never the only owner to a member (LastOwner, decided in the same step). */
  putMember(record: MembershipRecord, options?: { keepOwner?: boolean }): Promise<MembershipRecord>;
  /** Changes the role of a member who is there, in one step, saying the role it replaced: undefined when none is, and nobody added (a change racing a removal never brings the member back); keepOwner as putMember's. */
  setMemberRole(accountId: string, email: string, role: Role, options?: { keepOwner?: boolean }): Promise<RoleChange | undefined>;
  /** Whether there was such a member; with keepOwner, never the only owner (LastOwner, decided in the same step). */
  removeMember(accountId: string, email: string, options?: { keepOwner?: boolean }): Promise<boolean>;
  listMembers(accountId: string): Promise<MembershipRecord[]>;
  membershipsOf(email: string): Promise<MembershipRecord[]>;

  createSession(record: SessionRecord): Promise<void>;
  findSession(digest: string): Promise<SessionRecord | undefined>;
  updateSession(digest: string, changes: { lastSeenAt?: string; accountId?: string | null }): Promise<void>;
  deleteSession(digest: string): Promise<void>;
  /** Ends every session of the person but the one named (none: every one); how many ended. */
  deleteSessionsOf(email: string, exceptDigest?: string): Promise<number>;

  /**
   * Keeps a one-time token. A set-password link voids every older link for the same person, in the
   * same step: only the newest one works.
   */
  createToken(token: OneTimeToken): Promise<void>;
  /**
   * The token, once: it is gone after this call, and an expired one is never returned. Taking a
   * set-password link voids every other link for the same person.
   */
  takeToken(digest: string, kind: OneTimeToken['kind'], now: Date): Promise<OneTimeToken | undefined>;
  /**
   * The token as takeToken would give it (none when it is gone or expired), left where it is: a look
   * that neither takes it nor voids another (the console checks a link as its page opens).
   */
  findToken(digest: string, kind: OneTimeToken['kind'], now: Date): Promise<OneTimeToken | undefined>;

  /**
   * Adds one to each named counter, atomically (one store operation, so concurrent callers each see
   * their own count) and returns the new counts in order. A counter is made at 1 with its expiry, and
   * is gone after it; expired counters are pruned as new ones come. What the counters mean (sign-in
   * failures per email and address, per window) is the caller's rule, kept above the stores.
   */
  bumpCounters(counters: ReadonlyArray<{ name: string; expiresAt: Date }>, now: Date): Promise<number[]>;
  /** Forgets the named counters. */
  clearCounters(names: readonly string[]): Promise<void>;

  /** Append-only. */
  appendAudit(event: AuditEvent): Promise<void>;
  /** The newest first; all accounts' when accountId is null; of one action, and at or after `since`, when the filter says. */
  listAudit(accountId: string | null, limit: number, filter?: AuditFilter): Promise<AuditEvent[]>;

  /** Daily usage of an account's keys, dates inclusive. */
  usage(accountId: string, from: string, to: string): Promise<UsageDay[]>;
  /**
   * The account's usage over the days (inclusive) by model or by end user, from the ledger (one row a
   * day, key, model and end user): the `limit` largest by cost, then tokens, then requests.
   */
  usageBreakdown(accountId: string, from: string, to: string, query: BreakdownQuery): Promise<UsageShare[]>;
  /** Deletes at most `limit` usage rows (ledger and daily) of the months before the one `before` (YYYY-MM-DD) is in: how many it deleted. */
  pruneUsage(before: string, limit: number): Promise<number>;

  /** Adds tokens to quota counters (scope -> tokens); counters of past periods may be dropped. */
  addQuotaUsage(amounts: ReadonlyMap<string, number>): Promise<void>;
  /** The counters' totals (0 for one never counted). */
  quotaUsage(scopes: readonly string[]): Promise<Map<string, number>>;

  /**
   * Claims an alert for this process to send: true when no one holds it (it is new, or unsent with its
   * last claim past `claimedUntil`'s lease), false when it was sent or another process's claim holds.
   * One alert per id: a threshold of one quota or budget in one period.
   * Alerts made more than ALERTS_KEPT_DAYS before `now` (every period they could stand for is over)
   * are deleted as claims come, at most once a minute.
   */
  claimAlert(alert: AlertRecord, leaseMs: number, now: Date): Promise<boolean>;
  /** The alert went out (its webhook answered 2xx, or there is no webhook to send it to). */
  alertSent(id: string, at: Date): Promise<void>;
  /** An account's alerts (of its keys too) made at or after `since`, the newest first. */
  listAlerts(accountId: string, since: Date): Promise<AlertRecord[]>;
  /** Alerts not sent whose claim's lease ended before `now` (a delivery that failed): at most 100, the oldest first. */
  listUnsentAlerts(now: Date): Promise<AlertRecord[]>;

  getServerSecret(id: string): Promise<ServerSecret | undefined>;
  /** Keeps the secret unless one with its id is kept already: the one kept, so replicas making one at once agree. */
  putServerSecret(secret: ServerSecret): Promise<ServerSecret>;
}

/** Everything a backend holds. */
export type Store = KeyStore & AccountStore;

export { AccountNameTaken, DuplicateRecord, LastOwner, type RecordKind } from './errors';

/** The account every key made before accounts existed belongs to. */
export const DEFAULT_ACCOUNT_NAME = 'default';
