/**
 * What the quota tracker (quota.ts) deals in: the shared counters it syncs with and the events it
 * asks of the store, its answers (a reservation or a refusal), and the scopes it counts: one counter
 * a key or account, a day or month, named so that it ends with its period.
 */
import type { Quota, UsageDay } from '../store/types';

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
  /**
   * The store's daily usage of an account's keys, dates inclusive: where a quota set midway through
   * a period starts from. Without it a new counter starts from the shared counter alone.
   */
  usage?(accountId: string, from: string, to: string): Promise<readonly UsageDay[]>;
  /** A sync failed (the counters or the store away); what was not added is kept for the next. */
  syncFailed?(err: unknown): void;
}

export interface QuotaOptions {
  /** How often every replica writes its use to the store's daily usage (auth.lastUsedFlushMs). */
  usageFlushMs?: number;
  /** How long after a counter is made every replica counts its scope and has written its use from before. */
  settleMs?: number;
}

export type Period = 'day' | 'month';
/** What a request reserved: released once its real use is charged, or it ended without any. Idempotent. */
export interface QuotaReservation {
  release(): void;
}

export interface QuotaRefusal {
  scope: 'key' | 'account';
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
