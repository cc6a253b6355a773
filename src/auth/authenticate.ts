/** The authentication stage: Authorization header -> key record on the request context, or 401. */
import type { RequestHandler } from 'express';
import { errors } from '../errors';
import { contextOf } from '../context';
import type { AuthFailureReason } from '../metrics';
import { parseAuthorization } from './credentials';
import { looksLikeKey } from './keys';
import type { KeyCache } from './cache';
import type { KeyRecord } from './store/types';

export interface AuthenticateDeps {
  cache: KeyCache;
  onFailure(reason: AuthFailureReason): void;
  onSuccess?(record: KeyRecord): void;
  now?: () => number;
}

export function authenticate({ cache, onFailure, onSuccess, now = Date.now }: AuthenticateDeps): RequestHandler {
  return async function authenticateRequest(req, res, next) {
    const credentials = parseAuthorization(req.headers.authorization);
    if (!credentials.ok) {
      onFailure(credentials.problem);
      throw credentials.problem === 'missing' ? errors.missingApiKey() : errors.invalidAuthorizationHeader(credentials.reason);
    }
    const record = looksLikeKey(credentials.key) ? await lookup(cache, credentials.key) : undefined;
    const refusal = refusalOf(record, now());
    if (refusal) {
      onFailure(refusal);
      throw errors.invalidApiKey();
    }
    contextOf(res).key = record;
    onSuccess?.(record!);
    next();
  };
}

async function lookup(cache: KeyCache, key: string): Promise<KeyRecord | undefined> {
  try {
    return await cache.lookup(key);
  } catch (cause) {
    const unavailable = errors.keyStoreUnavailable();
    unavailable.cause = cause;
    throw unavailable;
  }
}

function refusalOf(record: KeyRecord | undefined, now: number): AuthFailureReason | undefined {
  if (!record) return 'unknown';
  if (record.revokedAt) return 'revoked';
  if (record.expiresAt && Date.parse(record.expiresAt) <= now) return 'expired';
  return undefined;
}
