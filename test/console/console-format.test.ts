/**
 * The console page's pure helpers (src/console/static/console-format.js, a browser ES module with no
 * DOM), run here as jest runs them: formatting, the session's rules, the usage tab's sums and idle
 * days, the alerts kept, and what the one key form sends when creating and when editing.
 */
import {
  alertText,
  budgetText,
  compactNumber,
  expiresSoon,
  expiryFrom,
  foldIdleDays,
  formatAmount,
  groupLabel,
  highestPerLimit,
  keyBody,
  keyFormValues,
  keyStatus,
  lastDays,
  limitsText,
  mayManageKey,
  monthRange,
  niceCeiling,
  ROLES,
  splitList,
  sumUsage,
  utcDay,
  wholeNumber,
  amount,
  workloadName,
} from '../../src/console/static/console-format.js';

const NOW = Date.parse('2026-03-15T12:00:00Z');
const DAY = 86_400_000;
const key = (fields: Record<string, unknown> = {}) => ({ id: 'key_1', name: 'ci', prefix: 'cgk_ab', createdAt: '2026-01-01T00:00:00.000Z', createdBy: 'dev@example.com', ...fields });
const permissions = (manageKeys: 'all' | 'own' | 'none') => ({ createKeys: true, manageKeys, manageMembers: false, setPolicy: false, readAudit: false });

test('numbers, money and days as the page writes them', () => {
  expect([999, 1000, 1234, 15_500, 2_500_000, 3_000_000_000].map(compactNumber)).toEqual(['999', '1k', '1.2k', '16k', '2.5M', '3G']);
  expect([0, 0.5, 1, 12.345, 1234.5].map(formatAmount)).toEqual(['0.00', '0.50', '1.00', '12.35', '1,234.50']);
  expect(formatAmount(0.00125)).toBe('0.0013');
  expect([0, 1, 7, 10, 11, 120, 999].map(niceCeiling)).toEqual([1, 1, 10, 10, 20, 200, 1000]);
  expect(utcDay(NOW)).toBe('2026-03-15');
  expect(lastDays(3, NOW)).toEqual(['2026-03-13', '2026-03-14', '2026-03-15']);
  expect(monthRange('this', NOW)).toEqual({ from: '2026-03-01', to: '2026-03-15' });
  expect(monthRange('last', NOW)).toEqual({ from: '2026-02-01', to: '2026-02-28' });
  expect(monthRange('last', Date.parse('2026-01-10T00:00:00Z'))).toEqual({ from: '2025-12-01', to: '2025-12-31' });
});

test('roles and who may manage a key: every key, only their own, or none', () => {
  expect(ROLES).toEqual(['owner', 'member']);
  expect(mayManageKey(permissions('all'), key(), 'someone@example.com')).toBe(true);
  expect(mayManageKey(permissions('own'), key(), 'dev@example.com')).toBe(true);
  expect(mayManageKey(permissions('own'), key(), 'DEV@example.com')).toBe(false);
  expect(mayManageKey(permissions('own'), key(), undefined)).toBe(false);
  expect(mayManageKey(permissions('none'), key(), 'dev@example.com')).toBe(false);
});

test("a key's status, its limits as listed, and the week before it expires", () => {
  expect(keyStatus(key(), NOW)).toBe('active');
  expect(keyStatus(key({ expiresAt: new Date(NOW).toISOString() }), NOW)).toBe('expired');
  expect(keyStatus(key({ revokedAt: '2026-02-01T00:00:00Z', expiresAt: new Date(NOW + DAY).toISOString() }), NOW)).toBe('revoked');
  expect(limitsText(key())).toEqual(['defaults']);
  expect(limitsText(key({ rateLimit: { requestsPerMinute: 0, tokensPerMinute: null, maxConcurrent: 4 }, quota: { tokensPerDay: 500, tokensPerMonth: null }, budget: { perDay: 2.5, perMonth: null } }))).toEqual(['no req/min limit', '4 concurrent', '500 tokens/day', 'budget 2.50/day']);
  expect(expiresSoon(key(), NOW)).toBe('');
  expect(expiresSoon(key({ expiresAt: new Date(NOW + 3 * DAY + 1000).toISOString() }), NOW)).toBe('expires in 3 days');
  expect(expiresSoon(key({ expiresAt: new Date(NOW + DAY + 1000).toISOString() }), NOW)).toBe('expires in 1 day');
  expect(expiresSoon(key({ expiresAt: new Date(NOW + 1000).toISOString() }), NOW)).toBe('expires within a day');
  expect(expiresSoon(key({ expiresAt: new Date(NOW + 8 * DAY).toISOString() }), NOW)).toBe('');
  expect(expiresSoon(key({ expiresAt: new Date(NOW - 1000).toISOString() }), NOW)).toBe('');
});

test('the key form fields: lists, whole numbers, amounts and the expiry day', () => {
  expect(splitList(' mock/* , ,other/a,')).toEqual(['mock/*', 'other/a']);
  expect(wholeNumber(' 12 ', 'Tokens per day')).toBe(12);
  expect(wholeNumber('', 'Tokens per day')).toBeNull();
  for (const text of ['1.5', '-1', 'ten']) expect(() => wholeNumber(text, 'Tokens per day')).toThrow('Tokens per day must be a whole number (0 or more).');
  expect(() => wholeNumber('', 'Requests per minute', true)).toThrow('Requests per minute must be a whole number');
  expect(amount('2.5', 'Budget per day')).toBe(2.5);
  expect(amount('', 'Budget per day')).toBeNull();
  expect(() => amount('-0.01', 'Budget per day')).toThrow('Budget per day must be an amount (0 or more).');
  expect(() => amount('Infinity', 'Budget per day')).toThrow('must be an amount');
  expect(expiryFrom('', NOW)).toBeNull();
  expect(expiryFrom('2026-03-16', NOW)).toBe('2026-03-16T00:00:00.000Z');
  expect(() => expiryFrom('2026-03-15', NOW)).toThrow('The expiry must be a day after today (UTC).');
  expect(() => expiryFrom('15/03/2027', NOW)).toThrow('The expiry must be a date.');
});

const emptyForm = () => ({ name: '', models: '', endpoints: [] as string[], allowedIps: '', expires: '', limits: {} as Record<string, number | null> });

test('creating: the form sends what is filled in, and nothing empty', () => {
  expect(() => keyBody({ ...emptyForm(), name: '   ' }, null, NOW)).toThrow('Give the key a name.');
  expect(keyBody({ ...emptyForm(), name: ' ci ' }, null, NOW)).toEqual({ name: 'ci' });
  expect(keyBody({ name: 'ci', models: 'mock/*, other/a', endpoints: ['chat'], allowedIps: '10.0.0.0/8', expires: '2027-01-31', limits: { rpm: 60, tpm: null, 'per-day': 0, 'budget-month': 12.5 } }, null, NOW)).toEqual({
    name: 'ci',
    models: ['mock/*', 'other/a'],
    endpoints: ['chat'],
    allowedIps: ['10.0.0.0/8'],
    expiresAt: '2027-01-31T00:00:00.000Z',
    rateLimit: { requestsPerMinute: 60 },
    quota: { tokensPerDay: 0 },
    budget: { perMonth: 12.5 },
  });
});

test('editing: the same form, filled from the key, sends only what changed (null clears a field)', () => {
  const before = key({ models: ['mock/*'], endpoints: ['chat'], allowedIps: [], expiresAt: '2026-03-01T00:00:00.000Z', rateLimit: { requestsPerMinute: 60 }, budget: { perDay: 2.5 } });
  const filled = keyFormValues(before);
  expect(filled).toMatchObject({ name: 'ci', models: 'mock/*', endpoints: ['chat'], allowedIps: '', expires: '2026-03-01', limits: { rpm: 60, tpm: null, 'budget-day': 2.5 } });
  // Nothing changed: nothing sent, and an expiry already past is not checked again.
  expect(keyBody(filled, before, NOW)).toEqual({});
  expect(keyBody({ ...filled, name: 'renamed', models: 'mock/*, other/b', endpoints: [], expires: '', limits: { ...filled.limits, rpm: null, 'budget-day': 2.5, concurrent: 3 } }, before, NOW)).toEqual({
    name: 'renamed',
    models: ['mock/*', 'other/b'],
    endpoints: [],
    expiresAt: null,
    rateLimit: { requestsPerMinute: null, maxConcurrent: 3 },
  });
  expect(() => keyBody({ ...filled, expires: '2026-03-10' }, before, NOW)).toThrow('a day after today');
});

test('usage: summed per day (none missing) and per key, idle runs folded, the budget said', () => {
  const days = lastDays(5, NOW);
  const rows = [
    { date: '2026-03-15', keyId: 'key_a', requests: 2, promptTokens: 10, completionTokens: 5, refused: 1, cost: 0.5 },
    { date: '2026-03-15', keyId: 'key_b', requests: 1, promptTokens: 100, completionTokens: 50 },
    { date: '2026-03-12', keyId: 'key_a', requests: 1, promptTokens: 1, completionTokens: 1, cost: 0.25 },
    { date: '2026-01-01', keyId: 'key_c', requests: 9, promptTokens: 9, completionTokens: 9 }, // outside the days: per key only
  ];
  const sums = sumUsage(days, rows);
  expect(sums.perDay.map((day) => [day.date, day.requests])).toEqual([['2026-03-11', 0], ['2026-03-12', 1], ['2026-03-13', 0], ['2026-03-14', 0], ['2026-03-15', 3]]);
  expect(sums.total).toEqual({ date: '', requests: 4, promptTokens: 111, completionTokens: 56 });
  expect(sums.perKey.map((k) => k.keyId)).toEqual(['key_b', 'key_c', 'key_a']);
  expect([sums.refused, sums.cost]).toEqual([1, 0.75]);
  expect(foldIdleDays(sums.perDay)).toEqual([
    { day: sums.perDay[4] },
    { idle: { from: '2026-03-13', to: '2026-03-14' } },
    { day: sums.perDay[1] },
    { idle: { from: '2026-03-11', to: '2026-03-11' } },
  ]);
  expect(foldIdleDays(sumUsage(days, []).perDay)).toEqual([{ idle: { from: '2026-03-11', to: '2026-03-15' } }]);
  expect(budgetText(null, 'USD')).toBe('none');
  expect(budgetText({ perDay: 10, perMonth: null, spentToday: 2.5, spentThisMonth: 40 }, 'USD')).toBe('today 2.50 of 10.00 USD');
  expect(budgetText({ perDay: 10, perMonth: 100, spentToday: 0, spentThisMonth: 40 }, undefined)).toBe('today 0.00 of 10.00 · month 40.00 of 100.00');
  expect(workloadName('workload:0123abcd:ci-runner')).toBe('ci-runner (workload)');
  expect(workloadName('key_1')).toBeUndefined();
  expect([groupLabel('', 'model'), groupLabel('', 'endUser'), groupLabel('*', 'endUser'), groupLabel('gpt', 'model')]).toEqual(['(refused before a model was chosen)', '(none named)', "(others, past the key's daily cap)", 'gpt']);
});

test('alerts: the highest threshold of each limit, said in words', () => {
  const alert = (kind: string, threshold: number, keyId: string | null = null) => ({ kind, keyId, period: 'day' as const, periodStart: '2026-03-15', threshold, spent: threshold * 1000, limit: 1000 });
  const kept = highestPerLimit([alert('quota', 0.8), alert('quota', 1), alert('quota', 0.5, 'key_a'), alert('budget', 0.8)]);
  expect(kept.map((a) => [a.kind, a.keyId, a.threshold])).toEqual([['quota', null, 1], ['quota', 'key_a', 0.5], ['budget', null, 0.8]]);
  expect(alertText(alert('quota', 0.8), null, 'USD')).toBe('This account has used 80% of its daily token quota: 800 tokens of 1,000 tokens (2026-03-15, UTC).');
  expect(alertText({ ...alert('budget', 1), period: 'month' as never }, 'ci', 'EUR')).toBe('Key “ci” has used 100% of its monthly budget: 1,000.00 EUR of 1,000.00 EUR (2026-03-15, UTC).');
});
