/**
 * End users as usage keeps them: a digest of the account and the id the client gave its user
 * (`X-Chatgate-End-User`, `safety_identifier`, `user`), never the id. The account is in it, so that
 * one person's id makes unrelated digests in two accounts; an operator who knows an id finds its
 * usage by asking with the id (the API and the console make its digest the same way).
 */
import { createHash } from 'node:crypto';
import type { RequestContext } from '../context';

/** `eu_` and 22 base64url characters (132 bits of SHA-256). */
export function endUserDigest(accountId: string, endUser: string): string {
  return `eu_${createHash('sha256').update(accountId).update('\0').update(endUser).digest('base64url').slice(0, 22)}`;
}

/** An end user's digest as the ledger and the API show it. */
export const END_USER_DIGEST = /^eu_[A-Za-z0-9_-]{22}$/;

/** What the ledger counts a request's use under: the model that answered ('' before one was chosen) and the end user's digest ('' for none). */
export function useDetail(context: RequestContext, accountId: string, model: string | undefined): { model: string; endUser: string } {
  const named = context.modelRequest?.endUser;
  if (named !== undefined && context.endUserDigest === undefined) context.endUserDigest = endUserDigest(accountId, named);
  return { model: model ?? (context.target ? `${context.target.provider}/${context.target.modelName}` : ''), endUser: context.endUserDigest ?? '' };
}
