/**
 * Pure: the embedded store's rows and the records they hold, both ways. Timestamps are kept as
 * Date.toISOString writes them (UTC, milliseconds), whatever form a caller gave, so that they sort
 * and compare as text and read back as PostgreSQL's do.
 */
import type { AccountRecord, AuditEvent, Budget, EndUserQuota, IdentityRecord, KeyRecord, MembershipRecord, OneTimeToken, PersonRecord, Role, SessionRecord } from '../types';

export interface KeyRow {
  id: string;
  name: string;
  digest: string;
  prefix: string;
  created_at: string;
  revoked_at: string | null;
  expires_at: string | null;
  models: string;
  endpoints: string;
  allowed_ips: string;
  last_used_at: string | null;
  rpm: number | null;
  tpm: number | null;
  max_concurrent: number | null;
  requests_total: number;
  prompt_tokens_total: number;
  completion_tokens_total: number;
  account_id: string;
  created_by: string;
  tokens_per_day: number | null;
  tokens_per_month: number | null;
  budget_day_nanos: number | null;
  budget_month_nanos: number | null;
  previous_digest: string | null;
  previous_until: string | null;
  previous_for: string | null;
}

export interface AccountRow {
  id: string;
  name: string;
  created_at: string;
  tokens_per_day: number | null;
  tokens_per_month: number | null;
  budget_day_nanos: number | null;
  budget_month_nanos: number | null;
  key_max_lifetime_days: number | null;
  end_user_tokens_per_day?: number | null;
  end_user_budget_day_nanos?: number | null;
  alert_webhook_url?: string | null;
}
export interface PersonRow {
  email: string;
  admin: number;
  password_hash: string | null;
  created_at: string;
  password_with_oidc: number;
}
export interface IdentityRow {
  issuer: string;
  subject: string;
  email: string;
  created_at: string;
}
export interface MemberRow {
  account_id: string;
  email: string;
  role: Role;
  added_at: string;
  added_by: string;
}
export interface SessionRow {
  digest: string;
  email: string;
  account_id: string | null;
  via: SessionRecord['via'];
  created_at: string;
  last_seen_at: string;
  expires_at: string;
}
export interface TokenRow {
  digest: string;
  kind: OneTimeToken['kind'];
  email: string | null;
  data: string;
  expires_at: string;
}
export interface AuditRow {
  id: string;
  account_id: string | null;
  at: string;
  actor: string;
  action: string;
  target: string;
  client: string | null;
  details: string;
}

/** An instant as the store keeps it; refuses what is not one (a record the request path could not use). */
export function instant(value: string | Date): string {
  const date = value instanceof Date ? value : new Date(value);
  if (Number.isNaN(date.getTime())) throw new Error('not a date');
  return date.toISOString();
}
export const maybeInstant = (value: string | Date | null | undefined): string | null => (value === null || value === undefined ? null : instant(value));

/** A key's row in chatgate_keys (its usage goes to chatgate_key_usage: usageParams). */
export const keyParams = (k: KeyRecord) => ({
  id: k.id,
  name: k.name,
  digest: k.digest,
  prefix: k.prefix,
  created_at: instant(k.createdAt),
  revoked_at: maybeInstant(k.revokedAt),
  expires_at: maybeInstant(k.expiresAt),
  models: JSON.stringify(k.models),
  endpoints: JSON.stringify(k.endpoints),
  allowed_ips: JSON.stringify(k.allowedIps),
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
export const KEY_COLUMNS = Object.keys(keyParams({ rateLimit: {}, usage: {}, quota: {}, budget: {}, createdAt: new Date(0).toISOString() } as KeyRecord));
/** The key's usage row, when it has used anything (a key made new has none: zeros and null). */
export const usageParams = (k: KeyRecord) =>
  k.usage.requests === 0 && k.usage.promptTokens === 0 && k.usage.completionTokens === 0 && k.lastUsedAt === null
    ? undefined
    : { key_id: k.id, requests: k.usage.requests, prompt_tokens: k.usage.promptTokens, completion_tokens: k.usage.completionTokens, last_used_at: maybeInstant(k.lastUsedAt) };
export const USAGE_COLUMNS = ['key_id', 'requests', 'prompt_tokens', 'completion_tokens', 'last_used_at'];
/** A key with its usage (zeros and null when it has none). */
export const KEY_SELECT = `select k.*, coalesce(u.requests, 0) as requests_total, coalesce(u.prompt_tokens, 0) as prompt_tokens_total,
  coalesce(u.completion_tokens, 0) as completion_tokens_total, u.last_used_at from chatgate_keys k left join chatgate_key_usage u on u.key_id = k.id`;

export const toKey = (row: KeyRow): KeyRecord => ({
  id: row.id,
  name: row.name,
  digest: row.digest,
  prefix: row.prefix,
  createdAt: row.created_at,
  revokedAt: row.revoked_at,
  expiresAt: row.expires_at,
  models: JSON.parse(row.models) as string[],
  endpoints: JSON.parse(row.endpoints) as string[],
  allowedIps: JSON.parse(row.allowed_ips) as string[],
  lastUsedAt: row.last_used_at,
  rateLimit: { requestsPerMinute: row.rpm, tokensPerMinute: row.tpm, maxConcurrent: row.max_concurrent },
  usage: { requests: row.requests_total, promptTokens: row.prompt_tokens_total, completionTokens: row.completion_tokens_total },
  accountId: row.account_id,
  createdBy: row.created_by,
  quota: { tokensPerDay: row.tokens_per_day, tokensPerMonth: row.tokens_per_month },
  budget: budgetOf(row),
  // A grace holds while the key's secret is the one its rotation made (a later change ends it).
  ...(row.previous_digest !== null && row.previous_until !== null && row.previous_for === row.digest ? { previousKeyExpiresAt: row.previous_until } : {}),
});

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
  createdAt: row.created_at,
  quota: { tokensPerDay: row.tokens_per_day, tokensPerMonth: row.tokens_per_month },
  budget: budgetOf(row),
  ...(row.key_max_lifetime_days !== null && row.key_max_lifetime_days !== undefined ? { keyPolicy: { maxLifetimeDays: row.key_max_lifetime_days } } : {}),
  ...endUserQuotaOf(row.end_user_tokens_per_day, row.end_user_budget_day_nanos),
  ...(row.alert_webhook_url ? { alertWebhookUrl: row.alert_webhook_url } : {}),
});

/** An account's end user quota from its columns: absent when both are null. */
export function endUserQuotaOf(tokens: number | string | null | undefined, budgetNanos: number | string | null | undefined): { endUserQuota?: EndUserQuota } {
  if ((tokens === null || tokens === undefined) && (budgetNanos === null || budgetNanos === undefined)) return {};
  return { endUserQuota: { tokensPerDay: tokens === null || tokens === undefined ? null : Number(tokens), budgetPerDay: budgetNanos === null || budgetNanos === undefined ? null : Number(budgetNanos) / 1e9 } };
}

/**
 * A budget is kept in whole nano-units of the currency (1e-9), as costs are, so that what was spent
 * and what may be spent compare exactly; a record holds it in units. Both SQL stores use these.
 */
export function nanosOf(amount: number | null | undefined): number | null {
  return amount === null || amount === undefined ? null : Math.round(amount * 1e9);
}
export function budgetOf(row: { budget_day_nanos: number | string | null; budget_month_nanos: number | string | null }): Budget {
  return {
    perDay: row.budget_day_nanos === null ? null : Number(row.budget_day_nanos) / 1e9,
    perMonth: row.budget_month_nanos === null ? null : Number(row.budget_month_nanos) / 1e9,
  };
}

export const personParams = (p: PersonRecord) => ({
  email: p.email,
  admin: p.admin ? 1 : 0,
  password_hash: p.passwordHash,
  created_at: instant(p.createdAt),
  password_with_oidc: p.passwordWithOidc === undefined ? null : p.passwordWithOidc ? 1 : 0,
});
export const toPerson = (row: PersonRow): PersonRecord => ({
  email: row.email,
  admin: row.admin === 1,
  passwordHash: row.password_hash,
  createdAt: row.created_at,
  passwordWithOidc: row.password_with_oidc === 1,
});

export const identityParams = (i: IdentityRecord) => ({ issuer: i.issuer, subject: i.subject, email: i.email, created_at: instant(i.createdAt) });
export const toIdentity = (row: IdentityRow): IdentityRecord => ({ issuer: row.issuer, subject: row.subject, email: row.email, createdAt: row.created_at });

export const memberParams = (m: MembershipRecord) => ({ account_id: m.accountId, email: m.email, role: m.role, added_at: instant(m.addedAt), added_by: m.addedBy });
export const toMember = (row: MemberRow): MembershipRecord => ({ accountId: row.account_id, email: row.email, role: row.role, addedAt: row.added_at, addedBy: row.added_by });

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
  createdAt: row.created_at,
  lastSeenAt: row.last_seen_at,
  expiresAt: row.expires_at,
});

export const tokenParams = (t: OneTimeToken) => ({ digest: t.digest, kind: t.kind, email: t.email, data: JSON.stringify(t.data), expires_at: instant(t.expiresAt) });
export const toToken = (row: TokenRow): OneTimeToken => ({
  digest: row.digest,
  kind: row.kind,
  email: row.email,
  data: JSON.parse(row.data) as Record<string, string>,
  expiresAt: row.expires_at,
});

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
  at: row.at,
  actor: row.actor,
  action: row.action,
  target: row.target,
  client: row.client,
  details: JSON.parse(row.details) as Record<string, unknown>,
});

/** `insert into <table> (a, b) values (@a, @b)`, with a verb (`insert or ignore`) of the caller's choice. */
export function insertSql(verb: string, table: string, columns: readonly string[]): string {
  return `${verb} into ${table} (${columns.join(', ')}) values (${columns.map((c) => `@${c}`).join(', ')})`;
}

/** A quota counter's period: its scope's last part (`...:d:2026-11-27`, `...:m:2026-11`). */
export const periodOf = (scope: string): string => scope.slice(scope.lastIndexOf(':') + 1);
