/**
 * `chatgate store import` into SQLite: the shared import's rows (../import-plan.ts) in one
 * transaction, each by `insert or ignore`.
 */
import { promises as fs } from 'node:fs';
import { parseContents, type Data } from '../file-schema';
import { emptyReport, importRows, type ImportReport, type Reference } from '../import-plan';
import { resumImportedMonths } from '../sql/usage';
import * as rows from './rows';
import type { SqliteKeyStore } from './store';

export { RECORD_KINDS, type ImportReport, type RecordKind } from '../import-plan';

export async function importFile(store: SqliteKeyStore, file: string): Promise<ImportReport> {
  const text = await fs.readFile(file, 'utf8');
  return importData(store, parseContents(text, file));
}

export async function importData(store: SqliteKeyStore, data: Data): Promise<ImportReport> {
  const report = emptyReport();
  const { sql } = store;
  const exists = (reference: Reference) =>
    reference.table === 'chatgate_accounts'
      ? sql.get('select 1 from chatgate_accounts where id = ?', reference.id) !== undefined
      : sql.get('select 1 from chatgate_people where email = ?', reference.email) !== undefined;
  const insert = (table: string, params: Record<string, unknown>) => sql.run(rows.insertSql('insert or ignore', table, Object.keys(params)), params).changes > 0;
  const planned = importRows(data, {
    keyParams: rows.keyParams,
    quotaParams: (scope, tokens) => ({ scope, period: rows.periodOf(scope), tokens }),
  });
  await sql.write(() => {
    for (const row of planned) {
      if (!row.requires.every(exists)) {
        report.skipped[row.kind]++;
        continue;
      }
      const added = insert(row.table, row.params);
      report[added ? 'imported' : 'present'][row.kind]++;
      if (added && row.with) insert(row.with.table, row.with.params);
    }
    // The imported days (of no model and no end user) summed into their months again, from the ledger.
    if (report.imported.usage > 0) {
      sql.run(resumImportedMonths("substr(date, 1, 7) || '-01'"));
    }
  });
  return report;
}
