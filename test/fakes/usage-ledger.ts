/** The ledger's breakdown as the SQL stores compute it, for the fakes (the contract suite holds them to it). */
import type { BreakdownQuery, KeyUse, UsageDay, UsageShare } from '../../src/store/types';

/** A ledger row: a day's use of a key, a model and an end user ('' for none). */
export interface LedgerRow extends UsageDay {
  model: string;
  endUser: string;
}

export function breakdownOf(rows: readonly LedgerRow[], accountId: string, from: string, to: string, query: BreakdownQuery): UsageShare[] {
  const shares = new Map<string, UsageShare>();
  for (const row of rows) {
    if (row.accountId !== accountId || row.date < from || row.date > to) continue;
    if ((query.keyId !== undefined && row.keyId !== query.keyId) || (query.endUser !== undefined && row.endUser !== query.endUser)) continue;
    const group = query.by === 'model' ? row.model : row.endUser;
    const share = shares.get(group) ?? { group, requests: 0, refused: 0, costNanos: 0, promptTokens: 0, completionTokens: 0 };
    share.requests += row.requests;
    share.refused += row.refused;
    share.costNanos += row.costNanos;
    share.promptTokens += row.promptTokens;
    share.completionTokens += row.completionTokens;
    shares.set(group, share);
  }
  const tokens = (share: UsageShare) => share.promptTokens + share.completionTokens;
  return [...shares.values()]
    .sort((a, b) => b.costNanos - a.costNanos || tokens(b) - tokens(a) || b.requests - a.requests || (a.group < b.group ? -1 : a.group > b.group ? 1 : 0))
    .slice(0, query.limit);
}

/** A batch's uses added to the ledger's rows (one a day, key, model and end user); a use that counted nothing makes none. */
export function addToLedger(rows: LedgerRow[], uses: readonly KeyUse[]): void {
  for (const use of uses) {
    if (use.requests + use.refused + use.promptTokens + use.completionTokens + use.costNanos === 0) continue;
    const row = rows.find((r) => r.accountId === use.accountId && r.date === use.date && r.keyId === use.keyId && r.model === use.model && r.endUser === use.endUser);
    if (!row) {
      const { at: _at, ...counts } = use;
      rows.push(counts);
      continue;
    }
    row.requests += use.requests;
    row.refused += use.refused;
    row.costNanos += use.costNanos;
    row.promptTokens += use.promptTokens;
    row.completionTokens += use.completionTokens;
  }
}

/** Deletes at most `limit` rows of the months before the one `before` is in, from each list in turn: how many it deleted. */
export function pruneRows(lists: ReadonlyArray<Array<{ date: string }>>, day: string, limit: number): number {
  const before = `${day.slice(0, 7)}-01`;
  let deleted = 0;
  for (const rows of lists) {
    for (let i = rows.length - 1; i >= 0 && deleted < limit; i--) {
      if (rows[i]!.date < before) {
        rows.splice(i, 1);
        deleted++;
      }
    }
  }
  return deleted;
}

/** The ledger's rows, by file: the retired file store never had a ledger; its fake keeps one in this process. */
const ledgers = new Map<string, LedgerRow[]>();
export function ledgerOf(file: string): LedgerRow[] {
  const rows = ledgers.get(file) ?? [];
  ledgers.set(file, rows);
  return rows;
}

/**
 * A batch's uses added to the daily rows (one a day and key) and to the ledger: the usage half of
 * recordUse, for the memory fake, which holds no keys (the contract suite fills it this way).
 */
export function addUses(days: UsageDay[], ledger: LedgerRow[], uses: readonly KeyUse[]): void {
  addToDays(days, uses);
  addToLedger(ledger, uses);
}

/** A batch's uses added to the daily rows, one a day and key (a row already there is added to in place). */
export function addToDays(days: UsageDay[], uses: readonly KeyUse[]): void {
  for (const use of uses) {
    const day = days.find((row) => row.keyId === use.keyId && row.date === use.date);
    if (day) {
      day.requests += use.requests;
      day.refused += use.refused;
      day.costNanos += use.costNanos;
      day.promptTokens += use.promptTokens;
      day.completionTokens += use.completionTokens;
    } else {
      days.push({ date: use.date, accountId: use.accountId, keyId: use.keyId, requests: use.requests, refused: use.refused, costNanos: use.costNanos, promptTokens: use.promptTokens, completionTokens: use.completionTokens });
    }
  }
}
