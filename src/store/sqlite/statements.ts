/** The embedded store's longer statements and column lists (store.ts runs them). */
import type { AccountChanges, KeyChanges } from '../types';
import { maybeInstant, nanosOf } from './rows';

export const KEY_UPDATES: ReadonlyArray<[column: string, pick: (c: KeyChanges) => unknown]> = [
  ['name', (c) => c.name],
  ['models', (c) => c.models && JSON.stringify(c.models)],
  ['endpoints', (c) => c.endpoints && JSON.stringify(c.endpoints)],
  ['allowed_ips', (c) => c.allowedIps && JSON.stringify(c.allowedIps)],
  ['expires_at', (c) => (c.expiresAt === undefined ? undefined : maybeInstant(c.expiresAt))],
  ['rpm', (c) => c.rateLimit?.requestsPerMinute],
  ['tpm', (c) => c.rateLimit?.tokensPerMinute],
  ['max_concurrent', (c) => c.rateLimit?.maxConcurrent],
  ['tokens_per_day', (c) => c.quota?.tokensPerDay],
  ['tokens_per_month', (c) => c.quota?.tokensPerMonth],
  ['budget_day_nanos', (c) => (c.budget?.perDay === undefined ? undefined : nanosOf(c.budget.perDay))],
  ['budget_month_nanos', (c) => (c.budget?.perMonth === undefined ? undefined : nanosOf(c.budget.perMonth))],
  ['created_by', (c) => c.createdBy],
];

export const ACCOUNT_UPDATES: ReadonlyArray<[column: string, pick: (c: AccountChanges) => unknown]> = [
  ['name', (c) => c.name],
  ['tokens_per_day', (c) => c.quota?.tokensPerDay],
  ['tokens_per_month', (c) => c.quota?.tokensPerMonth],
  ['budget_day_nanos', (c) => (c.budget?.perDay === undefined ? undefined : nanosOf(c.budget.perDay))],
  ['budget_month_nanos', (c) => (c.budget?.perMonth === undefined ? undefined : nanosOf(c.budget.perMonth))],
  ['key_max_lifetime_days', (c) => (c.keyPolicy === undefined ? undefined : (c.keyPolicy?.maxLifetimeDays ?? null))],
  ['end_user_tokens_per_day', (c) => (c.endUserQuota === undefined ? undefined : (c.endUserQuota?.tokensPerDay ?? null))],
  ['end_user_budget_day_nanos', (c) => (c.endUserQuota === undefined ? undefined : nanosOf(c.endUserQuota?.budgetPerDay ?? null))],
  ['alert_webhook_url', (c) => c.alertWebhookUrl],
];

/** Adds to quota counters in one statement: `?` is a JSON array of [scope, period, tokens]. */
export const ADD_QUOTA_USAGE = `insert into chatgate_quota_usage as q (scope, period, tokens)
  select value ->> 0, value ->> 1, value ->> 2 from json_each(?) where true
  on conflict (scope) do update set tokens = q.tokens + excluded.tokens`;

/** Quota counters' totals in one statement: `?` is a JSON array of scopes (a scope never counted has no row). */
export const QUOTA_USAGE = 'select scope, tokens from chatgate_quota_usage where scope in (select value from json_each(?))';

/** One counter, made at 1 with its expiry, or counted up while it lasts (an expired one starts again). */
export const BUMP_COUNTER = `insert into chatgate_counters as c (name, count, expires_at) values (@name, 1, @expiresAt)
  on conflict (name) do update set
    count = case when c.expires_at > @now then c.count + 1 else 1 end,
    expires_at = case when c.expires_at > @now then c.expires_at else excluded.expires_at end
  returning count`;

export const ACCOUNT_COLUMNS = ['id', 'name', 'created_at', 'tokens_per_day', 'tokens_per_month', 'budget_day_nanos', 'budget_month_nanos', 'key_max_lifetime_days', 'end_user_tokens_per_day', 'end_user_budget_day_nanos', 'alert_webhook_url'];
export const IDENTITY_COLUMNS = ['issuer', 'subject', 'email', 'created_at'];
export const MEMBER_COLUMNS = ['account_id', 'email', 'role', 'added_at', 'added_by'];
export const SESSION_COLUMNS = ['digest', 'email', 'account_id', 'via', 'created_at', 'last_seen_at', 'expires_at'];
export const TOKEN_COLUMNS = ['digest', 'kind', 'email', 'data', 'expires_at'];
export const AUDIT_COLUMNS = ['id', 'account_id', 'at', 'actor', 'action', 'target', 'client', 'details'];

export const daysBefore = (now: Date, days: number) => new Date(now.getTime() - days * 86_400_000).toISOString().slice(0, 10);
