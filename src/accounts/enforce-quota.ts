/**
 * The quota stage: after the rate limit, before the body is read. A request whose key, or whose
 * account, has used its tokens for the UTC day or month gets 429 insufficient_quota (OpenAI's type
 * and code) with Retry-After until the period turns. The check reads the tracker's counts in memory.
 */
import type { RequestHandler } from 'express';
import { contextOf, required } from '../context';
import { errors } from '../errors';
import type { QuotaTracker } from './quota';

export function enforceQuota(tracker: QuotaTracker, refused: (scope: 'key' | 'account', period: 'day' | 'month') => void): RequestHandler {
  return function quota(_req, res, next) {
    const refusal = tracker.check(required(contextOf(res).key, 'key'));
    if (refusal) {
      refused(refusal.scope, refusal.period);
      throw errors.insufficientQuota(refusal.scope, refusal.period, refusal.retryAfterSeconds);
    }
    next();
  };
}
