/**
 * Pure: what a key's own fields may hold, and a JSON body's fields read into them, for every way
 * they are set (the admin API, the console's API, the CLI). A refusal is a 400 naming the field.
 * A name is shown in lists and logs: control characters (a newline, an ANSI escape) and Unicode's
 * direction overrides could forge rows in `keys list` or a terminal, so they are refused. A limit is
 * stored in a PostgreSQL integer column and used as a count: it is a whole number up to 2^31 - 1. A
 * quota counts tokens (a bigint column): up to 10^15.
 */
import { isIP, SocketAddress } from 'node:net';
import { ENDPOINTS } from '../common/endpoints';
import { withoutKeys } from '../common/key-shape';
import { errors } from '../errors';
import { MAX_GRACE_SECONDS } from './issue';
import type { Budget, KeyChanges, KeyLimits, Quota } from '../store/types';

export const MAX_NAME_LENGTH = 200;
export const MAX_LIMIT = 2_147_483_647;
export const MAX_QUOTA = 1e15;
const MAX_MODELS = 100;

// C0 and C1 controls, DEL, and the bidirectional embeddings, overrides and isolates.
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what names must not hold
const UNPRINTABLE = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/;

/** Why a name cannot be used (as the end of a sentence starting with its field name), or undefined when it can. */
export function nameProblem(name: unknown): string | undefined {
  if (typeof name !== 'string' || name.trim() === '' || name.length > MAX_NAME_LENGTH) return `must be a non-empty string of at most ${MAX_NAME_LENGTH} characters`;
  if (UNPRINTABLE.test(name)) return 'must not hold control characters or text direction overrides';
  return undefined;
}

/** Whether a limit can be stored: a whole number from 0 (no limit) to MAX_LIMIT. */
export function limitAllowed(value: number): boolean {
  return Number.isInteger(value) && value >= 0 && value <= MAX_LIMIT;
}

/** The fields of a key a request body may set, each read only when present. */
export interface KeyFields extends KeyChanges {
  expiresAt?: string | null;
}

/** A JSON body as an object, or 400. */
export function objectBody(body: unknown): Record<string, unknown> {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw errors.invalidBody(null, 'The request body must be a JSON object.');
  return body as Record<string, unknown>;
}

/** What a body that creates or edits a key may hold (the admin API's create adds `account`). */
export const KEY_FIELDS = ['name', 'models', 'endpoints', 'allowedIps', 'expiresAt', 'rateLimit', 'quota', 'budget'] as const;

/**
 * The body, when every field in it is one the request takes; else 400 naming the first that is not.
 * A misspelt field (`modles`) or one meant for another request (`accountId`) is never ignored: ignored,
 * it would leave a key allowed on every model, or made in another account, and say nothing.
 */
export function onlyFields(body: Record<string, unknown>, allowed: readonly string[]): Record<string, unknown> {
  for (const name of Object.keys(body)) {
    if (allowed.includes(name)) continue;
    const shown = withoutKeys(name.slice(0, 100));
    throw errors.invalidBody(shown, `Unknown field '${shown}': this request takes ${allowed.length > 0 ? allowed.join(', ') : 'no body'}.`);
  }
  return body;
}

/**
 * A rotation's body: none, or `{"graceSeconds": N}`, how long the secret it replaces keeps working
 * (a whole number of seconds, 0 to 7 days; 0 or absent: it stops at once).
 */
export function rotationGrace(body: unknown): number {
  if (body === undefined) return 0;
  const { graceSeconds } = onlyFields(objectBody(body), ['graceSeconds']);
  if (graceSeconds === undefined) return 0;
  if (typeof graceSeconds !== 'number' || !Number.isInteger(graceSeconds) || graceSeconds < 0 || graceSeconds > MAX_GRACE_SECONDS) {
    throw errors.invalidBody('graceSeconds', `'graceSeconds' must be a whole number of seconds from 0 to ${MAX_GRACE_SECONDS} (7 days): how long the replaced secret keeps working.`);
  }
  return graceSeconds;
}

/** A request that takes no fields: no body, or an empty JSON object. */
export function noFields(body: unknown): void {
  if (body === undefined) return;
  onlyFields(objectBody(body), []);
}

export function requiredName(name: unknown, field = 'name'): string {
  const problem = nameProblem(name);
  if (problem) throw errors.invalidBody(field, `'${field}' ${problem}.`);
  return (name as string).trim();
}

/** name, models, expiresAt, rateLimit, quota, budget: each read when present; `name` required when `requireName`. */
export function keyFields(body: Record<string, unknown>, requireName: boolean): KeyFields {
  return {
    name: body.name === undefined && !requireName ? undefined : requiredName(body.name),
    models: models(body.models),
    endpoints: endpoints(body.endpoints),
    allowedIps: allowedIps(body.allowedIps),
    expiresAt: expiry(body.expiresAt),
    rateLimit: limits(body.rateLimit),
    quota: quota(body.quota, 'quota'),
    budget: budget(body.budget, 'budget'),
  };
}

function models(value: unknown): string[] | undefined {
  if (value === undefined) return undefined;
  if (!Array.isArray(value) || value.length > MAX_MODELS || !value.every((m) => typeof m === 'string' && m.length > 0 && m.length <= 300)) {
    throw errors.invalidBody('models', `'models' must be an array of at most ${MAX_MODELS} model globs such as "mock/*".`);
  }
  return value;
}

/** A subset of the endpoints; empty means every one. */
function endpoints(value: unknown): string[] | undefined {
  if (value === undefined) return undefined;
  if (!Array.isArray(value) || !value.every((e) => typeof e === 'string' && (ENDPOINTS as readonly string[]).includes(e))) {
    throw errors.invalidBody('endpoints', `'endpoints' must be an array of ${ENDPOINTS.join(', ')} (empty: every one).`);
  }
  return [...new Set(value as string[])];
}

/** At most this many address ranges a key. */
export const MAX_ALLOWED_IPS = 100;

/**
 * The client addresses a key may be used from: CIDRs (`10.0.0.0/8`, `2001:db8::/32`) or single
 * addresses (taken as /32 or /128), IPv4 or IPv6, each stored as `address/prefix`; empty means any.
 * `param` names the entry that is wrong (`allowedIps[2]`).
 */
function allowedIps(value: unknown): string[] | undefined {
  if (value === undefined) return undefined;
  const shape = `'allowedIps' must be an array of at most ${MAX_ALLOWED_IPS} IP addresses or CIDR ranges, such as "10.0.0.0/8" or "2001:db8::/32" (empty: any address).`;
  if (!Array.isArray(value) || value.length > MAX_ALLOWED_IPS) throw errors.invalidBody('allowedIps', shape);
  return [
    ...new Set(
      value.map((entry, i) => {
        const cidr = typeof entry === 'string' ? parseCidr(entry) : undefined;
        if (!cidr) throw errors.invalidBody(`allowedIps[${i}]`, `${shape} Entry ${i} is not one.`);
        return cidr;
      }),
    ),
  ];
}

/** `address/prefix` in canonical form, or undefined when the text is not an IP address or CIDR range. */
export function parseCidr(text: string): string | undefined {
  // A zone (fe80::1%eth0) names an interface of the host that wrote it: nothing a range can hold.
  if (text.length > 64 || text.includes('%')) return undefined;
  const [address = '', prefixText, extra] = text.trim().split('/');
  if (extra !== undefined) return undefined;
  const family = isIP(address);
  if (family === 0) return undefined;
  const bits = family === 4 ? 32 : 128;
  if (prefixText !== undefined && !/^\d{1,3}$/.test(prefixText)) return undefined;
  const prefix = prefixText === undefined ? bits : Number(prefixText);
  if (prefix > bits) return undefined;
  // The address as Node writes it (IPv6 lower case and shortened), so equal ranges read the same.
  const canonical = new SocketAddress({ address, family: family === 4 ? 'ipv4' : 'ipv6' }).address;
  return `${canonical}/${prefix}`;
}

/** The platform's default for each limit (config `rateLimit`); absent: no limit. */
export type LimitDefaults = { readonly [name in keyof KeyLimits]?: number | undefined };

/**
 * A key's own limits, set by someone who is not a platform admin, stay within the platform's
 * defaults: a number at most the default, or null (the default itself). 0 means no limit, so it is
 * refused wherever the platform has one. Where the platform has none, any value is within it.
 */
export function withinPlatformLimits(limits: Partial<KeyLimits> | undefined, defaults: LimitDefaults): void {
  if (!limits) return;
  for (const name of Object.keys(limits) as (keyof KeyLimits)[]) {
    const value = limits[name];
    const cap = defaults[name];
    if (value === null || value === undefined || cap === undefined) continue;
    if (value === 0 || value > cap) {
      throw errors.invalidBody(`rateLimit.${name}`, `'rateLimit.${name}' must be at most the platform's limit, ${cap}, or null for it (0, no limit, is a platform admin's to set).`);
    }
  }
}

/** `{requestsPerMinute, tokensPerMinute, maxConcurrent}`: a whole number, 0 for no limit, null for the default. */
function limits(value: unknown): Partial<KeyLimits> | undefined {
  if (value === undefined) return undefined;
  const shape = "'rateLimit' must be an object with requestsPerMinute, tokensPerMinute and maxConcurrent: whole numbers (0: no limit) or null (the default).";
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw errors.invalidBody('rateLimit', shape);
  const result: Partial<KeyLimits> = {};
  for (const [name, limit] of Object.entries(value)) {
    if (!['requestsPerMinute', 'tokensPerMinute', 'maxConcurrent'].includes(name)) throw errors.invalidBody(`rateLimit.${name}`, shape);
    if (limit !== null && !(typeof limit === 'number' && limitAllowed(limit))) throw errors.invalidBody(`rateLimit.${name}`, `${shape} At most ${MAX_LIMIT}.`);
    result[name as keyof KeyLimits] = limit as number | null;
  }
  return result;
}

/** `{tokensPerDay, tokensPerMonth}`: whole numbers of tokens, or null for none. */
export function quota(value: unknown, field: string): Partial<Quota> | undefined {
  if (value === undefined) return undefined;
  const shape = `'${field}' must be an object with tokensPerDay and tokensPerMonth: whole numbers of tokens up to ${MAX_QUOTA}, or null (no quota).`;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw errors.invalidBody(field, shape);
  const result: Partial<Quota> = {};
  for (const [name, tokens] of Object.entries(value)) {
    if (name !== 'tokensPerDay' && name !== 'tokensPerMonth') throw errors.invalidBody(`${field}.${name}`, shape);
    if (tokens !== null && !(typeof tokens === 'number' && Number.isInteger(tokens) && tokens >= 0 && tokens <= MAX_QUOTA)) throw errors.invalidBody(`${field}.${name}`, shape);
    result[name] = tokens as number | null;
  }
  return result;
}

/** The most a budget may be, a day or a month: kept in nano-units, it stays an exact whole number (below 2^53). */
export const MAX_BUDGET = 1e6;

/** `{perDay, perMonth}`: amounts of the price table's currency from 0 to MAX_BUDGET, or null for none. */
export function budget(value: unknown, field: string): Partial<Budget> | undefined {
  if (value === undefined) return undefined;
  const shape = `'${field}' must be an object with perDay and perMonth: amounts of the price table's currency from 0 to ${MAX_BUDGET}, or null (no budget).`;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw errors.invalidBody(field, shape);
  const result: Partial<Budget> = {};
  for (const [name, amount] of Object.entries(value)) {
    if (name !== 'perDay' && name !== 'perMonth') throw errors.invalidBody(`${field}.${withoutKeys(name.slice(0, 100))}`, shape);
    if (amount !== null && !(typeof amount === 'number' && Number.isFinite(amount) && amount >= 0 && amount <= MAX_BUDGET)) throw errors.invalidBody(`${field}.${name}`, shape);
    result[name] = amount as number | null;
  }
  return result;
}

/** An ISO-8601 date, or null (no expiry); undefined when absent. */
function expiry(value: unknown): string | null | undefined {
  if (value === undefined || value === null) return value;
  const at = typeof value === 'string' ? new Date(value) : new Date(Number.NaN);
  if (Number.isNaN(at.getTime())) throw errors.invalidBody('expiresAt', "'expiresAt' must be an ISO-8601 date such as 2027-01-31T00:00:00Z, or null.");
  return at.toISOString();
}
