/**
 * Thresholds of a limit reached (alerts.ts sends them): after each sync, every counter of the current
 * period whose use reached a threshold of its limit since it was last told is told, one call for each
 * threshold between. A replica that restarts tells them again; the store's claim keeps it to one alert.
 *
 * Reservations keep use below a limit (a request is refused when what it may cost does not fit), so
 * use seldom lands on it exactly: a counter that refused a request with less than FULL_SHARE of its
 * limit left is told as having reached the limit (threshold 1 and those below), with its real use.
 */

/** The share of a limit left under which a refusal means the limit is reached. */
export const FULL_SHARE = 0.1;
import { periodKind, periodOf, type Counter, type Crossing } from './quota-scopes';

export function tellCrossings(counters: ReadonlyMap<string, Counter>, thresholds: readonly number[], used: (counter: Counter) => number, crossed: (crossing: Crossing) => void, at: Date): void {
  if (thresholds.length === 0) return;
  const today = at.toISOString().slice(0, 10);
  for (const [scope, counter] of counters) {
    const limit = counter.limit;
    if (limit === undefined || limit <= 0 || counter.dormant || counter.endUser || counter.alerted === thresholds.length - 1) continue;
    const periodStart = periodOf(scope);
    if (periodStart !== today && periodStart !== today.slice(0, 7)) continue;
    const now = used(counter);
    const reached = counter.full ? Math.max(now, limit) : now;
    while (counter.alerted + 1 < thresholds.length && reached >= thresholds[counter.alerted + 1]! * limit) {
      counter.alerted++;
      crossed({ scope, accountId: counter.accountId, keyId: counter.keyId, period: periodKind(scope), periodStart, threshold: thresholds[counter.alerted]!, used: now, limit });
    }
  }
}
