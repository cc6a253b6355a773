/**
 * Token quotas per UTC day and month, of a key and of its account: once the tokens counted for the
 * period reach the quota, requests with the account's keys get 429 insufficient_quota until the
 * period turns. A stream in flight is never cut: only admission is checked.
 *
 * One count across all replicas: each replica adds what its answers used to shared counters (the key
 * store; with Redis configured, Redis over the key store, see redis-quota.ts) and reads the totals
 * back, both every `syncMs`; between two
 * syncs it adds its own uncounted use to the last totals it read. So a quota reached through one
 * replica is enforced by every replica within about two syncs (1 s by default), and the check on the
 * request path is a few map lookups: no store round trip, whatever the quota's state. Account quotas
 * are read from the store on the same sync, for the accounts in use.
 */
import type { CallerKey } from '../context';
import type { Quota } from '../store/types';

/** Where the shared counters live. */
export interface QuotaCounters {
  /** Adds tokens to counters (scope -> tokens). */
  add(amounts: ReadonlyMap<string, number>): Promise<void>;
  /** The counters' totals (0 for one never counted). */
  totals(scopes: readonly string[]): Promise<Map<string, number>>;
  close?(): Promise<void>;
}

export interface QuotaEvents {
  /** An account's quota, read on a sync (undefined: no such account). */
  accountQuota(accountIds: readonly string[]): Promise<Map<string, Quota>>;
  /** A sync failed (the counters or the store away); what was not added is kept for the next. */
  syncFailed?(err: unknown): void;
}

export type Period = 'day' | 'month';
export interface QuotaRefusal {
  scope: 'key' | 'account';
  period: Period;
  /** Until the period turns. */
  retryAfterSeconds: number;
}

interface Counter {
  /** The shared total at the last sync. */
  synced: number;
  /** Used here, not yet added to the shared counter. */
  pending: number;
  /** Being added by the sync under way. */
  sending: number;
  /** The sync (count) that last checked or charged it: counters not touched for a while stop being synced. */
  touched: number;
}

/** A counter not used for this many syncs is no longer read back. */
const IDLE_SYNCS = 120;

export class QuotaTracker {
  private readonly counters = new Map<string, Counter>();
  private readonly accountQuotas = new Map<string, Quota>();
  private readonly activeAccounts = new Map<string, number>();
  private syncs = 0;
  private timer: NodeJS.Timeout | undefined;
  private syncing: Promise<void> | undefined;

  constructor(
    private readonly shared: QuotaCounters,
    private readonly events: QuotaEvents,
    private readonly now: () => Date = () => new Date(),
  ) {}

  start(syncMs: number): void {
    this.timer = setInterval(() => void this.sync(), syncMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.sync();
    await this.shared.close?.();
  }

  /** Whether a request with this key is over a quota now (no I/O). */
  check(key: CallerKey): QuotaRefusal | undefined {
    const at = this.now();
    this.activeAccounts.set(key.accountId, this.syncs);
    const account = this.accountQuotas.get(key.accountId);
    for (const [scope, id, quota] of [
      ['key', key.id, key.quota],
      ['account', key.accountId, account],
    ] as const) {
      if (!quota) continue;
      for (const period of ['day', 'month'] as const) {
        const limit = period === 'day' ? quota.tokensPerDay : quota.tokensPerMonth;
        if (limit === null) continue;
        if (this.used(scopeName(scope, id, period, at)) >= limit) return { scope, period, retryAfterSeconds: secondsToNext(period, at) };
      }
    }
    return undefined;
  }

  /** An answer used these tokens: counted for the key and its account, this day and month. */
  charge(key: CallerKey, tokens: number): void {
    if (!(tokens > 0)) return;
    const at = this.now();
    for (const scope of [scopeName('key', key.id, 'day', at), scopeName('key', key.id, 'month', at), scopeName('account', key.accountId, 'day', at), scopeName('account', key.accountId, 'month', at)]) {
      this.counter(scope).pending += tokens;
    }
  }

  /** Adds what was used here to the shared counters, then reads back the totals and the account quotas in use. */
  sync(): Promise<void> {
    this.syncing ??= this.syncOnce().finally(() => (this.syncing = undefined));
    return this.syncing;
  }

  private async syncOnce(): Promise<void> {
    this.syncs++;
    const amounts = new Map<string, number>();
    for (const [scope, counter] of this.counters) {
      if (counter.pending === 0) continue;
      counter.sending = counter.pending;
      counter.pending = 0;
      amounts.set(scope, counter.sending);
    }
    try {
      await this.shared.add(amounts);
      // Added: the totals read next include it.
      const scopes = [...this.counters.keys()];
      const totals = await this.shared.totals(scopes);
      for (const [scope, total] of totals) {
        const counter = this.counters.get(scope);
        if (!counter) continue;
        counter.synced = total;
        counter.sending = 0;
      }
      this.forgetIdle();
      const accounts = [...this.activeAccounts.keys()];
      const quotas = await this.events.accountQuota(accounts);
      for (const id of accounts) {
        const quota = quotas.get(id);
        if (quota) this.accountQuotas.set(id, quota);
        else this.accountQuotas.delete(id);
      }
    } catch (err) {
      // Not added (or not known to be): kept for the next sync, still counted here meanwhile.
      for (const [scope, tokens] of amounts) {
        const counter = this.counters.get(scope);
        if (counter && counter.sending === tokens) {
          counter.pending += tokens;
          counter.sending = 0;
        }
      }
      this.events.syncFailed?.(err);
    }
  }

  private used(scope: string): number {
    const counter = this.counter(scope);
    return counter.synced + counter.pending + counter.sending;
  }

  private counter(scope: string): Counter {
    let counter = this.counters.get(scope);
    if (!counter) {
      counter = { synced: 0, pending: 0, sending: 0, touched: this.syncs };
      this.counters.set(scope, counter);
    }
    counter.touched = this.syncs;
    return counter;
  }

  /** Counters of past periods, or long unused, are dropped (with nothing left to add). */
  private forgetIdle(): void {
    const at = this.now();
    const today = at.toISOString().slice(0, 10);
    const month = today.slice(0, 7);
    for (const [scope, counter] of this.counters) {
      const period = scope.slice(scope.lastIndexOf(':') + 1);
      const current = period === today || period === month;
      if (counter.pending === 0 && counter.sending === 0 && (!current || this.syncs - counter.touched > IDLE_SYNCS)) this.counters.delete(scope);
    }
    for (const [account, seen] of this.activeAccounts) if (this.syncs - seen > IDLE_SYNCS) this.activeAccounts.delete(account);
  }
}

/** `key:<id>:d:2026-11-27`, `account:<id>:m:2026-11`: a counter ends with its period. */
export function scopeName(scope: 'key' | 'account', id: string, period: Period, at: Date): string {
  const iso = at.toISOString();
  return `${scope}:${id}:${period === 'day' ? `d:${iso.slice(0, 10)}` : `m:${iso.slice(0, 7)}`}`;
}

/** Seconds until the UTC day or month turns. */
export function secondsToNext(period: Period, at: Date): number {
  const next = period === 'day' ? Date.UTC(at.getUTCFullYear(), at.getUTCMonth(), at.getUTCDate() + 1) : Date.UTC(at.getUTCFullYear(), at.getUTCMonth() + 1, 1);
  return Math.ceil((next - at.getTime()) / 1000);
}
