/**
 * The limiter as the gateway uses it: effective limits for a key (its own, else the configured
 * defaults), and the policy when the store fails: fail open (admit, and say so) or closed (refuse
 * with 503). It never throws a store error at the request path.
 */
import type { Config } from '../config';
import type { KeyRecord } from '../auth/store/types';
import type { Limits } from './bucket';
import type { Admission, RateLimitStore } from './store';

export interface LimiterEvents {
  storeFailed(err: unknown): void;
  /** The store answers again after failing. */
  storeRecovered(): void;
}

export type LimiterAnswer = Admission | { allowed: true; degraded: true } | { allowed: false; unavailable: true };

export class RateLimiter {
  private failing = false;

  constructor(
    private readonly store: RateLimitStore,
    private readonly settings: Config['rateLimit'],
    private readonly events: LimiterEvents,
  ) {}

  limitsFor(key: KeyRecord): Limits {
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
      return this.settings.failOpen ? { allowed: true, degraded: true } : { allowed: false, unavailable: true };
    }
  }

  release(keyId: string, requestId: string): void {
    this.store.release(keyId, requestId).then(
      () => this.succeeded(),
      (err) => this.failed(err),
    );
  }

  debitTokens(keyId: string, tokensPerMinute: number, amount: number): void {
    this.store.debitTokens(keyId, tokensPerMinute, amount).then(
      () => this.succeeded(),
      (err) => this.failed(err),
    );
  }

  close(): Promise<void> {
    return this.store.close();
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
