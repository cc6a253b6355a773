/**
 * The CLI's flags, read and checked: each bad value is a UsageError naming the flag and what it takes
 * (the CLI exits 2 with its usage).
 */
import { parseArgs } from 'node:util';
import { MAX_GRACE_SECONDS } from '../auth/issue';
import { limitAllowed, MAX_BUDGET, MAX_LIMIT, MAX_QUOTA } from '../auth/key-fields';
import { ENDPOINTS, type Endpoint } from '../common/endpoints';
import type { Budget } from '../store/types';

export class UsageError extends Error {}

type Options = NonNullable<Parameters<typeof parseArgs>[0]>['options'];

export function parse<O extends Options>(args: string[], options: O, allowPositionals = false) {
  try {
    return parseArgs({ args, options, allowPositionals, strict: true });
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

export function parseExpiry(text: string): Date {
  const at = new Date(text);
  if (Number.isNaN(at.getTime())) throw new UsageError(`--expires '${text}' is not an ISO-8601 date, e.g. 2027-01-31 or 2027-01-31T12:00:00Z`);
  return at;
}

/** `--endpoints chat --endpoints embeddings`, or `--endpoints chat,embeddings`: none means every one. */
export function endpointList(values: string[]): Endpoint[] {
  const names = values.flatMap((value) => value.split(',')).map((name) => name.trim()).filter((name) => name !== '');
  for (const name of names) {
    if (!(ENDPOINTS as readonly string[]).includes(name)) throw new UsageError(`--endpoints takes ${ENDPOINTS.join(', ')}, not '${name}'`);
  }
  return [...new Set(names)] as Endpoint[];
}

export function wholeNumber(flag: string, text: string): number {
  const value = Number(text);
  if (!Number.isInteger(value) || value < 0) throw new UsageError(`${flag} must be a whole number`);
  return value;
}

export function quotaValue(flag: string, text: string | undefined): number | null {
  if (text === undefined || text === 'none') return null;
  const value = Number(text);
  if (!Number.isInteger(value) || value < 0 || value > MAX_QUOTA) throw new UsageError(`${flag} must be a whole number of tokens up to ${MAX_QUOTA}, or none`);
  return value;
}

export const BUDGET_FLAGS = { 'budget-per-day': { type: 'string' }, 'budget-per-month': { type: 'string' } } as const;

/** `--budget-per-day` and `--budget-per-month`: amounts of the price table's currency, or none. */
export function budgetOf(values: { 'budget-per-day'?: string; 'budget-per-month'?: string }): Budget {
  const amount = (flag: string, text = 'none') => {
    if (text === 'none') return null;
    if (text.trim() !== '' && Number(text) >= 0 && Number(text) <= MAX_BUDGET) return Number(text);
    throw new UsageError(`${flag} must be an amount of the price table's currency from 0 to ${MAX_BUDGET}, or none`);
  };
  return { perDay: amount('--budget-per-day', values['budget-per-day']), perMonth: amount('--budget-per-month', values['budget-per-month']) };
}

export function limitValue(flag: string, text: string): number {
  const value = Number(text);
  if (!limitAllowed(value)) throw new UsageError(`${flag} must be a whole number from 0 (no limit) to ${MAX_LIMIT}`);
  return value;
}

/** A name as it may reach a terminal: control characters and direction overrides written as \u escapes. */
export function printable(name: string): string {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what gets escaped here
  return name.replace(/[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

export function positiveNumber(flag: string, text: string): number {
  const value = Number(text);
  if (!(value > 0)) throw new UsageError(`${flag} must be a positive number`);
  return value;
}

/** `--grace-seconds N`: how long a rotated key's old secret keeps working; absent: 0 (it stops at once). */
export function graceSeconds(text: string | undefined): number {
  const grace = text === undefined ? 0 : Number(text);
  if (!Number.isInteger(grace) || grace < 0 || grace > MAX_GRACE_SECONDS) throw new UsageError(`--grace-seconds must be a whole number of seconds from 0 to ${MAX_GRACE_SECONDS} (7 days)`);
  return grace;
}
