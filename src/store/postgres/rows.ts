/**
 * The PostgreSQL store's side of its rows: the statements' numbered parameters and the key columns
 * it reads. What a row holds and the record it becomes are both SQL stores' rules (../sql/rows.ts).
 */

/** The key columns the code reads: what authenticating needs (the usage figures live in chatgate_key_usage). */
export const KEY_COLUMNS = ['id', 'name', 'digest', 'prefix', 'created_at', 'revoked_at', 'expires_at', 'models', 'endpoints', 'allowed_ips', 'rpm', 'tpm', 'max_concurrent', 'account_id', 'created_by', 'tokens_per_day', 'tokens_per_month', 'budget_day_nanos', 'budget_month_nanos', 'previous_digest', 'previous_until', 'previous_for'];
/** A key row with its usage figures: `k` the key row (or a CTE returning KEY_COLUMNS), `u` its usage row if any. */
export const WITH_USAGE = `select ${KEY_COLUMNS.map((column) => `k.${column}`).join(', ')},
  u.requests as requests_total, u.prompt_tokens as prompt_tokens_total, u.completion_tokens as completion_tokens_total, u.last_used_at`;

/** `insert into <table> (a, b) values ($<first>, $<first + 1>)`: a row's params go in as Object.values(params). */
export function insertSql(table: string, params: Record<string, unknown>, first = 1): string {
  const columns = Object.keys(params);
  return `insert into ${table} (${columns.join(', ')}) values (${columns.map((_, i) => `$${first + i}`).join(', ')})`;
}
