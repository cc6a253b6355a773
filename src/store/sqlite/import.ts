/**
 * Moving off the JSON file store: a keys.json, read by the file store's own parser (so whatever it
 * would serve is imported, and whatever it would refuse is refused, naming the record), written into
 * the SQLite store in one transaction, every record kind. Each record goes in by its primary key
 * unless one is there already (insert or ignore), so a second run adds nothing, and a record made
 * since in SQLite is never overwritten. A key's totals and a key's use come in only with the key,
 * so they are not counted twice either. A record the schema cannot hold (a member of an account or
 * a person the file does not have) is skipped and counted as such.
 */
import { promises as fs } from 'node:fs';
import { parseContents, type Data } from '../file';
import * as rows from './rows';
import * as statements from './statements';
import type { SqliteKeyStore } from './store';

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

export async function importFile(store: SqliteKeyStore, file: string): Promise<ImportReport> {
  const text = await fs.readFile(file, 'utf8');
  return importData(store, parseContents(text, file));
}

export async function importData(store: SqliteKeyStore, data: Data): Promise<ImportReport> {
  const zero = () => Object.fromEntries(RECORD_KINDS.map((kind) => [kind, 0])) as Record<RecordKind, number>;
  const report: ImportReport = { imported: zero(), present: zero(), skipped: zero() };
  const { sql } = store;
  const exists = (query: string, ...params: unknown[]) => sql.get(query, ...params) !== undefined;
  const put = (kind: RecordKind, table: string, columns: readonly string[], params: object, refersToWhatExists = true): boolean => {
    if (!refersToWhatExists) {
      report.skipped[kind]++;
      return false;
    }
    const added = sql.run(rows.insertSql('insert or ignore', table, columns), params).changes > 0;
    report[added ? 'imported' : 'present'][kind]++;
    return added;
  };
  const account = (id: string) => exists('select 1 from chatgate_accounts where id = ?', id);
  const person = (email: string) => exists('select 1 from chatgate_people where email = ?', email);

  await sql.write(() => {
    for (const record of data.accounts) put('accounts', 'chatgate_accounts', statements.ACCOUNT_COLUMNS, rows.accountParams(record));
    for (const record of data.keys) {
      if (!put('keys', 'chatgate_keys', rows.KEY_COLUMNS, rows.keyParams(record), account(record.accountId))) continue;
      const usage = rows.usageParams(record);
      if (usage) sql.run(rows.insertSql('insert or ignore', 'chatgate_key_usage', rows.USAGE_COLUMNS), usage);
    }
    for (const record of data.people) put('people', 'chatgate_people', PERSON_COLUMNS, { ...rows.personParams(record), password_with_oidc: record.passwordWithOidc ? 1 : 0 });
    for (const record of data.identities) put('identities', 'chatgate_identities', statements.IDENTITY_COLUMNS, rows.identityParams(record), person(record.email));
    for (const record of data.members) put('members', 'chatgate_members', statements.MEMBER_COLUMNS, rows.memberParams(record), account(record.accountId) && person(record.email));
    for (const record of data.sessions) put('sessions', 'chatgate_sessions', statements.SESSION_COLUMNS, rows.sessionParams(record));
    for (const record of data.tokens) put('tokens', 'chatgate_tokens', statements.TOKEN_COLUMNS, rows.tokenParams(record));
    for (const record of data.counters) put('counters', 'chatgate_counters', COUNTER_COLUMNS, { name: record.name, count: record.count, expires_at: rows.instant(record.expiresAt) });
    for (const record of data.audit) put('audit', 'chatgate_audit', statements.AUDIT_COLUMNS, rows.auditParams(record));
    for (const day of data.usage) {
      const params = { key_id: day.keyId, date: day.date, account_id: day.accountId, requests: day.requests, prompt_tokens: day.promptTokens, completion_tokens: day.completionTokens };
      put('usage', 'chatgate_usage_daily', USAGE_DAY_COLUMNS, params);
    }
    for (const [scope, tokens] of Object.entries(data.quotaUsage)) put('quotaUsage', 'chatgate_quota_usage', ['scope', 'period', 'tokens'], { scope, period: rows.periodOf(scope), tokens });
  });
  return report;
}

const PERSON_COLUMNS = ['email', 'admin', 'password_hash', 'created_at', 'password_with_oidc'];
const COUNTER_COLUMNS = ['name', 'count', 'expires_at'];
const USAGE_DAY_COLUMNS = ['key_id', 'date', 'account_id', 'requests', 'prompt_tokens', 'completion_tokens'];
