/**
 * What both SQL stores' usage statements share: the counts a usage row holds, and how a row adds to
 * the one of the same key and day (or month) it meets (the daily rows, the ledger and its months).
 */

/** The counts of a daily row and of the ledger's, in the order the statements name them. */
export const USAGE_COUNTS = ['requests', 'refused', 'cost_nanos', 'prompt_tokens', 'completion_tokens'] as const;

/** `requests = <alias>.requests + excluded.requests, ...`: the update of an `on conflict` that meets a row named `alias`. */
export const addUse = (alias: string): string => USAGE_COUNTS.map((column) => `${column} = ${alias}.${column} + excluded.${column}`).join(', ');

/**
 * After an import: the ledger's days of no model and no end user (what a keys.json held) summed into
 * their months again. `monthOf` is the dialect's first day of the month of `date`.
 */
export const resumImportedMonths = (monthOf: string): string => `insert into chatgate_usage_ledger_monthly (account_id, month, key_id, model, end_user, ${USAGE_COUNTS.join(', ')})
  select account_id, ${monthOf}, key_id, model, end_user, ${USAGE_COUNTS.map((column) => `sum(${column})`).join(', ')}
  from chatgate_usage_ledger where model = '' and end_user = '' group by 1, 2, 3, 4, 5
  on conflict (account_id, month, key_id, model, end_user) do update set ${USAGE_COUNTS.map((column) => `${column} = excluded.${column}`).join(', ')}`;
