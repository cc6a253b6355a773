/**
 * The store's daily usage as a floor under a quota counter (quota.ts's header says why): read for a
 * new counter at the next sync, one read per account for all its counters (a few accounts a sync),
 * and then again every `usageFlushMs` while it is above the shared counter (a quota set midway), else
 * once more after `settleMs`, and no more. None for past periods.
 */
import { periodKind, periodOf, stopFloor, usageSums, type Counter, type Measure, type QuotaEvents } from './quota-scopes';
import type { UsageDay } from '../store/types';

/** At most this many accounts' daily usage is read on one sync. */
const FLOOR_ACCOUNTS_PER_SYNC = 16;

export async function readFloors(counters: Map<string, Counter>, events: QuotaEvents, at: Date, timing: { usageFlushMs: number; settleMs: number; measure: Measure }): Promise<void> {
  const usage = events.usage;
  if (!usage) return;
  const ms = at.getTime();
  const today = at.toISOString().slice(0, 10);
  const month = today.slice(0, 7);
  const due = new Map<string, Array<[string, Counter]>>();
  for (const entry of counters) {
    const [scope, counter] = entry;
    if (counter.dormant || counter.floorDue === undefined || counter.floorDue > ms) continue;
    const period = periodOf(scope);
    if (period !== today && period !== month) {
      stopFloor(counter);
      continue;
    }
    let list = due.get(counter.accountId);
    if (!list) {
      if (due.size === FLOOR_ACCOUNTS_PER_SYNC) continue;
      list = [];
      due.set(counter.accountId, list);
    }
    list.push(entry);
  }
  for (const [accountId, list] of due) {
    const from = list.some(([scope]) => periodKind(scope) === 'month') ? `${month}-01` : today;
    let rows: readonly UsageDay[];
    try {
      rows = await usage(accountId, from, today);
    } catch (err) {
      for (const [, counter] of list) counter.floorDue = ms + timing.usageFlushMs;
      events.syncFailed?.(err);
      continue;
    }
    const sums = usageSums(rows, today, timing.measure);
    for (const [scope, counter] of list) {
      if (counters.get(scope) !== counter) continue; // dropped meanwhile
      const sum = sums.get(counter.keyId ?? '');
      counter.floor = sum ? sum[periodKind(scope)] : 0;
      counter.sinceFloor = 0;
      if (counter.floor > counter.synced) counter.floorDue = ms + timing.usageFlushMs;
      else if (ms - counter.born < timing.settleMs) counter.floorDue = counter.born + timing.settleMs;
      else stopFloor(counter);
    }
  }
}

