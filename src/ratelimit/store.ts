/** Where limiter state lives: this process (memory.ts) or Redis, shared by replicas (redis.ts). */
import type { LimitReason, Limits, Quota } from './bucket';

export interface Admission {
  allowed: boolean;
  reason?: LimitReason;
  retryAfterMs: number;
  quota: Quota;
}

/** The store was not reached: the operation certainly did not happen, so it may be tried again. */
export class StoreNotReached extends Error {}

export interface RateLimitStore {
  /** Shared by every replica (Redis), rather than this process's own (memory). */
  readonly shared: boolean;
  /** Whether the store takes commands now (always, for memory; for Redis: connected and answering its pings). */
  readonly reachable: boolean;
  /** Atomically: refill, check and take for the key's request and token buckets, and a concurrency slot. */
  admit(keyId: string, limits: Limits, requestId: string): Promise<Admission>;
  /** The request is over: give back its concurrency slot. */
  release(keyId: string, requestId: string): Promise<void>;
  /** Charge the tokens an answer used. Rejects with StoreNotReached when the charge was certainly not made. */
  debitTokens(keyId: string, tokensPerMinute: number, amount: number): Promise<void>;
  close(): Promise<void>;
}
