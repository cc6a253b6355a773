/**
 * Pure: the limiter's arithmetic. Each limit is a token bucket holding up to `limit` units and
 * refilling at `limit` per minute, so a key may burst to its limit and then goes at its rate.
 * Requests take one unit each on admission. Tokens are known only after the answer: a request is
 * admitted while the token bucket is above zero, and the tokens it used are debited afterwards (the
 * level may go below zero; the next requests then wait until it refills). The Redis store runs the
 * same arithmetic in Lua (redis.ts); both pass one test suite.
 */
export const WINDOW_MS = 60_000;

export interface Bucket {
  level: number;
  at: number;
}

export interface Limits {
  requestsPerMinute?: number;
  tokensPerMinute?: number;
  maxConcurrent?: number;
}

export interface QuotaLine {
  limit: number;
  remaining: number;
  /** Until the bucket is full again. */
  resetMs: number;
}

export interface Quota {
  requests?: QuotaLine;
  tokens?: QuotaLine;
}

export type LimitReason = 'requests' | 'tokens' | 'concurrency';

export interface BucketDecision {
  allowed: boolean;
  reason?: LimitReason;
  retryAfterMs: number;
  quota: Quota;
  requests?: Bucket;
  tokens?: Bucket;
}

export function refilled(bucket: Bucket | undefined, limit: number, now: number): Bucket {
  if (!bucket) return { level: limit, at: now };
  const elapsed = Math.max(0, now - bucket.at);
  return { level: Math.min(limit, bucket.level + (elapsed * limit) / WINDOW_MS), at: Math.max(now, bucket.at) };
}

/** Milliseconds until the bucket holds `level` units. */
export function msUntil(bucket: Bucket, limit: number, level: number): number {
  return bucket.level >= level ? 0 : Math.ceil(((level - bucket.level) * WINDOW_MS) / limit);
}

export function admit(state: { requests?: Bucket; tokens?: Bucket }, limits: Limits, now: number): BucketDecision {
  const rpm = limits.requestsPerMinute;
  const tpm = limits.tokensPerMinute;
  const requests = rpm ? refilled(state.requests, rpm, now) : undefined;
  const tokens = tpm ? refilled(state.tokens, tpm, now) : undefined;

  let reason: LimitReason | undefined;
  let retryAfterMs = 0;
  if (requests && rpm && requests.level < 1) {
    reason = 'requests';
    retryAfterMs = msUntil(requests, rpm, 1);
  } else if (tokens && tpm && tokens.level <= 0) {
    reason = 'tokens';
    retryAfterMs = msUntil(tokens, tpm, 1);
  }
  if (!reason && requests) requests.level -= 1;
  return { allowed: !reason, reason, retryAfterMs, quota: quotaOf(requests, rpm, tokens, tpm), requests, tokens };
}

export function debit(bucket: Bucket | undefined, limit: number, now: number, amount: number): Bucket {
  const current = refilled(bucket, limit, now);
  return { level: current.level - amount, at: current.at };
}

function quotaOf(requests: Bucket | undefined, rpm: number | undefined, tokens: Bucket | undefined, tpm: number | undefined): Quota {
  const line = (bucket: Bucket, limit: number): QuotaLine => ({
    limit,
    remaining: Math.max(0, Math.floor(bucket.level)),
    resetMs: msUntil(bucket, limit, limit),
  });
  return {
    ...(requests && rpm ? { requests: line(requests, rpm) } : {}),
    ...(tokens && tpm ? { tokens: line(tokens, tpm) } : {}),
  };
}
