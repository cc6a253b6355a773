/**
 * Pure: the rows of both SQL stores (sqlite/, postgres/) and the records they hold, both ways, each
 * rule written once. The tables have the same columns in both; only how a driver hands a column
 * over differs: SQLite gives timestamps as ISO text, lists and objects as JSON text, booleans as 0
 * or 1 and numbers as numbers; pg gives timestamptz as a Date, text[] as an array, jsonb as the
 * object, a boolean as one, and bigint as text. The readers here take either. What is written is
 * checked and normalised here for both: a timestamp as Date.toISOString writes it (UTC,
 * milliseconds; one that is not a date is refused), so that SQLite's sort and compare as text and
 * read back as PostgreSQL's do, and money in whole nano-units. The lists of a key go as arrays; the
 * SQLite store writes them as JSON text (sqlite/rows.ts).
 */
import type { AccountRecord, AlertRecord, AuditEvent, Budget, EndUserQuota, IdentityRecord, KeyAuthRecord, KeyRecord, MembershipRecord, OneTimeToken, PersonRecord, Role, SessionRecord } from '../types';

/** A timestamp column: ISO text (SQLite), or a Date (pg's timestamptz). */
export type InstantColumn = string | Date;
/** A whole number column: a number, or text (pg's bigint). */
export type CountColumn = number | string;
/** A boolean column: 0 or 1 (SQLite), or a boolean. */
export type FlagColumn = number | boolean;
/** A list of strings: JSON text (SQLite), or an array (pg's text[]). */
export type ListColumn = string | string[];
/** An object: JSON text (SQLite), or the object (pg's jsonb). */
export type JsonColumn<T> = string | T;

export interface KeyRow {
  id: string;
  name: string;
  digest: string;
  prefix: string;
  created_at: InstantColumn;
  revoked_at: InstantColumn | null;
  expires_at: InstantColumn | null;
  models: ListColumn;
  endpoints: ListColumn;
  allowed_ips: ListColumn | null;
  rpm: number | null;
  tpm: number | null;
  max_concurrent: number | null;
  account_id: string;
  created_by: string;
  tokens_per_day: CountColumn | null;
  tokens_per_month: CountColumn | null;
  budget_day_nanos: CountColumn | null;
  budget_month_nanos: CountColumn | null;
  previous_digest?: string | null;
  previous_until?: InstantColumn | null;
  previous_for?: string | null;
  /** The key's usage row, where it is joined (none: zeros and null). */
  last_used_at?: InstantColumn | null;
  requests_total?: CountColumn | null;
  prompt_tokens_total?: CountColumn | null;
  completion_tokens_total?: CountColumn | null;
}
export interface AccountRow {
  id: string;
  name: string;
  created_at: InstantColumn;
  tokens_per_day: CountColumn | null;
  tokens_per_month: CountColumn | null;
  budget_day_nanos: CountColumn | null;
  budget_month_nanos: CountColumn | null;
  key_max_lifetime_days: number | null;
  end_user_tokens_per_day?: CountColumn | null;
  end_user_budget_day_nanos?: CountColumn | null;
  alert_webhook_url?: string | null;
}
export interface PersonRow {
  email: string;
  admin: FlagColumn;
  password_hash: string | null;
  created_at: InstantColumn;
  password_with_oidc: FlagColumn;
}
export interface IdentityRow {
  issuer: string;
  subject: string;
  email: string;
  created_at: InstantColumn;
}
export interface MemberRow {
  account_id: string;
  email: string;
  role: Role;
  added_at: InstantColumn;
  added_by: string;
}
export interface SessionRow {
  digest: string;
  email: string;
  account_id: string | null;
  via: SessionRecord['via'];
  created_at: InstantColumn;
  last_seen_at: InstantColumn;
  expires_at: InstantColumn;
}
export interface TokenRow {
  digest: string;
  kind: OneTimeToken['kind'];
  email: string | null;
  data: JsonColumn<Record<string, string>>;
  expires_at: InstantColumn;
}
export interface AuditRow {
  id: string;
  account_id: string | null;
  at: InstantColumn;
  actor: string;
  action: string;
  target: string;
  client: string | null;
  details: JsonColumn<Record<string, unknown>>;
}
export interface AlertRow {
  id: string;
  account_id: string;
  key_id: string | null;
  kind: AlertRecord['kind'];
  period: AlertRecord['period'];
  period_start: string;
  threshold: number;
  spent: number;
  lim: number;
  at: InstantColumn;
  sent_at: InstantColumn | null;
}

const isoOf = (value: InstantColumn): string => (typeof value === 'string' ? value : value.toISOString());
const maybeIsoOf = (value: InstantColumn | null | undefined): string | null => (value === null || value === undefined ? null : isoOf(value));
const maybeNumber = (value: CountColumn | null | undefined): number | null => (value === null || value === undefined ? null : Number(value));
const flagOf = (value: FlagColumn): boolean => value === true || value === 1;
const listOf = (value: ListColumn): string[] => (typeof value === 'string' ? (JSON.parse(value) as string[]) : value);
const jsonOf = <T>(value: JsonColumn<T>): T => (typeof value === 'string' ? (JSON.parse(value) as T) : value);

/** An instant as the stores keep it; refuses what is not one (a record the request path could not use). */
export function instant(value: string | Date): string {
  const date = value instanceof Date ? value : new Date(value);
  if (Number.isNaN(date.getTime())) throw new Error('not a date');
  return date.toISOString();
}
export const maybeInstant = (value: string | Date | null | undefined): string | null => (value === null || value === undefined ? null : instant(value));

/**
 * A budget is kept in whole nano-units of the currency (1e-9), as costs are, so that what was spent
 * and what may be spent compare exactly; a record holds it in units.
 */
export function nanosOf(amount: number | null | undefined): number | null {
  return amount === null || amount === undefined ? null : Math.round(amount * 1e9);
}
export function budgetOf(row: { budget_day_nanos: CountColumn | null; budget_month_nanos: CountColumn | null }): Budget {
  return {
    perDay: row.budget_day_nanos === null ? null : Number(row.budget_day_nanos) / 1e9,
    perMonth: row.budget_month_nanos === null ? null : Number(row.budget_month_nanos) / 1e9,
  };
}

/** An account's end user quota from its columns: absent when both are null. */
export function endUserQuotaOf(tokens: CountColumn | null | undefined, budgetNanos: CountColumn | null | undefined): { endUserQuota?: EndUserQuota } {
  if ((tokens === null || tokens === undefined) && (budgetNanos === null || budgetNanos === undefined)) return {};
  return { endUserQuota: { tokensPerDay: maybeNumber(tokens), budgetPerDay: budgetNanos === null || budgetNanos === undefined ? null : Number(budgetNanos) / 1e9 } };
}

/** A quota counter's period: its scope's last part (`...:d:2026-11-27`, `...:m:2026-11`). */
export const periodOf = (scope: string): string => scope.slice(scope.lastIndexOf(':') + 1);
/** The UTC day (YYYY-MM-DD) `days` days before `now`. */
export const daysBefore = (now: Date, days: number): string => new Date(now.getTime() - days * 86_400_000).toISOString().slice(0, 10);

/** A key's row in chatgate_keys, its lists as arrays (its usage goes to chatgate_key_usage: usageParams). */
export const keyParams = (k: KeyRecord) => ({
  id: k.id,
  name: k.name,
  digest: k.digest,
  prefix: k.prefix,
  created_at: instant(k.createdAt),
  revoked_at: maybeInstant(k.revokedAt),
  expires_at: maybeInstant(k.expiresAt),
  models: k.models,
  endpoints: k.endpoints,
  allowed_ips: k.allowedIps,
  rpm: k.rateLimit.requestsPerMinute,
  tpm: k.rateLimit.tokensPerMinute,
  max_concurrent: k.rateLimit.maxConcurrent,
  account_id: k.accountId,
  created_by: k.createdBy,
  tokens_per_day: k.quota.tokensPerDay,
  tokens_per_month: k.quota.tokensPerMonth,
  budget_day_nanos: nanosOf(k.budget.perDay),
  budget_month_nanos: nanosOf(k.budget.perMonth),
});
/** The key's usage row, when it has used anything (a key made new has none: zeros and null). */
export const usageParams = (k: KeyRecord) =>
  k.usage.requests === 0 && k.usage.promptTokens === 0 && k.usage.completionTokens === 0 && k.lastUsedAt === null
    ? undefined
    : { key_id: k.id, requests: k.usage.requests, prompt_tokens: k.usage.promptTokens, completion_tokens: k.usage.completionTokens, last_used_at: maybeInstant(k.lastUsedAt) };

/** A key with its usage (zeros and null where it has no usage row). */
export const toKey = (row: KeyRow): KeyRecord => ({
  id: row.id,
  name: row.name,
  digest: row.digest,
  prefix: row.prefix,
  createdAt: isoOf(row.created_at),
  revokedAt: maybeIsoOf(row.revoked_at),
  expiresAt: maybeIsoOf(row.expires_at),
  models: listOf(row.models),
  endpoints: listOf(row.endpoints),
  allowedIps: row.allowed_ips === null ? [] : listOf(row.allowed_ips),
  lastUsedAt: maybeIsoOf(row.last_used_at),
  rateLimit: { requestsPerMinute: row.rpm, tokensPerMinute: row.tpm, maxConcurrent: row.max_concurrent },
  usage: { requests: Number(row.requests_total ?? 0), promptTokens: Number(row.prompt_tokens_total ?? 0), completionTokens: Number(row.completion_tokens_total ?? 0) },
  accountId: row.account_id,
  createdBy: row.created_by,
  quota: { tokensPerDay: maybeNumber(row.tokens_per_day), tokensPerMonth: maybeNumber(row.tokens_per_month) },
  budget: budgetOf(row),
  // A grace holds while the key's secret is the one its rotation made (a later change ends it).
  ...(row.previous_digest && row.previous_until && row.previous_for === row.digest ? { previousKeyExpiresAt: isoOf(row.previous_until) } : {}),
});
/** A key as authenticating needs it, read from its row alone (no usage). */
export function toAuthRecord(row: KeyRow): KeyAuthRecord {
  const { lastUsedAt: _lastUsedAt, usage: _usage, ...record } = toKey(row);
  return record;
}

export const accountParams = (a: AccountRecord) => ({
  id: a.id,
  name: a.name,
  created_at: instant(a.createdAt),
  tokens_per_day: a.quota.tokensPerDay,
  tokens_per_month: a.quota.tokensPerMonth,
  budget_day_nanos: nanosOf(a.budget.perDay),
  budget_month_nanos: nanosOf(a.budget.perMonth),
  key_max_lifetime_days: a.keyPolicy?.maxLifetimeDays ?? null,
  end_user_tokens_per_day: a.endUserQuota?.tokensPerDay ?? null,
  end_user_budget_day_nanos: nanosOf(a.endUserQuota?.budgetPerDay ?? null),
  alert_webhook_url: a.alertWebhookUrl ?? null,
});
export const toAccount = (row: AccountRow): AccountRecord => ({
  id: row.id,
  name: row.name,
  createdAt: isoOf(row.created_at),
  quota: { tokensPerDay: maybeNumber(row.tokens_per_day), tokensPerMonth: maybeNumber(row.tokens_per_month) },
  budget: budgetOf(row),
  ...(row.key_max_lifetime_days !== null && row.key_max_lifetime_days !== undefined ? { keyPolicy: { maxLifetimeDays: row.key_max_lifetime_days } } : {}),
  ...endUserQuotaOf(row.end_user_tokens_per_day, row.end_user_budget_day_nanos),
  ...(row.alert_webhook_url ? { alertWebhookUrl: row.alert_webhook_url } : {}),
});

export const personParams = (p: PersonRecord) => ({
  email: p.email,
  admin: p.admin ? 1 : 0,
  password_hash: p.passwordHash,
  created_at: instant(p.createdAt),
  password_with_oidc: p.passwordWithOidc === undefined ? null : p.passwordWithOidc ? 1 : 0,
});
export const toPerson = (row: PersonRow): PersonRecord => ({
  email: row.email,
  admin: flagOf(row.admin),
  passwordHash: row.password_hash,
  createdAt: isoOf(row.created_at),
  passwordWithOidc: flagOf(row.password_with_oidc),
});

export const identityParams = (i: IdentityRecord) => ({ issuer: i.issuer, subject: i.subject, email: i.email, created_at: instant(i.createdAt) });
export const toIdentity = (row: IdentityRow): IdentityRecord => ({ issuer: row.issuer, subject: row.subject, email: row.email, createdAt: isoOf(row.created_at) });

export const memberParams = (m: MembershipRecord) => ({ account_id: m.accountId, email: m.email, role: m.role, added_at: instant(m.addedAt), added_by: m.addedBy });
export const toMember = (row: MemberRow): MembershipRecord => ({ accountId: row.account_id, email: row.email, role: row.role, addedAt: isoOf(row.added_at), addedBy: row.added_by });

export const sessionParams = (s: SessionRecord) => ({
  digest: s.digest,
  email: s.email,
  account_id: s.accountId,
  via: s.via,
  created_at: instant(s.createdAt),
  last_seen_at: instant(s.lastSeenAt),
  expires_at: instant(s.expiresAt),
});
export const toSession = (row: SessionRow): SessionRecord => ({
  digest: row.digest,
  email: row.email,
  accountId: row.account_id,
  via: row.via,
  createdAt: isoOf(row.created_at),
  lastSeenAt: isoOf(row.last_seen_at),
  expiresAt: isoOf(row.expires_at),
});

export const tokenParams = (t: OneTimeToken) => ({ digest: t.digest, kind: t.kind, email: t.email, data: JSON.stringify(t.data), expires_at: instant(t.expiresAt) });
export const toToken = (row: TokenRow): OneTimeToken => ({ digest: row.digest, kind: row.kind, email: row.email, data: jsonOf(row.data), expiresAt: isoOf(row.expires_at) });
/** The token a row holds, unless it expired by `now` (an expired one is never used, whether or not it is gone yet). */
export function liveToken(row: TokenRow | undefined, now: Date): OneTimeToken | undefined {
  const token = row && toToken(row);
  return token && Date.parse(token.expiresAt) > now.getTime() ? token : undefined;
}

export const auditParams = (e: AuditEvent) => ({
  id: e.id,
  account_id: e.accountId,
  at: instant(e.at),
  actor: e.actor,
  action: e.action,
  target: e.target,
  client: e.client,
  details: JSON.stringify(e.details),
});
export const toAudit = (row: AuditRow): AuditEvent => ({
  id: row.id,
  accountId: row.account_id,
  at: isoOf(row.at),
  actor: row.actor,
  action: row.action,
  target: row.target,
  client: row.client,
  details: jsonOf(row.details),
});

export const toAlert = (row: AlertRow): AlertRecord => ({
  id: row.id,
  accountId: row.account_id,
  keyId: row.key_id,
  kind: row.kind,
  period: row.period,
  periodStart: row.period_start,
  threshold: row.threshold,
  spent: row.spent,
  limit: row.lim,
  at: isoOf(row.at),
  sentAt: maybeIsoOf(row.sent_at),
});
