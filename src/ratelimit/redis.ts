/**
 * Limiter state in Redis (ioredis), shared by every replica: the bucket arithmetic of bucket.ts as Lua
 * scripts, so each admission is one atomic round trip and N replicas enforce one combined limit. Time
 * is Redis's own (TIME), so replicas' clocks do not matter. Commands fail fast while Redis is away (no
 * offline queue, a short command timeout); the limiter's policy decides what that means for requests.
 */
import Redis from 'ioredis';
import { WINDOW_MS, type Limits, type LimitReason, type QuotaLine } from './bucket';
import { StoreNotReached, type Admission, type RateLimitStore } from './store';

/** A request holding a concurrency slot longer than this (a replica died mid-request) no longer counts. */
const STALE_SLOT_MS = 15 * 60_000;

const PRELUDE = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function refill(level, at, limit)
  if not level then return limit, now end
  local elapsed = math.max(0, now - at)
  return math.min(limit, level + elapsed * limit / ${WINDOW_MS}), math.max(now, at)
end
`;

const ADMIT = `${PRELUDE}
local rpm, tpm, maxc, stale = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[5])
local h = redis.call('HMGET', KEYS[1], 'rl', 'ra', 'tl', 'ta')
local rl, ra, tl, ta
if rpm > 0 then rl, ra = refill(tonumber(h[1]), tonumber(h[2]), rpm) end
if tpm > 0 then tl, ta = refill(tonumber(h[3]), tonumber(h[4]), tpm) end
local reason, retry = '', 0
if maxc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - stale)
  if redis.call('ZCARD', KEYS[2]) >= maxc then reason, retry = 'concurrency', 1000 end
end
if reason == '' and rpm > 0 and rl < 1 then reason, retry = 'requests', math.ceil((1 - rl) * ${WINDOW_MS} / rpm) end
if reason == '' and tpm > 0 and tl <= 0 then reason, retry = 'tokens', math.ceil((1 - tl) * ${WINDOW_MS} / tpm) end
if reason == '' then
  if rpm > 0 then rl = rl - 1 end
  if maxc > 0 then
    redis.call('ZADD', KEYS[2], now, ARGV[4])
    redis.call('PEXPIRE', KEYS[2], stale)
  end
end
if rpm > 0 then redis.call('HSET', KEYS[1], 'rl', tostring(rl), 'ra', ra) end
if tpm > 0 then redis.call('HSET', KEYS[1], 'tl', tostring(tl), 'ta', ta) end
redis.call('PEXPIRE', KEYS[1], ${2 * WINDOW_MS})
return { reason, tostring(retry), tostring(rl or ''), tostring(tl or '') }
`;

const DEBIT = `${PRELUDE}
local tpm, amount = tonumber(ARGV[1]), tonumber(ARGV[2])
local h = redis.call('HMGET', KEYS[1], 'tl', 'ta')
local tl, ta = refill(tonumber(h[1]), tonumber(h[2]), tpm)
redis.call('HSET', KEYS[1], 'tl', tostring(tl - amount), 'ta', ta)
redis.call('PEXPIRE', KEYS[1], ${2 * WINDOW_MS})
return 1
`;

type ScriptedRedis = Redis & {
  chatgateAdmit(bucketKey: string, slotsKey: string, ...args: Array<string | number>): Promise<[string, string, string, string]>;
  chatgateDebit(bucketKey: string, ...args: Array<string | number>): Promise<number>;
};

export interface RedisEvents {
  connection(state: 'lost' | 'restored'): void;
}

export class RedisRateLimitStore implements RateLimitStore {
  readonly shared = true;
  private readonly redis: ScriptedRedis;

  get reachable(): boolean {
    return this.redis.status === 'ready';
  }

  constructor(url: string, timeoutMs: number, events: RedisEvents) {
    const redis = new Redis(url, {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      commandTimeout: timeoutMs,
      connectTimeout: Math.max(timeoutMs, 1000),
      retryStrategy: (attempt) => Math.min(attempt * 100, 2000),
    });
    redis.defineCommand('chatgateAdmit', { numberOfKeys: 2, lua: ADMIT });
    redis.defineCommand('chatgateDebit', { numberOfKeys: 1, lua: DEBIT });
    let up = false;
    redis.on('ready', () => {
      if (!up) events.connection('restored');
      up = true;
    });
    redis.on('error', () => undefined); // surfaced by the failing commands
    redis.on('close', () => {
      if (up) events.connection('lost');
      up = false;
    });
    this.redis = redis as ScriptedRedis;
  }

  /** Resolves once connected, or after the connect timeout: a Redis that is down at start is the policy's business. */
  connected(): Promise<void> {
    if (this.redis.status === 'ready') return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.redis.off('ready', done);
        resolve();
      };
      const timer = setTimeout(done, 2000);
      this.redis.once('ready', done);
    });
  }

  async admit(keyId: string, limits: Limits, requestId: string): Promise<Admission> {
    // Without an offline queue nothing is sent while the connection is not ready: the admission
    // certainly did not happen. Once sent, a timeout leaves it unknown (the limiter owes its release).
    if (this.redis.status !== 'ready') throw new StoreNotReached(`redis is ${this.redis.status}`);
    const rpm = limits.requestsPerMinute ?? 0;
    const tpm = limits.tokensPerMinute ?? 0;
    const [reason, retry, requestLevel, tokenLevel] = await this.redis.chatgateAdmit(
      bucketKey(keyId),
      slotsKey(keyId),
      rpm,
      tpm,
      limits.maxConcurrent ?? 0,
      requestId,
      STALE_SLOT_MS,
    );
    const line = (level: string, limit: number): QuotaLine => {
      const value = Number(level);
      return { limit, remaining: Math.max(0, Math.floor(value)), resetMs: value >= limit ? 0 : Math.ceil(((limit - value) * WINDOW_MS) / limit) };
    };
    return {
      allowed: reason === '',
      ...(reason ? { reason: reason as LimitReason } : {}),
      retryAfterMs: Number(retry),
      quota: { ...(rpm ? { requests: line(requestLevel, rpm) } : {}), ...(tpm ? { tokens: line(tokenLevel, tpm) } : {}) },
    };
  }

  async release(keyId: string, requestId: string): Promise<void> {
    await this.redis.zrem(slotsKey(keyId), requestId);
  }

  async debitTokens(keyId: string, tokensPerMinute: number, amount: number): Promise<void> {
    // Without an offline queue nothing is sent while the connection is not ready; once sent, a
    // timeout leaves it unknown whether Redis ran the script.
    if (this.redis.status !== 'ready') throw new StoreNotReached(`redis is ${this.redis.status}`);
    await this.redis.chatgateDebit(bucketKey(keyId), tokensPerMinute, amount);
  }

  async close(): Promise<void> {
    this.redis.disconnect();
  }
}

// {hash tags} keep a key's two entries on one Redis Cluster slot.
const bucketKey = (keyId: string) => `chatgate:rl:{${keyId}}:buckets`;
const slotsKey = (keyId: string) => `chatgate:rl:{${keyId}}:slots`;
