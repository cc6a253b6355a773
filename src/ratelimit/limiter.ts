/**
 * The limiter as the gateway uses it: effective limits for a key (its own, else the configured
 * defaults), and the policy when the store fails: fail open (admit, and say so) or closed (refuse
 * with 503). It never throws a store error at the request path. A release the store could not take is
 * owed, not dropped: it is tried again every second until the store takes it (a concurrency slot left
 * held would otherwise lock a key out until the slot goes stale). A token debit is owed only when the
 * store was certainly not reached (a debit that timed out may have been applied, and is not repeated),
 * at most a minute's worth per key and for at most a minute (the bucket refills in that time anyway).
 */
import type { Config } from '../config';
import type { CallerKey } from '../context';
import { WINDOW_MS, type Limits } from './bucket';
import { StoreNotReached, type Admission, type RateLimitStore } from './store';

export interface LimiterEvents {
  storeFailed(err: unknown): void;
  /** The store answers again after failing. */
  storeRecovered(): void;
}

export type LimiterAnswer = Admission | { allowed: true; degraded: true } | { allowed: false; unavailable: true };

export const OWED_RETRY_MS = 1000;
/** Past this many owed releases (or keys owing tokens) more are dropped; a dropped slot goes stale in the store. */
const MAX_OWED = 10_000;

export class RateLimiter {
  private failing = false;
  /** Concurrency slots to release, by slot id. */
  private readonly owedReleases = new Map<string, string>();
  /** Tokens to debit, by key id (amounts owed for one key add up, to one minute's worth). */
  private readonly owedDebits = new Map<string, { tokensPerMinute: number; amount: number; since: number }>();
  private owedRetry: NodeJS.Timeout | undefined;

  constructor(
    private readonly store: RateLimitStore,
    private readonly settings: Config['rateLimit'],
    private readonly events: LimiterEvents,
    private readonly now: () => number = Date.now,
  ) {}

  limitsFor(key: CallerKey): Limits {
    const own = key.rateLimit ?? {};
    const pick = (value: number | null | undefined, fallback: number | undefined) => (value === null || value === undefined ? fallback : value === 0 ? undefined : value);
    return {
      requestsPerMinute: pick(own.requestsPerMinute, this.settings.requestsPerMinute),
      tokensPerMinute: pick(own.tokensPerMinute, this.settings.tokensPerMinute),
      maxConcurrent: pick(own.maxConcurrent, this.settings.maxConcurrent),
    };
  }

  async admit(keyId: string, limits: Limits, requestId: string): Promise<LimiterAnswer> {
    try {
      const admission = await this.store.admit(keyId, limits, requestId);
      this.succeeded();
      return admission;
    } catch (err) {
      this.failed(err);
      // An admission that timed out may still run when the store wakes up (a frozen Redis runs the
      // commands it had read): the concurrency slot it would take is released as soon as the store
      // takes commands again, or it would lock the key out until the slot went stale.
      if (limits.maxConcurrent && !(err instanceof StoreNotReached)) this.oweRelease(keyId, requestId);
      return this.settings.failOpen ? { allowed: true, degraded: true } : { allowed: false, unavailable: true };
    }
  }

  release(keyId: string, requestId: string): void {
    this.store.release(keyId, requestId).then(
      () => this.succeeded(),
      (err) => {
        this.failed(err);
        this.oweRelease(keyId, requestId);
      },
    );
  }

  debitTokens(keyId: string, tokensPerMinute: number, amount: number): void {
    this.store.debitTokens(keyId, tokensPerMinute, amount).then(
      () => this.succeeded(),
      (err) => {
        this.failed(err);
        if (!(err instanceof StoreNotReached)) return;
        this.oweTokens(keyId, tokensPerMinute, amount, this.now());
        this.retryOwedLater();
      },
    );
  }

  /**
   * Pays what is owed now, if the store takes it (a serving unit being retired: at shutdown, the last
   * chance). The store is not the limiter's to close: it outlives a config reload.
   */
  settleOwed(): Promise<void> {
    return this.payOwed();
  }

  /** How many releases and token debits the store has not taken yet. */
  owed(): number {
    return this.owedReleases.size + this.owedDebits.size;
  }

  private oweRelease(keyId: string, requestId: string): void {
    if (this.owedReleases.size < MAX_OWED) this.owedReleases.set(requestId, keyId);
    this.retryOwedLater();
  }

  private oweTokens(keyId: string, tokensPerMinute: number, amount: number, since: number): void {
    const owed = this.owedDebits.get(keyId);
    if (owed) owed.amount = Math.min(owed.amount + amount, tokensPerMinute);
    else if (this.owedDebits.size < MAX_OWED) this.owedDebits.set(keyId, { tokensPerMinute, amount: Math.min(amount, tokensPerMinute), since });
  }

  private retryOwedLater(): void {
    this.owedRetry ??= setTimeout(() => {
      this.owedRetry = undefined;
      void this.payOwed().then(() => {
        if (this.owed() > 0) this.retryOwedLater();
      });
    }, OWED_RETRY_MS).unref();
  }

  /**
   * One at a time, stopping at the first the store refuses: while it is away, one failed call a round,
   * not reported again (the failure that made the debt was).
   */
  private async payOwed(): Promise<void> {
    for (const [keyId, { since }] of this.owedDebits) if (this.now() - since > WINDOW_MS) this.owedDebits.delete(keyId);
    if (this.owed() === 0) return;
    try {
      for (const [requestId, keyId] of this.owedReleases) {
        await this.store.release(keyId, requestId);
        this.owedReleases.delete(requestId);
      }
      for (const [keyId, { tokensPerMinute, amount, since }] of this.owedDebits) {
        this.owedDebits.delete(keyId); // tokens owed while this call runs start a new entry
        await this.store.debitTokens(keyId, tokensPerMinute, amount).catch((err: unknown) => {
          if (err instanceof StoreNotReached) this.oweTokens(keyId, tokensPerMinute, amount, since);
          throw err;
        });
      }
      this.succeeded();
    } catch {
      // still away: the next round tries again
    }
  }

  private failed(err: unknown): void {
    if (!this.failing) this.failing = true;
    this.events.storeFailed(err);
  }

  private succeeded(): void {
    if (!this.failing) return;
    this.failing = false;
    this.events.storeRecovered();
  }
}

export function hasLimits(limits: Limits): boolean {
  return Boolean(limits.requestsPerMinute || limits.tokensPerMinute || limits.maxConcurrent);
}
