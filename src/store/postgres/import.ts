/**
 * `chatgate store import` into PostgreSQL: the shared import's rows (import-plan.ts) in one
 * transaction on one connection, each by `insert ... on conflict do nothing`. Every statement is
 * bounded by the store's deadline from our side; one that outlives it ends the connection, and with
 * it the transaction: nothing is half imported.
 */
import { promises as fs } from 'node:fs';
import type pg from 'pg';
import { parseContents, type Data } from '../file-schema';
import { StoreDeadlineExceeded } from '../guarded';
import { emptyReport, importRows, type ImportReport, type Reference } from '../import-plan';
import { keyParams } from '../sql/rows';
import { resumImportedMonths } from '../sql/usage';
import { queryWithin } from './query';
import { insertSql } from './rows';

export async function importFileIntoPostgres(pool: pg.Pool, file: string, timeoutMs: number): Promise<ImportReport> {
  const text = await fs.readFile(file, 'utf8');
  return importIntoPostgres(pool, parseContents(text, file), timeoutMs);
}

export async function importIntoPostgres(pool: pg.Pool, data: Data, timeoutMs: number): Promise<ImportReport> {
  const planned = importRows(data, {
    keyParams,
    quotaParams: (scope, tokens) => ({ scope, tokens }),
  });
  const report = emptyReport();
  const client = await pool.connect();
  /** Set when a statement outlived its deadline: the connection is stuck behind it. */
  let stuck: StoreDeadlineExceeded | undefined;
  const query = async (sql: string, params: unknown[] = []): Promise<pg.QueryResult> => {
    try {
      return await queryWithin(client, sql, params, timeoutMs);
    } catch (err) {
      if (err instanceof StoreDeadlineExceeded) stuck = err;
      throw err;
    }
  };
  const exists = async (reference: Reference) =>
    (reference.table === 'chatgate_accounts'
      ? await query('select 1 from chatgate_accounts where id = $1', [reference.id])
      : await query('select 1 from chatgate_people where email = $1', [reference.email])
    ).rowCount! > 0;
  const insert = async (table: string, params: Record<string, unknown>) => (await query(`${insertSql(table, params)} on conflict do nothing`, Object.values(params))).rowCount! > 0;
  try {
    await query('begin');
    for (const row of planned) {
      let present = true;
      for (const reference of row.requires) if (present) present = await exists(reference);
      if (!present) {
        report.skipped[row.kind]++;
        continue;
      }
      const added = await insert(row.table, row.params);
      report[added ? 'imported' : 'present'][row.kind]++;
      if (added && row.with) await insert(row.with.table, row.with.params);
    }
    // The imported days (of no model and no end user) summed into their months again, from the ledger.
    if (report.imported.usage > 0) {
      await query(resumImportedMonths("date_trunc('month', date)::date"));
    }
    await query('commit');
  } catch (err) {
    // Rolled back under the same deadline; a connection that is stuck, or cannot roll back, is ended
    // instead (and its transaction with it), never pooled mid-transaction.
    let ended: Error | undefined = stuck;
    if (!ended) ended = await query('rollback').then(() => undefined, (rollbackErr: unknown) => (rollbackErr instanceof Error ? rollbackErr : new Error(String(rollbackErr))));
    client.release(ended ?? undefined);
    throw stuck && err === stuck ? new Error(`${stuck.message}; if it was the commit, the import may have gone in: run it again to see (it adds nothing twice)`) : err;
  }
  client.release();
  return report;
}
