/**
 * The budget stages: money a key, and its account, may spend per UTC day and month, in the price
 * table's currency (`prices`), enforced as token quotas are (enforce-quota.ts) by a QuotaTracker of
 * their own that counts nano-units of the currency (BUDGET). Admission (enforceQuota with it, before
 * the body is read) refuses a request whose key or account has spent, or has in flight, its budget.
 * Then:
 * - boundForBudget, before routing: a request under a budget that set no output bound gets
 *   `quota.defaultReserveTokens` as its bound, written into its worker's body, so that what it may
 *   cost is known before it is sent (and holds);
 * - reserveBudget, after routing: it reserves what it may cost at its model's price (for an alias,
 *   the dearest model it may go to): its prompt estimate at the input price, and its output bound
 *   times its answers at the output price. Refused 429 `insufficient_quota`, naming the budget and
 *   when it resets, when that does not fit beside what was spent and what is in flight; released
 *   when the answer's cost is charged (at the price of the model that served it).
 * A model without a price, under a budget, is refused 403 `model_not_priced`, unless
 * `prices.unpricedModels: allow` says it is free.
 */
import type { RequestHandler } from 'express';
import { estimatePromptTokens } from '../common/estimate';
import { contextOf, required, type RequestContext } from '../context';
import { errors } from '../errors';
import { reserveNow } from './enforce-quota';
import { endUserOf } from './end-users';
import { NANOS } from './prices';
import type { AccountLimits, Measure, QuotaTracker } from './quota';
import type { AccountRecord } from '../store/types';

/** What budgets count: nano-units of the currency; limits in units become nano-units here. */
export const BUDGET: Measure = {
  prefix: 'budget:',
  keyLimits: (key) => inNanos(key.budget),
  used: (row) => row.costNanos,
};

/** A budget in units as the tracker reads limits (in nano-units, in the shape of a quota). */
export function inNanos(budget: { readonly perDay: number | null; readonly perMonth: number | null }): { tokensPerDay: number | null; tokensPerMonth: number | null } {
  return { tokensPerDay: budget.perDay === null ? null : Math.round(budget.perDay * NANOS), tokensPerMonth: budget.perMonth === null ? null : Math.round(budget.perMonth * NANOS) };
}

/** An account's budgets as the budget tracker counts them (nano-units): its own for the day and month, and each end user's for the day. */
export function budgetLimitsOf(account: AccountRecord): AccountLimits {
  const perEndUser = account.endUserQuota?.budgetPerDay ?? null;
  return { ...inNanos(account.budget), endUserPerDay: perEndUser === null ? null : Math.round(perEndUser * NANOS) };
}

/** What a routed request may cost, in nano-units, for so many prompt and output tokens; undefined: its model has no price. */
export type CostBound = (context: RequestContext, promptTokens: number, outputTokens: number) => number | undefined;

export interface BudgetOptions {
  defaultReserveTokens: number;
  holdAfterCloseMs: number;
  /** `prices.unpricedModels: allow`: a model without a price is served under a budget too, at no cost. */
  unpricedAllowed: boolean;
}

export function boundForBudget(tracker: QuotaTracker, defaultReserveTokens: number): RequestHandler {
  return function budgetBound(_req, res, next) {
    const context = contextOf(res);
    if (context.reservedOutputBound === undefined && required(context.modelRequest, 'modelRequest').maxOutputTokens === undefined && tracker.limits(required(context.key, 'key'), endUserOf(context, required(context.key, 'key').accountId)) && defaultReserveTokens > 0) {
      context.reservedOutputBound = defaultReserveTokens;
    }
    next();
  };
}

export function reserveBudget(tracker: QuotaTracker, cost: CostBound, options: BudgetOptions, refused: (scope: 'key' | 'account' | 'endUser', period: 'day' | 'month') => void): RequestHandler {
  return function budget(_req, res, next) {
    const context = contextOf(res);
    const key = required(context.key, 'key');
    const endUser = endUserOf(context, key.accountId);
    if (!tracker.limits(key, endUser)) return next();
    const request = required(context.modelRequest, 'modelRequest');
    // The worker's bytes: routing handed the request's text over to them.
    const prompt = estimatePromptTokens(required(context.target, 'target').body);
    const perOutput = context.reservedOutputBound ?? request.maxOutputTokens ?? options.defaultReserveTokens;
    const nanos = cost(context, prompt, perOutput * request.outputs);
    if (nanos === undefined) {
      if (options.unpricedAllowed) return next();
      throw errors.modelNotPricedUnderBudget(request.model);
    }
    reserveNow(tracker, key, endUser, nanos, res, options.holdAfterCloseMs, (reservation) => {
      if (reservation === undefined) return next();
      if ('scope' in reservation) {
        refused(reservation.scope, reservation.period);
        return next(errors.insufficientQuota(reservation.scope, reservation.period, reservation.retryAfterSeconds, 'budget'));
      }
      context.budgetReservation = reservation;
      next();
    });
  };
}
