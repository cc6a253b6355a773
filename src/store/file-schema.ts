/** What the file store's JSON file may hold, read and checked record by record. */
import { z } from 'zod';
import { DEFAULT_ACCOUNT_ID } from './default-account';
import { DEFAULT_ACCOUNT_NAME, NO_BUDGET, NO_QUOTA, type KeyUse, type AccountRecord, type AuditEvent, type IdentityRecord, type KeyRecord, type MembershipRecord, type OneTimeToken, type PersonRecord, type SessionRecord, type UsageDay } from './types';

/** Everything the file holds. */
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
const amount = z.number().min(0).max(1e6).nullable().default(null);
const budget = z.looseObject({ perDay: amount, perMonth: amount }).prefault({});
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
  allowedIps: z.array(z.string()).default([]),
  lastUsedAt: timestamp.nullable().default(null),
  rateLimit: z.looseObject({ requestsPerMinute: ownLimit, tokensPerMinute: ownLimit, maxConcurrent: ownLimit }).prefault({}),
  usage: z.looseObject({ requests: count, promptTokens: count, completionTokens: count }).prefault({}),
  accountId: z.string().min(1).default(DEFAULT_ACCOUNT_ID),
  createdBy: z.string().default('admin-token'),
  quota,
  budget,
}) satisfies z.ZodType<KeyRecord>;
const accountRecord = z.looseObject({ id: z.string().min(1), name: z.string().min(1), createdAt: timestamp, quota, budget }) satisfies z.ZodType<AccountRecord>;
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
const usageRecord = z.looseObject({ date: z.string(), accountId: z.string(), keyId: z.string(), requests: count, refused: count, costNanos: count, promptTokens: count, completionTokens: count }) satisfies z.ZodType<UsageDay>;
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


/** The account a file of version 1 had implicitly: every key belonged to it. */
export function defaultAccount(createdAt: string): AccountRecord {
  return { id: DEFAULT_ACCOUNT_ID, name: DEFAULT_ACCOUNT_NAME, createdAt, quota: { ...NO_QUOTA }, budget: { ...NO_BUDGET } };
}

export function emptyData(): Data {
  return { keys: [], accounts: [], people: [], members: [], sessions: [], tokens: [], identities: [], counters: [], audit: [], usage: [], quotaUsage: {} };
}

/** A new set-password link voids the older ones for the same person (and a used one, its siblings). */
export function voidedBy(token: OneTimeToken, other: OneTimeToken): boolean {
  return token.kind === 'password' && other.kind === 'password' && other.email !== null && other.email === token.email;
}

export const sum = (uses: readonly KeyUse[], field: 'requests' | 'promptTokens' | 'completionTokens') => uses.reduce((total, use) => total + use[field], 0);
export const byDateThenKey = (a: UsageDay, b: UsageDay) => (a.date === b.date ? a.keyId.localeCompare(b.keyId) : a.date.localeCompare(b.date));
/** A quota scope ends with its period: `...:d:2026-11-27` or `...:m:2026-11` (the same rule as the SQL stores'). */
export { daysBefore, periodOf } from './sql/rows';
