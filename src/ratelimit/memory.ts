/** Limiter state in this process: one replica, or a test. Idle keys fall out after their buckets refill. */
import { LRUCache } from 'lru-cache';
import { admit, debit, WINDOW_MS, type Bucket, type Limits } from './bucket';
import type { Admission, RateLimitStore } from './store';

interface KeyState {
  requests?: Bucket;
  tokens?: Bucket;
  inFlight: Set<string>;
}

export class MemoryRateLimitStore implements RateLimitStore {
  readonly shared = false;
  readonly reachable = true;
  private readonly keys = new LRUCache<string, KeyState>({ max: 100_000, ttl: 2 * WINDOW_MS, updateAgeOnGet: true });

  constructor(private readonly now: () => number = Date.now) {}

  async admit(keyId: string, limits: Limits, requestId: string): Promise<Admission> {
    const state = this.stateOf(keyId);
    if (limits.maxConcurrent && state.inFlight.size >= limits.maxConcurrent) {
      const peek = admit({ ...state }, { ...limits, requestsPerMinute: undefined }, this.now());
      return { allowed: false, reason: 'concurrency', retryAfterMs: 1000, quota: peek.quota };
    }
    const decision = admit(state, limits, this.now());
    state.requests = decision.requests;
    state.tokens = decision.tokens;
    if (decision.allowed && limits.maxConcurrent) state.inFlight.add(requestId);
    return { allowed: decision.allowed, reason: decision.reason, retryAfterMs: decision.retryAfterMs, quota: decision.quota };
  }

  async release(keyId: string, requestId: string): Promise<void> {
    this.keys.get(keyId)?.inFlight.delete(requestId);
  }

  async debitTokens(keyId: string, tokensPerMinute: number, amount: number): Promise<void> {
    const state = this.stateOf(keyId);
    state.tokens = debit(state.tokens, tokensPerMinute, this.now(), amount);
  }

  async close(): Promise<void> {
    this.keys.clear();
  }

  private stateOf(keyId: string): KeyState {
    let state = this.keys.get(keyId);
    if (!state) {
      state = { inFlight: new Set() };
      this.keys.set(keyId, state);
    }
    return state;
  }
}
