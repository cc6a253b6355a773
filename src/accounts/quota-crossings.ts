/**
 * Thresholds of a limit reached (alerts.ts sends them): after each sync, every counter of the current
 * period whose use reached a threshold of its limit since it was last told is told, one call for each
 * threshold between. A replica that restarts tells them again; the store's claim keeps it to one alert.
 */
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
    while (counter.alerted + 1 < thresholds.length && now >= thresholds[counter.alerted + 1]! * limit) {
      counter.alerted++;
      crossed({ scope, accountId: counter.accountId, keyId: counter.keyId, period: periodKind(scope), periodStart, threshold: thresholds[counter.alerted]!, used: now, limit });
    }
  }
}
