/**
 * Moving off the JSON file store: what a keys.json (read by the file store's own parser, so whatever
 * it would serve is imported and whatever it would refuse is refused, naming the record) becomes in
 * a SQL store, as one ordered list of rows that both SQL stores execute in one transaction each
 * (sqlite/import.ts, postgres/import.ts). Each row goes in unless its primary key or a unique field
 * is there already, so a second run adds nothing and a record made since in the store is never
 * overwritten. A key's totals come in only with the key, so they are not counted twice either. A
 * record the schema cannot hold (a member of an account or a person the file does not have) is
 * skipped and counted as such.
 */
import type { Data } from './file-schema';
import * as rows from './sql/rows';
import type { KeyRecord } from './types';

export const RECORD_KINDS = ['accounts', 'keys', 'people', 'identities', 'members', 'sessions', 'tokens', 'counters', 'audit', 'usage', 'quotaUsage'] as const;
export type RecordKind = (typeof RECORD_KINDS)[number];

export interface ImportReport {
  /** Records written by this run, by kind. */
  imported: Record<RecordKind, number>;
  /** Records already in the store (by primary key or a unique field), left as they are. */
  present: Record<RecordKind, number>;
  /** Records the store could not hold (what they refer to is missing), by kind. */
  skipped: Record<RecordKind, number>;
}

export const emptyReport = (): ImportReport => {
  const zero = () => Object.fromEntries(RECORD_KINDS.map((kind) => [kind, 0])) as Record<RecordKind, number>;
  return { imported: zero(), present: zero(), skipped: zero() };
};

/** A row the import needs to exist first: an account by id, a person by email. */
export type Reference = { table: 'chatgate_accounts'; id: string } | { table: 'chatgate_people'; email: string };

/** One record to write: its row, what it refers to, and a row that goes in only when it did (a key's usage). */
export interface ImportRow {
  kind: RecordKind;
  table: string;
  params: Record<string, unknown>;
  requires: Reference[];
  /** Written after this row, only when this row was. */
  with?: { table: string; params: Record<string, unknown> };
}

/** How a dialect writes the rows whose columns differ (a key's lists, a quota counter's period). */
export interface ImportDialect {
  keyParams(record: KeyRecord): Record<string, unknown>;
  quotaParams(scope: string, tokens: number): Record<string, unknown>;
}

/** The rows, in the order their references need. */
export function importRows(data: Data, dialect: ImportDialect, now = new Date()): ImportRow[] {
  const live = (record: { expiresAt: string }) => Date.parse(record.expiresAt) > now.getTime(); // an expired session or link is not brought back
  const account = (id: string): Reference => ({ table: 'chatgate_accounts', id });
  const person = (email: string): Reference => ({ table: 'chatgate_people', email });
  const row = (kind: RecordKind, table: string, params: object, requires: Reference[] = []): ImportRow => ({ kind, table, params: params as Record<string, unknown>, requires });
  return [
    ...data.accounts.map((record) => row('accounts', 'chatgate_accounts', rows.accountParams(record))),
    ...data.keys.map((record) => {
      const usage = rows.usageParams(record);
      return { ...row('keys', 'chatgate_keys', dialect.keyParams(record), [account(record.accountId)]), ...(usage ? { with: { table: 'chatgate_key_usage', params: usage } } : {}) };
    }),
    ...data.people.map((record) => row('people', 'chatgate_people', { ...rows.personParams(record), password_with_oidc: record.passwordWithOidc ? 1 : 0 })),
    ...data.identities.map((record) => row('identities', 'chatgate_identities', rows.identityParams(record), [person(record.email)])),
    ...data.members.map((record) => row('members', 'chatgate_members', rows.memberParams(record), [account(record.accountId), person(record.email)])),
    ...data.sessions.filter(live).map((record) => row('sessions', 'chatgate_sessions', rows.sessionParams(record))),
    ...data.tokens.filter(live).map((record) => row('tokens', 'chatgate_tokens', rows.tokenParams(record))),
    ...data.counters.map((record) => row('counters', 'chatgate_counters', { name: record.name, count: record.count, expires_at: rows.instant(record.expiresAt) })),
    ...data.audit.map((record) => row('audit', 'chatgate_audit', rows.auditParams(record))),
    ...data.usage.map((day) => {
      const counts = { key_id: day.keyId, date: day.date, account_id: day.accountId, requests: day.requests, refused: day.refused, cost_nanos: day.costNanos, prompt_tokens: day.promptTokens, completion_tokens: day.completionTokens };
      // The file store knew no model or end user: the ledger has the day as one row of neither.
      return { ...row('usage', 'chatgate_usage_daily', counts), with: { table: 'chatgate_usage_ledger', params: { ...counts, model: '', end_user: '' } } };
    }),
    ...Object.entries(data.quotaUsage).map(([scope, tokens]) => row('quotaUsage', 'chatgate_quota_usage', dialect.quotaParams(scope, tokens))),
  ];
}
