/**
 * Pure: the embedded store's rows and the records they hold, both ways. The rules are both SQL
 * stores' (../sql/rows.ts); what is SQLite's alone is here: a key's lists kept as JSON text, the
 * key select with its usage, and statements with named parameters.
 */
import { keyParams as portableKeyParams } from '../sql/rows';
import type { KeyRecord } from '../types';

export {
  accountParams,
  auditParams,
  identityParams,
  instant,
  liveToken,
  maybeInstant,
  memberParams,
  periodOf,
  personParams,
  sessionParams,
  toAccount,
  toAudit,
  toIdentity,
  toAuthRecord,
  toKey,
  toMember,
  toPerson,
  toSession,
  toToken,
  tokenParams,
  usageParams,
  type AccountRow,
  type AuditRow,
  type IdentityRow,
  type KeyRow,
  type MemberRow,
  type PersonRow,
  type SessionRow,
  type TokenRow,
} from '../sql/rows';

/** A key's row in chatgate_keys (its usage goes to chatgate_key_usage: usageParams). */
export const keyParams = (k: KeyRecord) => ({
  ...portableKeyParams(k),
  models: JSON.stringify(k.models),
  endpoints: JSON.stringify(k.endpoints),
  allowed_ips: JSON.stringify(k.allowedIps),
});
export const KEY_COLUMNS = Object.keys(keyParams({ rateLimit: {}, usage: {}, quota: {}, budget: {}, createdAt: new Date(0).toISOString() } as KeyRecord));
export const USAGE_COLUMNS = ['key_id', 'requests', 'prompt_tokens', 'completion_tokens', 'last_used_at'];
/** A key with its usage (zeros and null when it has none). */
export const KEY_SELECT = `select k.*, coalesce(u.requests, 0) as requests_total, coalesce(u.prompt_tokens, 0) as prompt_tokens_total,
  coalesce(u.completion_tokens, 0) as completion_tokens_total, u.last_used_at from chatgate_keys k left join chatgate_key_usage u on u.key_id = k.id`;

/** `insert into <table> (a, b) values (@a, @b)`, with a verb (`insert or ignore`) of the caller's choice. */
export function insertSql(verb: string, table: string, columns: readonly string[]): string {
  return `${verb} into ${table} (${columns.join(', ')}) values (${columns.map((c) => `@${c}`).join(', ')})`;
}
