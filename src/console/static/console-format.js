// @ts-check
/*
 * The console's pure helpers: numbers, dates and money as the page writes them, the rules it reads
 * from the session, the usage tab's sums and idle-day folding, and the key form's field rules. No
 * DOM, no fetch, no clock but the `now` a caller passes: unit-tested from jest
 * (test/console/console-format.test.ts) as well as run in the page.
 */

/** @typedef {import('./console-types.js').Key} Key */
/** @typedef {import('./console-types.js').Permissions} Permissions */
/** @typedef {import('./console-types.js').UsageRow} UsageRow */
/** @typedef {import('./console-types.js').UsageDay} UsageDay */
/** @typedef {import('./console-types.js').BudgetSpend} BudgetSpend */
/** @typedef {import('./console-types.js').Alert} Alert */

export const DAY_MS = 86_400_000;

/** The roles an account's people have (accounts/roles.ts), in the order the page offers them. */
export const ROLES = /** @type {const} */ (['owner', 'member']);

// ---------------------------------------------------------------------------------------------
// Numbers, dates, money

const numberFormat = new Intl.NumberFormat();
/** @param {number | null | undefined} n */
export const formatNumber = (n) => numberFormat.format(n || 0);

/** @param {number} x */
const trim = (x) => (x >= 10 ? Math.round(x) : Math.round(x * 10) / 10).toString();

/** 1.2k, 35M, 2G: a chart's axis. @param {number} n */
export function compactNumber(n) {
  if (n >= 1e9) return `${trim(n / 1e9)}G`;
  if (n >= 1e6) return `${trim(n / 1e6)}M`;
  if (n >= 1e3) return `${trim(n / 1e3)}k`;
  return String(n);
}

/**
 * A date in the person's locale (in UTC with `utc`: expiry dates are picked as UTC days).
 * @param {string | null | undefined} iso
 * @param {boolean} [utc]
 */
export function formatDate(iso, utc = false) {
  if (!iso) return '';
  const at = new Date(iso);
  /** @type {Intl.DateTimeFormatOptions} */
  const options = { year: 'numeric', month: 'short', day: 'numeric' };
  if (utc) options.timeZone = 'UTC';
  return Number.isNaN(at.getTime()) ? iso : at.toLocaleDateString(undefined, options);
}

/** @param {string | null | undefined} iso */
export function formatDateTime(iso) {
  if (!iso) return '';
  const at = new Date(iso);
  return Number.isNaN(at.getTime()) ? iso : at.toLocaleString(undefined, { year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' });
}

/** @param {string} iso */
export function formatTime(iso) {
  const at = new Date(iso);
  return Number.isNaN(at.getTime()) ? '' : at.toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit' });
}

/** A UTC date as YYYY-MM-DD. @param {number} time */
export const utcDay = (time) => new Date(time).toISOString().slice(0, 10);

/** An amount of the price table's currency: two decimals, four below 1. @param {number} value */
export function formatAmount(value) {
  return value.toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: value > 0 && value < 1 ? 4 : 2 });
}

/** 1, 2, 5 times a power of ten, at least `n` (and at least 1): a chart's top. @param {number} n */
export function niceCeiling(n) {
  if (n <= 1) return 1;
  const power = 10 ** Math.floor(Math.log10(n));
  for (const step of [1, 2, 5, 10]) if (step * power >= n) return step * power;
  return 10 * power;
}

// ---------------------------------------------------------------------------------------------
// Keys

/** @param {Key} key @param {number} [now] @returns {'revoked' | 'expired' | 'active'} */
export function keyStatus(key, now = Date.now()) {
  if (key.revokedAt) return 'revoked';
  if (key.expiresAt && Date.parse(key.expiresAt) <= now) return 'expired';
  return 'active';
}

/**
 * Whether the person (`email`, with these permissions) may edit, rotate or revoke `key`: every key,
 * or the ones they made. The API decides; the page only hides what it would refuse.
 * @param {Permissions} permissions @param {Key} key @param {string | undefined} email
 */
export function mayManageKey(permissions, key, email) {
  return permissions.manageKeys === 'all' || (permissions.manageKeys === 'own' && email !== undefined && key.createdBy === email);
}

/** @param {number | null | undefined} value */
const isSet = (value) => value !== null && value !== undefined;

/** A key's limits, quotas and budgets as the list shows them ('defaults' when it has none of its own). @param {Key} key */
export function limitsText(key) {
  /** @type {string[]} */
  const parts = [];
  const limits = key.rateLimit || {};
  /** @param {number | null | undefined} value @param {string} unit */
  const describe = (value, unit) => {
    if (!isSet(value)) return;
    parts.push(value === 0 ? `no ${unit} limit` : `${formatNumber(value)} ${unit}`);
  };
  describe(limits.requestsPerMinute, 'req/min');
  describe(limits.tokensPerMinute, 'tokens/min');
  describe(limits.maxConcurrent, 'concurrent');
  const quota = key.quota || {};
  if (isSet(quota.tokensPerDay)) parts.push(`${formatNumber(quota.tokensPerDay)} tokens/day`);
  if (isSet(quota.tokensPerMonth)) parts.push(`${formatNumber(quota.tokensPerMonth)} tokens/month`);
  const budget = key.budget || {};
  if (isSet(budget.perDay)) parts.push(`budget ${formatAmount(/** @type {number} */ (budget.perDay))}/day`);
  if (isSet(budget.perMonth)) parts.push(`budget ${formatAmount(/** @type {number} */ (budget.perMonth))}/month`);
  return parts.length > 0 ? parts : ['defaults'];
}

const WEEK_MS = 7 * DAY_MS;

/** "expires in 3 days" for a key that expires within a week (rotate it, or give it a later expiry); else ''. @param {Key} key @param {number} [now] */
export function expiresSoon(key, now = Date.now()) {
  if (!key.expiresAt) return '';
  const left = Date.parse(key.expiresAt) - now;
  if (left <= 0 || left > WEEK_MS) return '';
  const days = Math.floor(left / DAY_MS);
  return days === 0 ? 'expires within a day' : `expires in ${days} day${days === 1 ? '' : 's'}`;
}

/** A comma separated list (models, client addresses): trimmed, empty items dropped. @param {string} text */
export const splitList = (text) => text.split(',').map((m) => m.trim()).filter((m) => m.length > 0);

/**
 * A whole number typed in a field; null when empty; throws a message when not a whole number.
 * @param {string} text @param {string} label @param {boolean} [badInput] the browser could not read it as a number
 */
export function wholeNumber(text, label, badInput = false) {
  const trimmed = text.trim();
  if (badInput) throw new Error(`${label} must be a whole number (0 or more).`);
  if (trimmed === '') return null;
  const value = Number(trimmed);
  if (!Number.isInteger(value) || value < 0) throw new Error(`${label} must be a whole number (0 or more).`);
  return value;
}

/** An amount of the price table's currency (0 or more, decimals allowed), or null when empty. @param {string} text @param {string} label @param {boolean} [badInput] */
export function amount(text, label, badInput = false) {
  const trimmed = text.trim();
  const value = Number(trimmed);
  if (badInput || (trimmed !== '' && !(Number.isFinite(value) && value >= 0))) throw new Error(`${label} must be an amount (0 or more).`);
  return trimmed === '' ? null : value;
}

/** An expiry day picked in the form as the API takes it (the start of that UTC day), or null for none. @param {string} day @param {number} [now] */
export function expiryFrom(day, now = Date.now()) {
  if (!day) return null;
  if (!/^\d{4}-\d{2}-\d{2}$/.test(day)) throw new Error('The expiry must be a date.');
  if (day <= utcDay(now)) throw new Error('The expiry must be a day after today (UTC).');
  return `${day}T00:00:00.000Z`;
}

// ---------------------------------------------------------------------------------------------
// Usage

/** The last `count` UTC days, today included, oldest first. @param {number} count @param {number} [now] */
export function lastDays(count, now = Date.now()) {
  const today = Date.parse(`${utcDay(now)}T00:00:00Z`);
  /** @type {string[]} */
  const days = [];
  for (let i = count - 1; i >= 0; i--) days.push(utcDay(today - i * DAY_MS));
  return days;
}

/** This UTC month to date, or (`'last'`) the last one whole. @param {string} which @param {number} [now] */
export function monthRange(which, now = Date.now()) {
  const at = new Date(now);
  const year = at.getUTCFullYear();
  const month = at.getUTCMonth();
  if (which === 'last') return { from: utcDay(Date.UTC(year, month - 1, 1)), to: utcDay(Date.UTC(year, month, 0)) };
  return { from: utcDay(Date.UTC(year, month, 1)), to: utcDay(now) };
}

/** @returns {UsageDay} @param {string} date */
const noUse = (date) => ({ date, requests: 0, promptTokens: 0, completionTokens: 0 });

/**
 * The usage rows summed per day (every day of `days`, in their order, none missing), per key (the
 * most tokens first) and in all.
 * @param {readonly string[]} days @param {readonly UsageRow[]} rows
 */
export function sumUsage(days, rows) {
  const byDay = new Map(days.map((date) => [date, noUse(date)]));
  /** @type {Map<string, UsageDay & { keyId: string }>} */
  const byKey = new Map();
  for (const row of rows) {
    const day = byDay.get(row.date);
    if (day) add(day, row);
    const key = byKey.get(row.keyId) || { ...noUse(''), keyId: row.keyId };
    add(key, row);
    byKey.set(row.keyId, key);
  }
  const perDay = [...byDay.values()];
  const total = noUse('');
  for (const day of perDay) add(total, day);
  const perKey = [...byKey.values()].sort((a, b) => b.promptTokens + b.completionTokens - (a.promptTokens + a.completionTokens));
  const refused = rows.reduce((sum, row) => sum + (row.refused || 0), 0);
  const cost = rows.reduce((sum, row) => sum + (row.cost || 0), 0);
  return { perDay, perKey, total, refused, cost };
}

/** @param {UsageDay} into @param {{ requests: number, promptTokens: number, completionTokens: number }} row */
function add(into, row) {
  into.requests += row.requests;
  into.promptTokens += row.promptTokens;
  into.completionTokens += row.completionTokens;
}

/** @param {UsageDay} day */
const idle = (day) => day.requests === 0 && day.promptTokens === 0 && day.completionTokens === 0;

/**
 * Days newest first, a run of days without use folded into one `{ idle: { from, to } }` ("from – to:
 * no use"), not a screen of zeros; the totals are the days' own sums, so nothing is lost.
 * @param {readonly UsageDay[]} days oldest first
 * @returns {({ day: UsageDay } | { idle: { from: string, to: string } })[]}
 */
export function foldIdleDays(days) {
  const newestFirst = days.slice().reverse();
  /** @type {({ day: UsageDay } | { idle: { from: string, to: string } })[]} */
  const rows = [];
  for (let i = 0; i < newestFirst.length; i++) {
    const day = /** @type {UsageDay} */ (newestFirst[i]);
    if (!idle(day)) {
      rows.push({ day });
      continue;
    }
    let last = i;
    while (last + 1 < newestFirst.length && idle(/** @type {UsageDay} */ (newestFirst[last + 1]))) last++;
    rows.push({ idle: { from: /** @type {UsageDay} */ (newestFirst[last]).date, to: day.date } });
    i = last;
  }
  return rows;
}

/** Spend against the budget (the chosen key's, else the account's), this UTC day and month. @param {BudgetSpend | null | undefined} budget @param {string | undefined} currency */
export function budgetText(budget, currency) {
  if (!budget || (budget.perDay === null && budget.perMonth === null)) return 'none';
  const parts = [];
  if (budget.perDay !== null) parts.push(`today ${formatAmount(budget.spentToday)} of ${formatAmount(budget.perDay)}`);
  if (budget.perMonth !== null) parts.push(`month ${formatAmount(budget.spentThisMonth)} of ${formatAmount(budget.perMonth)}`);
  return `${parts.join(' · ')} ${currency || ''}`.trim();
}

/** How a usage key id reads when it is no key of the list: a workload identity (workload:<tag>:<subject>) by its subject. @param {string} keyId */
export function workloadName(keyId) {
  return /^workload:[0-9a-f]{8}:/.test(keyId) ? `${keyId.slice(18)} (workload)` : undefined;
}

/** How a breakdown's model or end user reads in a table: '' and '*' are the ledger's own. @param {string} group @param {'model' | 'endUser'} by */
export function groupLabel(group, by) {
  if (group === '') return by === 'model' ? '(refused before a model was chosen)' : '(none named)';
  if (group === '*') return "(others, past the key's daily cap)";
  return group;
}

// ---------------------------------------------------------------------------------------------
// Alerts

/** One alert per limit: its highest threshold reached. @param {readonly Alert[]} alerts */
export function highestPerLimit(alerts) {
  /** @type {Map<string, Alert>} */
  const byLimit = new Map();
  for (const alert of alerts) {
    const limit = `${alert.kind}:${alert.keyId || ''}:${alert.period}`;
    const seen = byLimit.get(limit);
    if (!seen || alert.threshold > seen.threshold) byLimit.set(limit, alert);
  }
  return [...byLimit.values()];
}

/** @param {Alert} alert @param {string | null} keyName @param {string | undefined} currency */
export function alertText(alert, keyName, currency) {
  const money = alert.kind === 'budget';
  /** @param {number} n */
  const amountOf = (n) => (money ? `${formatAmount(n)} ${currency || ''}`.trim() : `${formatNumber(Math.round(n))} tokens`);
  const whose = keyName ? `Key “${keyName}”` : 'This account';
  const what = `${alert.period === 'day' ? 'daily' : 'monthly'} ${money ? 'budget' : 'token quota'}`;
  return `${whose} has used ${Math.round(alert.threshold * 100)}% of its ${what}: ${amountOf(alert.spent)} of ${amountOf(alert.limit)} (${alert.periodStart}, UTC).`;
}

// ---------------------------------------------------------------------------------------------
// The key form (console-key-form.js reads it; what it sends is decided here)

/** @typedef {'rateLimit' | 'quota' | 'budget'} LimitGroup */
/**
 * A number field of the key form: its group and field in the API's body, its id after `key-form-`,
 * its label, and how it is read (a whole number, or an amount of money).
 * @typedef {{ group: LimitGroup, field: string, id: string, label: string, read: typeof wholeNumber }} LimitField
 */
/** @type {readonly LimitField[]} */
export const LIMIT_FIELDS = [
  { group: 'rateLimit', field: 'requestsPerMinute', id: 'rpm', label: 'Requests per minute', read: wholeNumber },
  { group: 'rateLimit', field: 'tokensPerMinute', id: 'tpm', label: 'Tokens per minute', read: wholeNumber },
  { group: 'rateLimit', field: 'maxConcurrent', id: 'concurrent', label: 'Concurrent requests', read: wholeNumber },
  { group: 'quota', field: 'tokensPerDay', id: 'per-day', label: 'Tokens per day', read: wholeNumber },
  { group: 'quota', field: 'tokensPerMonth', id: 'per-month', label: 'Tokens per month', read: wholeNumber },
  { group: 'budget', field: 'perDay', id: 'budget-day', label: 'Budget per day', read: amount },
  { group: 'budget', field: 'perMonth', id: 'budget-month', label: 'Budget per month', read: amount },
];

/**
 * What the key form holds, read: the text fields as typed, the ticked endpoints, the expiry day
 * (YYYY-MM-DD or ''), and the number fields by their LIMIT_FIELDS id (null: empty).
 * @typedef {object} KeyFormValues
 * @property {string} name
 * @property {string} models
 * @property {string[]} endpoints
 * @property {string} allowedIps
 * @property {string} expires
 * @property {Record<string, number | null>} limits
 */

/** A key's limit field as the form shows it (null: not set). @param {Key} key @param {LimitField} limit @returns {number | null} */
export function limitOf(key, limit) {
  const group = /** @type {Record<string, number | null | undefined> | null | undefined} */ (key[limit.group]);
  const value = group ? group[limit.field] : null;
  return value === undefined ? null : value;
}

/** A key as its form shows it (the one form fills from this when editing). @param {Key} key @returns {KeyFormValues} */
export function keyFormValues(key) {
  return {
    name: key.name,
    models: (key.models || []).join(', '),
    endpoints: key.endpoints || [],
    allowedIps: (key.allowedIps || []).join(', '),
    expires: key.expiresAt ? key.expiresAt.slice(0, 10) : '',
    limits: Object.fromEntries(LIMIT_FIELDS.map((limit) => [limit.id, limitOf(key, limit)])),
  };
}

/**
 * The API's body for what the form says: creating (`before` null), every field given; editing, only
 * what differs from `before` (an expiry left as it was is not checked again). Throws a message when a
 * field is wrong.
 * @param {KeyFormValues} values @param {Key | null} before @param {number} [now]
 * @returns {import('./console-types.js').KeyBody}
 */
export function keyBody(values, before, now = Date.now()) {
  const name = values.name.trim();
  if (!name) throw new Error('Give the key a name.');
  const was = before ? keyFormValues(before) : null;
  /** @type {import('./console-types.js').KeyBody} */
  const body = {};
  if (!was || name !== was.name) body.name = name;
  const models = splitList(values.models);
  if (was ? models.join(',') !== splitList(was.models).join(',') : models.length > 0) body.models = models;
  if (was ? values.endpoints.join(',') !== was.endpoints.join(',') : values.endpoints.length > 0) body.endpoints = values.endpoints;
  const allowedIps = splitList(values.allowedIps);
  if (was ? allowedIps.join(',') !== splitList(was.allowedIps).join(',') : allowedIps.length > 0) body.allowedIps = allowedIps;
  if (was ? values.expires !== was.expires : values.expires !== '') body.expiresAt = expiryFrom(values.expires, now);
  for (const limit of LIMIT_FIELDS) {
    const value = values.limits[limit.id] ?? null;
    if (was ? value !== was.limits[limit.id] : value !== null) {
      const group = body[limit.group] || {};
      group[limit.field] = value;
      body[limit.group] = group;
    }
  }
  return body;
}
