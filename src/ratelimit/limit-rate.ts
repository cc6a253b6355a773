/**
 * The rate limit stage: the key's limits (its own, else the configured defaults) on requests per
 * minute, tokens per minute and concurrent requests. Every answer to a limited key carries the
 * OpenAI-style x-ratelimit-* headers; over a limit it is 429 with Retry-After.
 */
import { randomUUID } from 'node:crypto';
import type { NextFunction, RequestHandler, Response } from 'express';
import { contextOf, required, type CallerKey, type RequestContext } from '../context';
import { errors } from '../errors';
import type { Metrics } from '../telemetry/metrics';
import type { Limits, Quota } from './bucket';
import { hasLimits, type RateLimiter } from './limiter';

export function limitRate(limiter: RateLimiter, metrics: Metrics): RequestHandler {
  async function admit(context: RequestContext, key: CallerKey, limits: Limits, res: Response, next: NextFunction): Promise<void> {
    const slot = randomUUID();
    const answer = await limiter.admit(key.id, limits, slot);
    if ('unavailable' in answer) throw errors.rateLimiterUnavailable();
    if ('degraded' in answer) return next();
    setQuotaHeaders(res, answer.quota);
    if (!answer.allowed) {
      const reason = answer.reason ?? 'requests';
      metrics.rateLimited.series({ reason }).inc();
      throw errors.rateLimited(reason, answer.retryAfterMs);
    }
    if (limits.maxConcurrent) whenClosed(res, () => afterTheWorker(context, () => limiter.release(key.id, slot)));
    context.tokensPerMinute = limits.tokensPerMinute;
    next();
  }

  // Not async: a key without limits passes without a promise or a later tick.
  return function rateLimit(_req, res, next) {
    const context = contextOf(res);
    const key = required(context.key, 'key');
    const limits = limiter.limitsFor(key);
    if (!hasLimits(limits)) return next();
    return admit(context, key, limits, res, next);
  };
}

/** A client that left while admission was awaited has closed the response already: no 'close' will come. */
function whenClosed(res: Response, then: () => void): void {
  if (res.destroyed) then();
  else res.once('close', then);
}

/**
 * A client that left while a worker still generates for it (its answer read for its usage: proxy
 * stage) keeps its concurrency slot until the worker is done: else leaving and asking again would
 * keep any number of workers busy for one key. The proxy's own 'close' listener comes after this
 * stage's, so what it decided is read once the close has been told to every listener.
 */
function afterTheWorker(context: RequestContext, release: () => void): void {
  queueMicrotask(() => (context.drainEnded ? context.drainEnded.push(release) : release()));
}

function setQuotaHeaders(res: Response, quota: Quota): void {
  for (const [kind, line] of Object.entries(quota)) {
    res.setHeader(`x-ratelimit-limit-${kind}`, String(line.limit));
    res.setHeader(`x-ratelimit-remaining-${kind}`, String(line.remaining));
    res.setHeader(`x-ratelimit-reset-${kind}`, formatDuration(line.resetMs));
  }
}

/** OpenAI's style: 59ms, 6s, 1m30s. */
export function formatDuration(ms: number): string {
  const whole = Math.ceil(ms);
  if (whole < 1000) return `${whole}ms`;
  const seconds = Math.ceil(whole / 1000);
  return seconds < 60 ? `${seconds}s` : `${Math.floor(seconds / 60)}m${seconds % 60}s`;
}
