/**
 * The quota stages. Before the body is read (after the rate limit): a request whose key, or whose
 * account, has used (or has in flight) its tokens for the UTC day or month gets 429
 * insufficient_quota (OpenAI's type and code) with Retry-After until the period turns. After the
 * body is read: the request reserves what it may cost, its prompt estimate (common/estimate.ts)
 * plus the output it allows (`max_tokens`, `max_completion_tokens`, `max_output_tokens`; when it sets
 * none, `quota.defaultReserveTokens`), and is refused the same way when that does not fit. The
 * reservation is released when the answer's real use is charged; when the exchange closes with no
 * answer begun (refused later, a worker that failed, a client that left before a worker had its
 * request), at once; else `holdAfterCloseMs` after it closed: a client that left early (even before
 * the answer began) is charged after the gateway drained the worker's answer
 * (usage.drainAfterDisconnectMs), and its reservation holds until then. What it reserves is the bound
 * times `n` (and `best_of`, and a completions batch's prompts); a request that set no bound gets the
 * default written into its worker's body as `max_tokens` (`max_output_tokens` for responses). With
 * `quota.capMaxTokens`, a request whose bound does not fit is served with the bound lowered to what
 * is left (written into its worker's body the same way) while at least one token an answer is left.
 * Both read and change the tracker's counts in memory; with Redis, a reservation past this replica's
 * lease waits for one Lua call (quota-leases.ts), at most `rateLimit.timeoutMs`.
 */
import type { NextFunction, RequestHandler, Response } from 'express';
import { estimatePromptTokens } from '../common/estimate';
import { contextOf, required, type CallerKey } from '../context';
import { errors } from '../errors';
import type { QuotaRefusal, QuotaReservation, QuotaTracker } from './quota';
import { endUserOf } from './end-users';

/** `limit`: what the tracker counts, as the refusal names it (a budget's tracker: enforce-budget.ts). */
export function enforceQuota(tracker: QuotaTracker, refused: (scope: 'key' | 'account' | 'endUser', period: 'day' | 'month') => void, limit: 'tokens' | 'budget' = 'tokens'): RequestHandler {
  /** `primed`: the counters' shared totals were read (or could not be): it does not wait again. */
  const decide = (key: CallerKey, next: NextFunction, primed: boolean) => {
    const refusal = tracker.check(key);
    if (refusal === 'unread') {
      if (primed) return next();
      // The first request here to need these counters (a replica that just started, a key back after
      // a quiet spell): one read of their shared totals first, else a burst passes against 0.
      return waitFor(tracker.prime(key), key, next, true);
    }
    if (refusal) {
      refused(refusal.scope, refusal.period);
      throw errors.insufficientQuota(refusal.scope, refusal.period, refusal.retryAfterSeconds, limit);
    }
    next();
  };
  const waitFor = (reading: Promise<void>, key: CallerKey, next: NextFunction, primed: boolean) => {
    reading.then(() => {
      try {
        decide(key, next, primed);
      } catch (err) {
        next(err);
      }
    }, next);
  };
  return function quota(_req, res, next) {
    const key = required(contextOf(res).key, 'key');
    if (tracker.knowsAccount(key.accountId)) return decide(key, next, false);
    // The account's first request on this replica: its quota is read first (one read for the
    // requests that come meanwhile), else a burst would pass before the next sync knew of it. Should
    // the read fail, its use is held until a sync reads it (quota.ts).
    waitFor(tracker.learn(key.accountId), key, next, false);
  };
}

export interface ReserveOptions {
  /** Reserved for the output of a request that sets no bound on it. */
  defaultReserveTokens: number;
  /** A request whose bound does not fit is served with its bound lowered to what is left (at least 1 token an answer). */
  capMaxTokens: boolean;
  /** How long a reservation whose answer charged nothing is held after the exchange closed. */
  holdAfterCloseMs: number;
}

export function reserveQuota(tracker: QuotaTracker, options: ReserveOptions, refused: (scope: 'key' | 'account' | 'endUser', period: 'day' | 'month') => void): RequestHandler {
  return function reserve(_req, res, next) {
    const context = contextOf(res);
    const key = required(context.key, 'key');
    const endUser = endUserOf(context, key.accountId);
    if (!tracker.limits(key, endUser)) return next(); // no quota: nothing to reserve, and the body is not measured
    const request = required(context.modelRequest, 'modelRequest');
    const prompt = estimatePromptTokens(required(context.body, 'body'));
    let perOutput = request.maxOutputTokens ?? options.defaultReserveTokens;
    const admitted = (reservation: QuotaReservation) => {
      context.quotaReservation = reservation;
      // A request that set no bound gets the one reserved, written into its worker's body (route.ts):
      // else a worker generates to its context's end, far past what was reserved. So does one capped.
      if ((request.maxOutputTokens === undefined || perOutput < request.maxOutputTokens) && perOutput > 0) context.reservedOutputBound = perOutput;
      next();
    };
    const refuse = (refusal: QuotaRefusal) => {
      refused(refusal.scope, refusal.period);
      next(errors.insufficientQuota(refusal.scope, refusal.period, refusal.retryAfterSeconds));
    };
    reserveNow(tracker, key, endUser, prompt + perOutput * request.outputs, res, options.holdAfterCloseMs, (first) => {
      if (first === undefined) return next();
      if (!('scope' in first)) return admitted(first);
      if (!options.capMaxTokens || perOutput <= 0) return refuse(first);
      // What is left, shared by the answers it asks for, once the prompt is counted: the bound it gets.
      const capped = Math.floor((first.room - prompt) / request.outputs);
      if (capped < 1) return refuse(first);
      reserveNow(tracker, key, endUser, prompt + capped * request.outputs, res, options.holdAfterCloseMs, (second) => {
        if (second !== undefined && 'scope' in second) return refuse(first);
        perOutput = capped;
        if (second === undefined) next();
        else admitted(second);
      });
    });
  };
}

/**
 * Reserves on the tracker and hands the outcome to `done`: at once, or, for a reservation past this
 * replica's leases, once the shared counters have answered (a refusal then gives the room back). The
 * room goes back when the exchange closes with no answer begun (refused by a later stage, no worker,
 * a worker that failed, a client that left before a worker had the request: nothing is charged), else
 * `holdAfterCloseMs` after it closed: an answer under way, or a request a worker had when its client
 * left, is still drained and charged (upstream/proxy/relay.ts). A client gone before the shared counters answered
 * gets nothing (the room goes back, `done` is not called).
 */
export function reserveNow(tracker: QuotaTracker, key: CallerKey, named: string | undefined, amount: number, res: Response, holdAfterCloseMs: number, done: (outcome: QuotaReservation | (QuotaRefusal & { room: number }) | undefined) => void): void {
  const endUser = named !== undefined && tracker.limitsEndUsers(key.accountId) ? named : undefined;
  // An end user's counter is met here first (the stage before the body could not know it): its first
  // request on this replica waits for one read of its shared total, as a key's does (enforceQuota).
  // A client gone meanwhile gets nothing reserved.
  if (endUser !== undefined && tracker.check(key, endUser) === 'unread') {
    const go = () => void (res.writableEnded || res.destroyed || reserveRead(tracker, key, endUser, amount, res, holdAfterCloseMs, done));
    tracker.prime(key, endUser).then(go, go);
    return;
  }
  reserveRead(tracker, key, endUser, amount, res, holdAfterCloseMs, done);
}

function reserveRead(tracker: QuotaTracker, key: CallerKey, endUser: string | undefined, amount: number, res: Response, holdAfterCloseMs: number, done: (outcome: QuotaReservation | (QuotaRefusal & { room: number }) | undefined) => void): void {
  const reservation = tracker.reserve(key, amount, endUser);
  if (reservation === undefined || 'scope' in reservation) {
    done(reservation);
    return;
  }
  const context = contextOf(res);
  let closed = false;
  res.once('close', () => {
    closed = true;
    if (context.firstByteAt === undefined && (res.writableFinished || context.sentAt === undefined)) reservation.release();
    else setTimeout(() => reservation.release(), holdAfterCloseMs).unref();
  });
  if (!reservation.shared) {
    done(reservation);
    return;
  }
  void reservation.shared.then((refusal) => {
    if (refusal) reservation.release();
    if (closed) return reservation.release();
    done(refusal ?? reservation);
  });
}
