/**
 * The rules both SQL stores share (src/store/sql/): a row read into the same record whichever driver
 * handed it over (SQLite's text and numbers, pg's Dates, arrays, objects and bigint text), what a
 * record becomes on the way in, and what a change sets.
 */
import { accountParams, instant, keyParams, liveToken, toAccount, toAudit, toAuthRecord, toKey, toPerson, type KeyRow } from '../../src/store/sql/rows';
import { ACCOUNT_UPDATES, columnsSet, KEY_UPDATES } from '../../src/store/sql/updates';
import { addUse } from '../../src/store/sql/usage';
import type { AccountRecord } from '../../src/store/types';

const CREATED = '2026-11-01T10:00:00.000Z';
const UNTIL = '2026-12-01T00:00:00.000Z';

/** One key row as each driver returns it. */
const sqliteKey: KeyRow = {
  id: 'key_1',
  name: 'ci',
  digest: 'new',
  prefix: 'sk-abc',
  created_at: CREATED,
  revoked_at: null,
  expires_at: UNTIL,
  models: '["mock/*"]',
  endpoints: '[]',
  allowed_ips: '["10.0.0.0/8"]',
  rpm: 60,
  tpm: null,
  max_concurrent: 0,
  account_id: 'acc_1',
  created_by: 'admin-token',
  tokens_per_day: 1000,
  tokens_per_month: null,
  budget_day_nanos: 2_500_000_000,
  budget_month_nanos: null,
  previous_digest: 'old',
  previous_until: UNTIL,
  previous_for: 'new',
  last_used_at: CREATED,
  requests_total: 3,
  prompt_tokens_total: 40,
  completion_tokens_total: 2,
};
const postgresKey: KeyRow = {
  ...sqliteKey,
  created_at: new Date(CREATED),
  expires_at: new Date(UNTIL),
  models: ['mock/*'],
  endpoints: [],
  allowed_ips: ['10.0.0.0/8'],
  tokens_per_day: '1000',
  budget_day_nanos: '2500000000',
  previous_until: new Date(UNTIL),
  last_used_at: new Date(CREATED),
  requests_total: '3',
  prompt_tokens_total: '40',
  completion_tokens_total: '2',
};

test('a key row reads as the same record from either driver, with its grace while the rotation holds', () => {
  const record = toKey(sqliteKey);
  expect(toKey(postgresKey)).toEqual(record);
  expect(record).toMatchObject({
    createdAt: CREATED,
    models: ['mock/*'],
    allowedIps: ['10.0.0.0/8'],
    quota: { tokensPerDay: 1000, tokensPerMonth: null },
    budget: { perDay: 2.5, perMonth: null },
    usage: { requests: 3, promptTokens: 40, completionTokens: 2 },
    previousKeyExpiresAt: UNTIL,
  });
  // A later change of secret ends the grace; a key row alone (no usage joined) has zeros and null.
  expect(toKey({ ...postgresKey, previous_for: 'other' })).not.toHaveProperty('previousKeyExpiresAt');
  const { last_used_at: _l, requests_total: _r, prompt_tokens_total: _p, completion_tokens_total: _c, ...keyOnly } = postgresKey;
  expect(toKey(keyOnly)).toMatchObject({ lastUsedAt: null, usage: { requests: 0, promptTokens: 0, completionTokens: 0 } });
  expect(toAuthRecord(postgresKey)).not.toHaveProperty('usage');
  expect(toAuthRecord(postgresKey)).not.toHaveProperty('lastUsedAt');
});

test('a record written and read back is itself: timestamps normalised, money in nano-units, one that is not a date refused', () => {
  const account: AccountRecord = {
    id: 'acc_1',
    name: 'team',
    createdAt: '2026-11-01T11:00:00+01:00',
    quota: { tokensPerDay: 10, tokensPerMonth: null },
    budget: { perDay: 0.1, perMonth: 12.345678901 },
    keyPolicy: { maxLifetimeDays: 90 },
    endUserQuota: { tokensPerDay: null, budgetPerDay: 0.5 },
    alertWebhookUrl: 'https://hooks.example/a',
  };
  const params = accountParams(account);
  expect(params).toMatchObject({ created_at: CREATED, budget_day_nanos: 100_000_000, budget_month_nanos: 12_345_678_901, end_user_budget_day_nanos: 500_000_000 });
  expect(toAccount(params)).toEqual({ ...account, createdAt: CREATED });
  expect(toAccount({ ...params, end_user_tokens_per_day: null, end_user_budget_day_nanos: null, key_max_lifetime_days: null, alert_webhook_url: null })).not.toHaveProperty('endUserQuota');
  expect(() => instant('yesterday')).toThrow('not a date');
  expect(() => keyParams({ ...toKey(sqliteKey), createdAt: 'soon' })).toThrow('not a date');
  expect(keyParams(toKey(sqliteKey))).toMatchObject({ models: ['mock/*'], allowed_ips: ['10.0.0.0/8'], budget_day_nanos: 2_500_000_000 });
});

test('flags, JSON and expiry read the same from either driver', () => {
  expect(toPerson({ email: 'a@x', admin: 1, password_hash: null, created_at: CREATED, password_with_oidc: 0 })).toEqual(toPerson({ email: 'a@x', admin: true, password_hash: null, created_at: new Date(CREATED), password_with_oidc: false }));
  const audit = { id: 'ev_1', account_id: null, at: CREATED, actor: 'admin-token', action: 'key.create', target: 'key_1', client: null };
  expect(toAudit({ ...audit, details: '{"name":"ci"}' })).toEqual(toAudit({ ...audit, at: new Date(CREATED), details: { name: 'ci' } }));
  const token = { digest: 't', kind: 'password' as const, email: 'a@x', data: '{"a":"b"}', expires_at: UNTIL };
  expect(liveToken(token, new Date('2026-11-30T23:59:59.999Z'))).toEqual({ digest: 't', kind: 'password', email: 'a@x', data: { a: 'b' }, expiresAt: UNTIL });
  expect(liveToken({ ...token, expires_at: new Date(UNTIL) }, new Date(UNTIL))).toBeUndefined();
  expect(liveToken(undefined, new Date(UNTIL))).toBeUndefined();
});

test('a change sets only the columns it names, in one order, checked as a write is', () => {
  expect(columnsSet(KEY_UPDATES, {})).toEqual([]);
  expect(columnsSet(KEY_UPDATES, { models: ['a'], expiresAt: null, budget: { perDay: 1.5 }, rateLimit: { tokensPerMinute: null } })).toEqual([
    ['models', ['a']],
    ['expires_at', null],
    ['tpm', null],
    ['budget_day_nanos', 1_500_000_000],
  ]);
  expect(() => columnsSet(KEY_UPDATES, { expiresAt: 'never' })).toThrow('not a date');
  expect(columnsSet(ACCOUNT_UPDATES, { keyPolicy: null, endUserQuota: null, name: 'n' })).toEqual([
    ['name', 'n'],
    ['key_max_lifetime_days', null],
    ['end_user_tokens_per_day', null],
    ['end_user_budget_day_nanos', null],
  ]);
  expect(addUse('d')).toBe('requests = d.requests + excluded.requests, refused = d.refused + excluded.refused, cost_nanos = d.cost_nanos + excluded.cost_nanos, prompt_tokens = d.prompt_tokens + excluded.prompt_tokens, completion_tokens = d.completion_tokens + excluded.completion_tokens');
});
