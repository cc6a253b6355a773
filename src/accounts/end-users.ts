/**
 * End users as usage keeps them: a digest of the account and the id the client gave its user
 * (`X-Chatgate-End-User`, `safety_identifier`, `user`), never the id. The account is in it, so that
 * one person's id makes unrelated digests in two accounts; an operator who knows an id finds its
 * usage by asking with the id (the API and the console make its digest the same way).
 */
import { createHash } from 'node:crypto';
import { MAX_BUDGET, MAX_QUOTA } from '../auth/key-fields';
import { withoutKeys } from '../common/key-shape';
import type { RequestContext } from '../context';
import { errors } from '../errors';
import type { EndUserQuota } from '../store/types';

/** `eu_` and 22 base64url characters (132 bits of SHA-256). */
export function endUserDigest(accountId: string, endUser: string): string {
  return `eu_${createHash('sha256').update(accountId).update('\0').update(endUser).digest('base64url').slice(0, 22)}`;
}

/** An end user's digest as the ledger and the API show it. */
export const END_USER_DIGEST = /^eu_[A-Za-z0-9_-]{22}$/;

/** The digest of the end user a request names, made once a request; undefined when it names none. */
export function endUserOf(context: RequestContext, accountId: string): string | undefined {
  // A client token's end user is the one its minting application vouched for (or none): browser code
  // naming its own would dodge or spend another's end-user quota.
  const token = context.key?.clientToken;
  const named = token ? token.endUser : context.modelRequest?.endUser;
  if (named !== undefined && context.endUserDigest === undefined) context.endUserDigest = endUserDigest(accountId, named);
  return context.endUserDigest;
}

/** What the ledger counts a request's use under: the model that answered ('' before one was chosen) and the end user's digest ('' for none). */
export function useDetail(context: RequestContext, accountId: string, model: string | undefined): { model: string; endUser: string } {
  const answered = model ?? (context.target ? `${context.target.provider}/${context.target.modelName}` : '');
  // A key pasted into a model name is not kept with the usage (as it is not logged).
  return { model: withoutKeys(answered), endUser: endUserOf(context, accountId) ?? '' };
}

/**
 * `endUserQuota` as the admin API takes it: `{tokensPerDay, budgetPerDay}` (either left out: as it
 * was; null: no limit of that kind), or null for none; undefined when absent.
 */
export function endUserQuotaField(value: unknown): Partial<EndUserQuota> | null | undefined {
  if (value === undefined || value === null) return value;
  const shape = `'endUserQuota' must be {"tokensPerDay": tokens up to ${MAX_QUOTA}, "budgetPerDay": an amount up to ${MAX_BUDGET}} (either may be null), or null for none.`;
  if (typeof value !== 'object' || Array.isArray(value)) throw errors.invalidBody('endUserQuota', shape);
  const result: Partial<EndUserQuota> = {};
  for (const [name, limit] of Object.entries(value)) {
    if (name === 'tokensPerDay' && (limit === null || (typeof limit === 'number' && Number.isInteger(limit) && limit >= 0 && limit <= MAX_QUOTA))) result.tokensPerDay = limit;
    else if (name === 'budgetPerDay' && (limit === null || (typeof limit === 'number' && Number.isFinite(limit) && limit >= 0 && limit <= MAX_BUDGET))) result.budgetPerDay = limit;
    else throw errors.invalidBody(`endUserQuota.${name.replace(/[^A-Za-z0-9_]/g, '?').slice(0, 100)}`, shape);
  }
  return result;
}

/** The account's end user quota after a change: the fields given over the current ones; none left set: null. */
export function mergedEndUserQuota(current: EndUserQuota | undefined, change: Partial<EndUserQuota> | null): EndUserQuota | null {
  if (change === null) return null;
  const merged = { tokensPerDay: null, budgetPerDay: null, ...current, ...change };
  return merged.tokensPerDay === null && merged.budgetPerDay === null ? null : merged;
}
