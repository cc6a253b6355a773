/**
 * Pure: where a range of days is read from in the ledger. Each month's usage is kept twice, by day
 * and as the month's sums (both written by the same statement): a month the range holds whole is read
 * from its sums (a row a key, model and end user, whatever the days), the rest day by day. The month
 * of `today` counts as whole once the range reaches today: no usage comes after it.
 */

export interface LedgerSpans {
  /** First days (YYYY-MM-01) of the months read from their sums. */
  months: string[];
  /** Ranges of days (inclusive) read day by day, in order, none adjacent to another. */
  days: Array<{ from: string; to: string }>;
}

const DAY_MS = 86_400_000;
const dayAfter = (day: string) => new Date(Date.parse(`${day}T00:00:00Z`) + DAY_MS).toISOString().slice(0, 10);
/** The last day of the month `day` is in. */
export const monthEnd = (day: string) => {
  const [year, month] = day.split('-').map(Number) as [number, number];
  return new Date(Date.UTC(year, month, 0)).toISOString().slice(0, 10);
};
export const monthStart = (day: string) => `${day.slice(0, 7)}-01`;

export function ledgerSpans(from: string, to: string, today: string): LedgerSpans {
  const spans: LedgerSpans = { months: [], days: [] };
  const addDays = (first: string, last: string) => {
    const previous = spans.days[spans.days.length - 1];
    if (previous && dayAfter(previous.to) === first) previous.to = last;
    else spans.days.push({ from: first, to: last });
  };
  for (let cursor = from; cursor <= to; ) {
    const start = monthStart(cursor);
    if (start > today) {
      addDays(cursor, to); // months after today's hold nothing: one range, however long
      break;
    }
    const end = monthEnd(cursor);
    const last = end < to ? end : to;
    if (cursor === start && last >= (end < today ? end : today)) spans.months.push(start);
    else addDays(cursor, last);
    cursor = dayAfter(end);
  }
  return spans;
}
