/**
 * What the quota tracker (quota.ts) deals in: the shared counters it syncs with and the events it
 * asks of the store, its answers (a reservation or a refusal), and the scopes it counts: one counter
 * a key or account, a day or month, named so that it ends with its period.
 */
import type { CallerKey } from '../context';
import type { Quota, UsageDay } from '../store/types';

/** Where the shared counters live. */
export interface QuotaCounters {
  /** Adds tokens to counters (scope -> tokens). */
  add(amounts: ReadonlyMap<string, number>): Promise<void>;
  /** The counters' totals (0 for one never counted). */
  totals(scopes: readonly string[]): Promise<Map<string, number>>;
  close?(): Promise<void>;
  /** Room the shared counters hold for this replica's requests (Redis: redis-quota-leases.ts); absent: replicas see each other's use at the syncs only. */
  leases?: SharedLeases;
}

/** A counter's room held for this replica, beyond what the shared counter has of its use. */
export interface SharedLeases {
  /** What this replica may still hold in the scope without asking (its lease less its use not yet added); undefined: no leases now (Redis away). */
  room(scope: string): number | undefined;
  /** What grows under way ask for in the scope (a request arriving meanwhile asks only for the rest). */
  asking(scope: string): number;
  /** Grows this replica's leases by at least these needs, all or none (one round trip); throws when the counters cannot be asked. */
  grow(asks: readonly LeaseAsk[]): Promise<LeaseAnswer>;
  /** Gives so much of a lease back: at the next sync, or (`now`) at once. */
  release(scope: string, amount: number, now?: boolean): void;
  /** What the counter's replicas have used or leased, as last seen (the shared total and every lease); undefined: not seen. */
  taken(scope: string): number | undefined;
  /** What the other replicas held in the scope when last seen: counted as used while there are no leases (Redis away). */
  others(scope: string): number;
}

export interface LeaseAsk {
  scope: string;
  /** The counter's limit, less what this replica counts beyond the shared counter (a quota set midway: the daily usage). */
  limit: number;
  /** What this replica holds beyond its lease. */
  need: number;
}

/** What a grow found: per ask, what the shared counter holds; when one did not fit, which, and each ask's room (what no lease holds). */
export interface LeaseAnswer {
  short: number | undefined;
  rooms: number[];
  used: number[];
}

/** An account's limits in a measure: its own for the day and month, and each end user's for the day (null or absent: none). */
export type AccountLimits = Quota & { endUserPerDay?: number | null };

/** Whose counter a scope is: a key's, an account's, or an end user's of an account (a day's only). */
export type ScopeKind = 'key' | 'account' | 'endUser';

export interface QuotaEvents {
  /** An account's limits, read on a sync (undefined: no such account). */
  accountQuota(accountIds: readonly string[]): Promise<Map<string, AccountLimits>>;
  /**
   * The store's daily usage of an account's keys, dates inclusive: where a quota set midway through
   * a period starts from. Without it a new counter starts from the shared counter alone.
   */
  usage?(accountId: string, from: string, to: string): Promise<readonly UsageDay[]>;
  /** A sync failed (the counters or the store away); what was not added is kept for the next. */
  syncFailed?(err: unknown): void;
  /** A counter's use reached a threshold of its limit (QuotaOptions.thresholds), seen at a sync: once per threshold here. */
  crossed?(crossing: Crossing): void;
}

/** A threshold of a key's or account's limit reached in a period, as one replica saw it. */
export interface Crossing {
  /** The counter's scope (with its measure's prefix): `[budget:]key:<id>:d:<day>` or `...:m:<month>`. */
  scope: string;
  accountId: string;
  /** The key whose own limit it is; undefined: the account's. */
  keyId: string | undefined;
  period: Period;
  /** The UTC day or month. */
  periodStart: string;
  threshold: number;
  /** In the measure's unit (tokens, or nano-units of the currency). */
  used: number;
  limit: number;
}

export interface QuotaOptions {
  /** How often every replica writes its use to the store's daily usage (auth.lastUsedFlushMs). */
  usageFlushMs?: number;
  /** How long after a counter is made every replica counts its scope and has written its use from before. */
  settleMs?: number;
  /** What it counts (TOKENS when absent). */
  measure?: Measure;
  /** Shares of a limit (ascending, each in (0, 1]) whose reaching is told to `crossed`; none: none told. */
  thresholds?: readonly number[];
  /** The longest a request waits for its counters' first read of their shared totals (QuotaTracker.prime); 1 s when absent. */
  primeTimeoutMs?: number;
}

export type Period = 'day' | 'month';
/** What a request reserved: released once its real use is charged, or it ended without any. Idempotent. */
export interface QuotaReservation {
  release(): void;
  /**
   * Set when the reservation went past this replica's leases (see SharedLeases): settles once the
   * shared counters have it (undefined: it holds), or with a refusal when their room is too small
   * (the caller then releases it). Counters that cannot be asked settle it undefined: admitted on
   * this replica's count alone.
   */
  shared?: Promise<(QuotaRefusal & { room: number }) | undefined>;
}

export interface QuotaRefusal {
  scope: ScopeKind;
  period: Period;
  /** Until the period turns. */
  retryAfterSeconds: number;
}

export function limitOf(quota: Quota | Readonly<Quota>, period: Period): number | null {
  return period === 'day' ? quota.tokensPerDay : quota.tokensPerMonth;
}

/** A counter's period: what its scope ends with (a day `2026-11-27` or a month `2026-11`). */
export const periodOf = (scope: string): string => scope.slice(scope.lastIndexOf(':') + 1);
export const periodKind = (scope: string): Period => (periodOf(scope).length === 10 ? 'day' : 'month');

/** `key:<id>:d:2026-11-27`, `account:<id>:m:2026-11`, `enduser:<account id>:<digest>:d:2026-11-27`: a counter ends with its period. */
export function scopeName(scope: ScopeKind, id: string, period: Period, at: Date): string {
  const iso = at.toISOString();
  return `${scope === 'endUser' ? 'enduser' : scope}:${id}:${period === 'day' ? `d:${iso.slice(0, 10)}` : `m:${iso.slice(0, 7)}`}`;
}

/** Seconds until the UTC day or month turns. */
export function secondsToNext(period: Period, at: Date): number {
  const next = period === 'day' ? Date.UTC(at.getUTCFullYear(), at.getUTCMonth(), at.getUTCDate() + 1) : Date.UTC(at.getUTCFullYear(), at.getUTCMonth() + 1, 1);
  return Math.ceil((next - at.getTime()) / 1000);
}

/**
 * What a tracker counts: tokens (the quotas) or nano-units of the price table's currency (the
 * budgets). Limits are read in the shape of a quota in either (`tokensPerDay` holds a day's budget in
 * nano-units for money); the counters of each live apart, their scopes starting with `prefix`.
 */
export interface Measure {
  readonly prefix: string;
  /** The key's own limits, in this measure. */
  keyLimits(key: CallerKey): Quota;
  /** What a row of the store's daily usage counts, in this measure. */
  used(row: UsageDay): number;
}

export const TOKENS: Measure = { prefix: '', keyLimits: (key) => key.quota, used: (row) => row.promptTokens + row.completionTokens };

/** Pure: the daily usage rows summed for the day and the month `today` is in, by key ('' for the whole account), in a measure. */
export function usageSums(rows: readonly UsageDay[], today: string, measure: Measure): Map<string, { day: number; month: number }> {
  const month = today.slice(0, 7);
  const sums = new Map<string, { day: number; month: number }>();
  for (const row of rows) {
    const amount = measure.used(row);
    for (const id of [row.keyId, '']) {
      let sum = sums.get(id);
      if (!sum) {
        sum = { day: 0, month: 0 };
        sums.set(id, sum);
      }
      if (row.date === today) sum.day += amount;
      if (row.date.startsWith(month)) sum.month += amount;
    }
  }
  return sums;
}

/** A counter of the tracker's (quota.ts): one scope, as this replica knows it. */
export interface Counter {
  /** The shared total at the last sync. */
  synced: number;
  /** Used here, not yet added to the shared counter. */
  pending: number;
  /** Being added by the sync under way. */
  sending: number;
  /** Reserved by requests in flight on this replica. */
  reserved: number;
  /** The sync (count) of its last reservation: a lease not needed for two syncs goes back (quota-leases.ts). */
  reservedSync?: number;
  /**
   * Not used for IDLE_SYNCS syncs: no longer read back, but kept with its last total until its period
   * ends; used again, it counts from that total: a quota spent, then left idle, stays spent.
   */
  dormant: boolean;
  /**
   * Its shared total has been read since it was made (or woke from dormant): until then the requests
   * that need it wait for one read (QuotaTracker.prime), else a replica that just started, or a key
   * back after a quiet minute, would admit a burst against a count of 0 until its next sync.
   */
  read: boolean;
  /** Its limit as last seen by a check, reservation or charge (thresholds are shares of it). */
  limit?: number;
  /** The highest index of QuotaOptions.thresholds told as reached here; -1: none. */
  alerted: number;
  /** A request was refused here with less than FULL_SHARE of the limit left: it counts as reached (quota-crossings.ts). */
  full?: true;
  /** The sync (count) that last checked or charged it: counters not touched for a while stop being synced. */
  touched: number;
  /** Whose use it counts: the key's (keyId), one end user's of the account (endUser), or all the account's keys'. */
  readonly accountId: string;
  readonly keyId: string | undefined;
  /** An end user's: no floor from the daily usage (which knows no end user) and no alerts (one per end user would be a flood). */
  readonly endUser?: true;
  /** When it was made (ms). */
  readonly born: number;
  /** The store's daily usage for the period at the last read, and what this replica used since. */
  floor: number;
  sinceFloor: number;
  /** When the daily usage is next read (ms); undefined: never again (the shared counter holds it all). */
  floorDue: number | undefined;
}

/** What a counter counts as used: the larger of the shared total with this replica's use not in it, and the daily usage read with this replica's use since. */
export function usedOf(counter: Counter): number {
  return Math.max(counter.synced + counter.pending + counter.sending, counter.floor + counter.sinceFloor);
}

/** Use counted on a counter (and since its floor was read, while one is). */
export function charged(counter: Counter, tokens: number): void {
  counter.pending += tokens;
  if (counter.floorDue !== undefined) counter.sinceFloor += tokens;
}

/** The counter no longer reads the daily usage: the shared counter holds it all. */
export function stopFloor(counter: Counter): void {
  counter.floorDue = undefined;
  counter.floor = 0;
  counter.sinceFloor = 0;
}
