/** PostgreSQL rows as the driver returns them, and the records they become. */
import { budgetOf, endUserQuotaOf } from '../sqlite/rows';
import type { AccountRecord, AlertRecord, IdentityRecord, KeyAuthRecord, KeyRecord, MembershipRecord, PersonRecord, Role, SessionRecord } from '../types';

export interface KeyRow {
  id: string;
  name: string;
  digest: string;
  prefix: string;
  created_at: Date;
  revoked_at: Date | null;
  expires_at: Date | null;
  models: string[];
  endpoints: string[];
  allowed_ips: string[] | null;
  last_used_at?: Date | null;
  rpm: number | null;
  tpm: number | null;
  max_concurrent: number | null;
  /** bigint columns arrive as strings */
  requests_total?: string | null;
  prompt_tokens_total?: string | null;
  completion_tokens_total?: string | null;
  account_id: string;
  created_by: string;
  tokens_per_day: string | null;
  tokens_per_month: string | null;
  budget_day_nanos: string | null;
  budget_month_nanos: string | null;
  previous_digest?: string | null;
  previous_until?: Date | null;
  previous_for?: string | null;
}
export function toRecord(row: KeyRow): KeyRecord {
  return {
    ...toAuthRecord(row),
    lastUsedAt: row.last_used_at?.toISOString() ?? null,
    usage: { requests: Number(row.requests_total ?? 0), promptTokens: Number(row.prompt_tokens_total ?? 0), completionTokens: Number(row.completion_tokens_total ?? 0) },
  };
}

export function toAuthRecord(row: KeyRow): KeyAuthRecord {
  return {
    id: row.id,
    name: row.name,
    digest: row.digest,
    prefix: row.prefix,
    createdAt: row.created_at.toISOString(),
    revokedAt: row.revoked_at?.toISOString() ?? null,
    expiresAt: row.expires_at?.toISOString() ?? null,
    models: row.models,
    endpoints: row.endpoints,
    allowedIps: row.allowed_ips ?? [],
    rateLimit: { requestsPerMinute: row.rpm, tokensPerMinute: row.tpm, maxConcurrent: row.max_concurrent },
    accountId: row.account_id,
    createdBy: row.created_by,
    quota: { tokensPerDay: nullableNumber(row.tokens_per_day), tokensPerMonth: nullableNumber(row.tokens_per_month) },
    budget: budgetOf(row),
    // A grace holds while the key's secret is the one its rotation made (a later change ends it).
    ...(row.previous_digest && row.previous_until && row.previous_for === row.digest ? { previousKeyExpiresAt: row.previous_until.toISOString() } : {}),
  };
}

const nullableNumber = (value: string | null) => (value === null ? null : Number(value));

export interface AccountRow {
  id: string;
  name: string;
  created_at: Date;
  tokens_per_day: string | null;
  tokens_per_month: string | null;
  budget_day_nanos: string | null;
  budget_month_nanos: string | null;
  key_max_lifetime_days: number | null;
  end_user_tokens_per_day?: string | null;
  end_user_budget_day_nanos?: string | null;
  alert_webhook_url?: string | null;
}
export interface PersonRow {
  email: string;
  admin: boolean;
  password_hash: string | null;
  created_at: Date;
  password_with_oidc: boolean;
}
export interface IdentityRow {
  issuer: string;
  subject: string;
  email: string;
  created_at: Date;
}
export interface MemberRow {
  account_id: string;
  email: string;
  role: Role;
  added_at: Date;
  added_by: string;
}
export interface SessionRow {
  digest: string;
  email: string;
  account_id: string | null;
  via: SessionRecord['via'];
  created_at: Date;
  last_seen_at: Date;
  expires_at: Date;
}
export interface TokenRow {
  digest: string;
  kind: string;
  email: string | null;
  data: Record<string, string>;
  expires_at: Date;
}
export interface AuditRow {
  id: string;
  account_id: string | null;
  at: Date;
  actor: string;
  action: string;
  target: string;
  client: string | null;
  details: Record<string, unknown>;
}

export const toAccount = (row: AccountRow): AccountRecord => ({
  id: row.id,
  name: row.name,
  createdAt: row.created_at.toISOString(),
  quota: { tokensPerDay: nullableNumber(row.tokens_per_day), tokensPerMonth: nullableNumber(row.tokens_per_month) },
  budget: budgetOf(row),
  ...(row.key_max_lifetime_days !== null && row.key_max_lifetime_days !== undefined ? { keyPolicy: { maxLifetimeDays: row.key_max_lifetime_days } } : {}),
  ...endUserQuotaOf(row.end_user_tokens_per_day, row.end_user_budget_day_nanos),
  ...(row.alert_webhook_url ? { alertWebhookUrl: row.alert_webhook_url } : {}),
});
export const toPerson = (row: PersonRow): PersonRecord => ({
  email: row.email,
  admin: row.admin,
  passwordHash: row.password_hash,
  createdAt: row.created_at.toISOString(),
  passwordWithOidc: row.password_with_oidc,
});
export const toIdentity = (row: IdentityRow): IdentityRecord => ({ issuer: row.issuer, subject: row.subject, email: row.email, createdAt: row.created_at.toISOString() });
export const toMember = (row: MemberRow): MembershipRecord => ({ accountId: row.account_id, email: row.email, role: row.role, addedAt: row.added_at.toISOString(), addedBy: row.added_by });
export const toSession = (row: SessionRow): SessionRecord => ({
  digest: row.digest,
  email: row.email,
  accountId: row.account_id,
  via: row.via,
  createdAt: row.created_at.toISOString(),
  lastSeenAt: row.last_seen_at.toISOString(),
  expiresAt: row.expires_at.toISOString(),
});

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
  at: Date;
  sent_at: Date | null;
}
export const toAlert = (row: AlertRow): AlertRecord => ({ id: row.id, accountId: row.account_id, keyId: row.key_id, kind: row.kind, period: row.period, periodStart: row.period_start, threshold: row.threshold, spent: row.spent, limit: row.lim, at: row.at.toISOString(), sentAt: row.sent_at?.toISOString() ?? null });
