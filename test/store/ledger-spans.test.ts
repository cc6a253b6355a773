/** Where a range of days is read from in the ledger: whole months from their sums, the rest day by day. */
import { ledgerSpans, monthEnd } from '../../src/store/ledger-spans';

const TODAY = '2026-11-29';

test('whole months from their sums; the month of today is whole once the range reaches today', () => {
  expect(ledgerSpans('2026-09-01', '2026-10-31', TODAY)).toEqual({ months: ['2026-09-01', '2026-10-01'], days: [] });
  expect(ledgerSpans('2026-11-01', TODAY, TODAY)).toEqual({ months: ['2026-11-01'], days: [] });
  expect(ledgerSpans('2026-11-01', '2026-12-31', TODAY)).toEqual({ months: ['2026-11-01'], days: [{ from: '2026-12-01', to: '2026-12-31' }] });
  // Yesterday is not the month's whole: today's use is in its sums.
  expect(ledgerSpans('2026-11-01', '2026-11-28', TODAY)).toEqual({ months: [], days: [{ from: '2026-11-01', to: '2026-11-28' }] });
});

test('partial months day by day, adjacent ranges as one; a range of a day, an empty range, a long future', () => {
  // The console's last 30 days on the 1st: October day by day, November from its sums.
  expect(ledgerSpans('2026-10-03', '2026-11-01', '2026-11-01')).toEqual({ months: ['2026-11-01'], days: [{ from: '2026-10-03', to: '2026-10-31' }] });
  expect(ledgerSpans('2026-08-15', '2026-11-10', TODAY)).toEqual({
    months: ['2026-09-01', '2026-10-01'],
    days: [
      { from: '2026-08-15', to: '2026-08-31' },
      { from: '2026-11-01', to: '2026-11-10' },
    ],
  });
  expect(ledgerSpans('2026-07-20', '2026-08-10', TODAY)).toEqual({ months: [], days: [{ from: '2026-07-20', to: '2026-08-10' }] });
  expect(ledgerSpans('2026-05-05', '2026-05-05', TODAY)).toEqual({ months: [], days: [{ from: '2026-05-05', to: '2026-05-05' }] });
  expect(ledgerSpans('2026-05-06', '2026-05-05', TODAY)).toEqual({ months: [], days: [] });
  expect(ledgerSpans('2026-11-01', '2999-12-31', TODAY)).toEqual({ months: ['2026-11-01'], days: [{ from: '2026-12-01', to: '2999-12-31' }] });
});

test('month ends, leap years included', () => {
  expect(['2024-02-10', '2025-02-01', '2026-04-30', '2026-12-31'].map(monthEnd)).toEqual(['2024-02-29', '2025-02-28', '2026-04-30', '2026-12-31']);
});
