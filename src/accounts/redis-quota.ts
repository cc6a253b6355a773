/**
 * Quota counters in Redis, shared by every replica: INCRBY per scope (one pipeline per sync) and one
 * MGET for the totals. A counter lives a little past its period. Commands fail fast while Redis is
 * away; the tracker keeps what it could not add and counts it locally meanwhile.
 */
import Redis from 'ioredis';
import type { QuotaCounters } from './quota';

const DAY_SECONDS = 86_400;
const key = (scope: string) => `chatgate:quota:${scope}`;

export class RedisQuotaCounters implements QuotaCounters {
  private readonly redis: Redis;

  constructor(url: string, timeoutMs: number) {
    this.redis = new Redis(url, { enableOfflineQueue: false, maxRetriesPerRequest: 0, commandTimeout: timeoutMs, connectTimeout: Math.max(timeoutMs, 1000), retryStrategy: (attempt) => Math.min(attempt * 100, 2000) });
    this.redis.on('error', () => undefined); // surfaced by the failing commands
  }

  async add(amounts: ReadonlyMap<string, number>): Promise<void> {
    if (amounts.size === 0) return;
    const pipeline = this.redis.pipeline();
    for (const [scope, tokens] of amounts) {
      pipeline.incrby(key(scope), tokens);
      pipeline.expire(key(scope), scope.includes(':d:') ? 2 * DAY_SECONDS : 40 * DAY_SECONDS);
    }
    const results = await pipeline.exec();
    const failed = results?.find(([err]) => err);
    if (failed) throw failed[0];
  }

  async totals(scopes: readonly string[]): Promise<Map<string, number>> {
    if (scopes.length === 0) return new Map();
    const values = await this.redis.mget(...scopes.map(key));
    return new Map(scopes.map((scope, i) => [scope, Number(values[i] ?? 0)]));
  }

  async close(): Promise<void> {
    this.redis.disconnect();
  }
}
