/**
 * Limiter state in Redis (ioredis), shared by every replica: the bucket arithmetic of bucket.ts as Lua
 * scripts, so each admission is one atomic round trip and N replicas enforce one combined limit. Time
 * is Redis's own (TIME), so replicas' clocks do not matter. Commands fail fast while Redis is away (no
 * offline queue, a short command timeout); the limiter's policy decides what that means for requests.
 *
 * A Redis can be away with its socket still open (frozen, or a network path that drops packets): no
 * error comes, commands just get no answer. So the connection is pinged every PING_EVERY_MS, and Redis
 * counts as down once no ping has been answered for `staleMs` (1.5 s by default: detected within 2 s).
 * While down, every command fails at once without being sent, and each admission that is sent is cut
 * by a deadline of the gateway's own: no request waits longer than `timeoutMs` for Redis.
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

/**
 * What happens to the connection, each reported once per change: `connected` (the first answer after
 * start), `lost` (no answer: closed, refused, or no ping answered within the deadline; also at start
 * when Redis does not answer), `restored` (answers again after `lost`). Nothing once close() began.
 */
export interface RedisEvents {
  connection(state: 'connected' | 'lost' | 'restored', reason?: string): void;
}

/** How often the connection is pinged. */
export const PING_EVERY_MS = 500;
/** Redis counts as down when no ping was answered for this long (or `timeoutMs` plus a ping interval, when longer). */
export const STALE_AFTER_MS = 1_500;

/**
 * Whether Redis answers, from a periodic PING on the connection the commands use: up on an answer,
 * down when no ping was answered for `staleMs` or the connection closed while up. Reports each change
 * once; `close()` ends it without a report (a graceful stop is no outage).
 */
export class RedisHealth {
  private state: 'unknown' | 'up' | 'down' = 'unknown';
  private lastAnswer: number;
  private timer: NodeJS.Timeout | undefined;
  private closing = false;

  constructor(
    private readonly redis: Redis,
    private readonly staleMs: number,
    private readonly report: RedisEvents['connection'],
    private readonly now: () => number = () => performance.now(),
  ) {
    this.lastAnswer = now();
    redis.on('ready', () => this.ping());
    redis.on('close', () => {
      if (this.state === 'up') this.become('down', 'connection closed');
    });
  }

  get up(): boolean {
    return this.state === 'up' && this.redis.status === 'ready';
  }

  start(): void {
    this.ping();
    this.timer = setInterval(() => this.tick(), PING_EVERY_MS);
    this.timer.unref();
  }

  /** Resolves at the first answer, or once Redis counts as down (it reports which). */
  settled(): Promise<void> {
    if (this.state !== 'unknown') return Promise.resolve();
    return new Promise((resolve) => {
      const check = setInterval(() => {
        if (this.state !== 'unknown' || this.closing) {
          clearInterval(check);
          resolve();
        }
      }, 20);
      check.unref();
    });
  }

  close(): void {
    this.closing = true;
    clearInterval(this.timer);
  }

  private tick(): void {
    if (this.closing) return;
    this.ping();
    const silentFor = this.now() - this.lastAnswer;
    if (this.state !== 'down' && silentFor > this.staleMs) {
      this.become('down', this.redis.status === 'ready' ? `no answer to PING for ${Math.round(silentFor)} ms` : `connection ${this.redis.status}`);
    }
  }

  private ping(): void {
    // Not sent while the connection is not ready (no offline queue): it fails at once.
    if (this.closing || this.redis.status !== 'ready') return;
    this.redis.ping().then(
      () => {
        this.lastAnswer = this.now();
        this.become('up');
      },
      () => undefined, // no answer within the command timeout: the staleness check decides
    );
  }

  private become(state: 'up' | 'down', reason?: string): void {
    if (this.closing || state === this.state) return;
    const before = this.state;
    this.state = state;
    if (state === 'up') this.report(before === 'unknown' ? 'connected' : 'restored');
    else this.report('lost', reason);
  }
}

/** A command's answer, or a rejection once `ms` have passed since the call (timed here, not by the client). */
export function withDeadline<T>(work: Promise<T>, ms: number, what: string): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what}: no answer from redis within ${ms} ms`)), ms);
    work.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (err: unknown) => {
        clearTimeout(timer);
        reject(err as Error);
      },
    );
  });
}

export class RedisRateLimitStore implements RateLimitStore {
  readonly shared = true;
  private readonly redis: ScriptedRedis;
  private readonly health: RedisHealth;

  /** Connected, and answering its pings. */
  get reachable(): boolean {
    return this.health.up;
  }

  constructor(
    url: string,
    private readonly timeoutMs: number,
    events: RedisEvents,
  ) {
    const redis = new Redis(url, {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      commandTimeout: timeoutMs,
      connectTimeout: Math.max(timeoutMs, 1000),
      retryStrategy: (attempt) => Math.min(attempt * 100, 2000),
    });
    redis.defineCommand('chatgateAdmit', { numberOfKeys: 2, lua: ADMIT });
    redis.defineCommand('chatgateDebit', { numberOfKeys: 1, lua: DEBIT });
    redis.on('error', () => undefined); // surfaced by the failing commands and the health checks
    this.redis = redis as ScriptedRedis;
    this.health = new RedisHealth(redis, Math.max(STALE_AFTER_MS, timeoutMs + PING_EVERY_MS), (state, reason) => events.connection(state, reason));
    this.health.start();
  }

  /** Resolves once Redis answered, or once it counts as down: a Redis that is down at start is the policy's business. */
  connected(): Promise<void> {
    return this.health.settled();
  }

  async admit(keyId: string, limits: Limits, requestId: string): Promise<Admission> {
    // Without an offline queue nothing is sent while the connection is not ready, nor while Redis
    // does not answer its pings: the admission certainly did not happen. Once sent, a timeout leaves
    // it unknown (the limiter owes its release).
    this.mustBeUp();
    const rpm = limits.requestsPerMinute ?? 0;
    const tpm = limits.tokensPerMinute ?? 0;
    const [reason, retry, requestLevel, tokenLevel] = await withDeadline(
      this.redis.chatgateAdmit(bucketKey(keyId), slotsKey(keyId), rpm, tpm, limits.maxConcurrent ?? 0, requestId, STALE_SLOT_MS),
      this.timeoutMs,
      'rate limit admission',
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
    this.mustBeUp();
    await withDeadline(this.redis.zrem(slotsKey(keyId), requestId), this.timeoutMs, 'rate limit release');
  }

  async debitTokens(keyId: string, tokensPerMinute: number, amount: number): Promise<void> {
    // Nothing is sent while Redis is down; once sent, a timeout leaves it unknown whether Redis ran the script.
    this.mustBeUp();
    await withDeadline(this.redis.chatgateDebit(bucketKey(keyId), tokensPerMinute, amount), this.timeoutMs, 'rate limit token debit');
  }

  async close(): Promise<void> {
    this.health.close(); // first: a graceful stop reports no outage
    this.redis.disconnect();
  }

  private mustBeUp(): void {
    if (this.redis.status !== 'ready') throw new StoreNotReached(`redis is ${this.redis.status}`);
    if (!this.health.up) throw new StoreNotReached('redis does not answer its pings');
  }
}

// {hash tags} keep a key's two entries on one Redis Cluster slot.
const bucketKey = (keyId: string) => `chatgate:rl:{${keyId}}:buckets`;
const slotsKey = (keyId: string) => `chatgate:rl:{${keyId}}:slots`;
