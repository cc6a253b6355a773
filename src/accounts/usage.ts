/** Pure: the date range a usage query covers, and usage as CSV for export. */
import { errors } from '../errors';
import type { UsageDay } from '../store/types';
import { amountOf } from './prices';

const DAY = /^\d{4}-\d{2}-\d{2}$/;

/** `from`/`to` as YYYY-MM-DD (UTC); by default the last 30 days, today included. */
export function dateRange(from: unknown, to: unknown, now = new Date()): { from: string; to: string } {
  const day = (value: unknown, field: string, fallback: string) => {
    if (value === undefined) return fallback;
    if (typeof value !== 'string' || !DAY.test(value) || Number.isNaN(Date.parse(value))) throw errors.invalidBody(field, `'${field}' must be a date such as 2026-11-27.`);
    return value;
  };
  const today = now.toISOString().slice(0, 10);
  const monthAgo = new Date(now.getTime() - 29 * 86_400_000).toISOString().slice(0, 10);
  return { from: day(from, 'from', monthAgo), to: day(to, 'to', today) };
}

/** One row a key and day (requests served by a worker; refused ones last, a column added after the others); key names are quoted as CSV needs, and a leading =+-@ is defused for spreadsheets. */
export function usageCsv(days: readonly UsageDay[], keyNames: ReadonlyMap<string, string>): string {
  const cell = (value: string | number) => {
    const text = String(value);
    const safe = /^[=+\-@\t\r]/.test(text) ? `'${text}` : text;
    return /[",\n\r]/.test(safe) ? `"${safe.replace(/"/g, '""')}"` : safe;
  };
  const rows = days.map((day) => [day.date, day.keyId, keyNames.get(day.keyId) ?? '', day.requests, day.promptTokens, day.completionTokens, day.refused, amountOf(day.costNanos)].map(cell).join(','));
  return ['date,keyId,keyName,requests,promptTokens,completionTokens,refused,cost', ...rows].join('\r\n') + '\r\n';
}

/** A day of usage as the APIs answer it: its cost in the price table's currency, not in nano-units. */
export function usageRow(day: UsageDay): Omit<UsageDay, 'costNanos'> & { cost: number } {
  return { date: day.date, accountId: day.accountId, keyId: day.keyId, requests: day.requests, refused: day.refused, promptTokens: day.promptTokens, completionTokens: day.completionTokens, cost: amountOf(day.costNanos) };
}
