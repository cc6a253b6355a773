/**
 * Pure: which columns a change of a key or an account sets, and to what, for both SQL stores: a
 * field the change leaves out is left as it is; a timestamp is checked and normalised, money goes in
 * nano-units, a key's lists as arrays (the SQLite store writes them as JSON text).
 */
import type { AccountChanges, KeyChanges } from '../types';
import { maybeInstant, nanosOf } from './rows';

type ColumnUpdate<C> = readonly [column: string, pick: (changes: C) => unknown];

export const KEY_UPDATES: ReadonlyArray<ColumnUpdate<KeyChanges>> = [
  ['name', (c) => c.name],
  ['models', (c) => c.models],
  ['endpoints', (c) => c.endpoints],
  ['allowed_ips', (c) => c.allowedIps],
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

export const ACCOUNT_UPDATES: ReadonlyArray<ColumnUpdate<AccountChanges>> = [
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

/** The columns a change sets, each with its value, in the order above (none: nothing to write). */
export function columnsSet<C>(updates: ReadonlyArray<ColumnUpdate<C>>, changes: C): Array<readonly [column: string, value: unknown]> {
  return updates.map(([column, pick]) => [column, pick(changes)] as const).filter(([, value]) => value !== undefined);
}
