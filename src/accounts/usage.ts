/** Pure: the date range a usage query covers, usage and its breakdowns as the APIs answer them, and as CSV. */
import { errors } from '../errors';
import type { BreakdownQuery, UsageDay, UsageShare } from '../store/types';
import { END_USER_DIGEST, endUserDigest } from './end-users';
import { amountOf } from './prices';
import { workloadSubject } from '../auth/workload-identity';

const DAY = /^\d{4}-\d{2}-\d{2}$/;

/** `from`/`to` as YYYY-MM-DD (UTC); by default the last 30 days, today included. */
export function dateRange(from: unknown, to: unknown, now = new Date()): { from: string; to: string } {
  const day = (value: unknown, field: string, fallback: string) => {
    if (value === undefined) return fallback;
    // A day that is one (2026-02-30 is not: Date.parse takes it as March 2), from 1970 on.
    const at = typeof value === 'string' && DAY.test(value) && value >= '1970-01-01' ? Date.parse(`${value}T00:00:00Z`) : Number.NaN;
    const real = !Number.isNaN(at) && new Date(at).toISOString().slice(0, 10) === value;
    if (!real) throw errors.invalidBody(field, `'${field}' must be a date such as 2026-11-27.`);
    return value;
  };
  const today = now.toISOString().slice(0, 10);
  const monthAgo = new Date(now.getTime() - 29 * 86_400_000).toISOString().slice(0, 10);
  return { from: day(from, 'from', monthAgo), to: day(to, 'to', today) };
}

/** What a breakdown query may name. */
const BREAKDOWN_FIELDS = new Set(['by', 'from', 'to', 'keyId', 'endUser', 'limit']);
/** Rows a breakdown answers by default, and at most. */
export const BREAKDOWN_LIMIT = 100;
export const BREAKDOWN_MAX = 1000;
export const BREAKDOWN_MAX_DAYS = 366;

/**
 * A breakdown's query string: `by` (model or endUser), `from`/`to`, and optionally `keyId`, `endUser`
 * (an end user's digest, or the id the client sent, made into its digest) and `limit`. Anything else,
 * or a field given twice, is refused.
 */
export function breakdownQuery(query: Record<string, unknown>, accountId: string, now = new Date()): { from: string; to: string; query: BreakdownQuery } {
  for (const [field, value] of Object.entries(query)) {
    if (!BREAKDOWN_FIELDS.has(field)) throw errors.invalidBody(field, `Unknown query parameter '${field}': a breakdown takes by, from, to, keyId, endUser and limit.`);
    if (typeof value !== 'string') throw errors.invalidBody(field, `'${field}' must be given once.`);
  }
  const { by, keyId, endUser, limit } = query as Record<string, string | undefined>;
  if (by !== 'model' && by !== 'endUser') throw errors.invalidBody('by', "'by' must be 'model' or 'endUser'.");
  if (keyId !== undefined && !/^key_[A-Za-z0-9_-]{1,64}$/.test(keyId)) throw errors.invalidBody('keyId', "'keyId' must be a key's id (key_...).");
  if (endUser !== undefined && (endUser === '' || endUser.length > 256)) throw errors.invalidBody('endUser', "'endUser' must be an end user's id (at most 256 characters) or its digest (eu_...).");
  const rows = limit === undefined ? BREAKDOWN_LIMIT : Number(limit);
  if (!Number.isInteger(rows) || rows < 1 || rows > BREAKDOWN_MAX || !/^\d+$/.test(limit ?? '1')) throw errors.invalidBody('limit', `'limit' must be a whole number from 1 to ${BREAKDOWN_MAX}.`);
  const digest = endUser === undefined ? undefined : END_USER_DIGEST.test(endUser) ? endUser : endUserDigest(accountId, endUser);
  const range = dateRange(query.from, query.to, now);
  // Days outside whole months are summed row by row (ledger-spans.ts): a year at most.
  if (Date.parse(range.to) - Date.parse(range.from) > (BREAKDOWN_MAX_DAYS - 1) * 86_400_000) throw errors.invalidBody('from', `A breakdown covers at most ${BREAKDOWN_MAX_DAYS} days.`);
  return { ...range, query: { by, limit: rows, ...(keyId ? { keyId } : {}), ...(digest ? { endUser: digest } : {}) } };
}

/** A breakdown's row as the APIs answer it: the model or end user it is of, its cost in the currency. */
export function shareRow(share: UsageShare, by: BreakdownQuery['by']) {
  const { group, costNanos, ...counts } = share;
  return { [by]: group, ...counts, cost: amountOf(costNanos) };
}

/** A breakdown as CSV: one row a model or end user. */
export function breakdownCsv(shares: readonly UsageShare[], by: BreakdownQuery['by']): string {
  const rows = shares.map((share) => [share.group, share.requests, share.refused, share.promptTokens, share.completionTokens, amountOf(share.costNanos)].map(csvCell).join(','));
  return `${[`${by},requests,refused,promptTokens,completionTokens,cost`, ...rows].join('\r\n')}\r\n`;
}

/** A CSV cell, quoted as CSV needs; a leading =+-@ defused for spreadsheets. */
function csvCell(value: string | number): string {
  const text = String(value);
  const safe = /^[=+\-@\t\r]/.test(text) ? `'${text}` : text;
  return /[",\n\r]/.test(safe) ? `"${safe.replace(/"/g, '""')}"` : safe;
}

/** One row a key and day (requests served by a worker; refused ones last, a column added after the others); key names are quoted as CSV needs, and a leading =+-@ is defused for spreadsheets. */
export function usageCsv(days: readonly UsageDay[], keyNames: ReadonlyMap<string, string>): string {
  const rows = days.map((day) => [day.date, day.keyId, keyNames.get(day.keyId) ?? workloadSubject(day.keyId) ?? '', day.requests, day.promptTokens, day.completionTokens, day.refused, amountOf(day.costNanos)].map(csvCell).join(','));
  return `${['date,keyId,keyName,requests,promptTokens,completionTokens,refused,cost', ...rows].join('\r\n')}\r\n`;
}

/** A day of usage as the APIs answer it: its cost in the price table's currency, not in nano-units. */
export function usageRow(day: UsageDay): Omit<UsageDay, 'costNanos'> & { cost: number } {
  return { date: day.date, accountId: day.accountId, keyId: day.keyId, requests: day.requests, refused: day.refused, promptTokens: day.promptTokens, completionTokens: day.completionTokens, cost: amountOf(day.costNanos) };
}
