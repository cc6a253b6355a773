/** The authentication stage: Authorization header -> key record on the request context, or 401. */
import type { NextFunction, RequestHandler, Response } from 'express';
import { errors, GatewayError } from '../errors';
import { contextOf } from '../context';
import type { AuthFailureReason } from '../telemetry/metrics';
import { parseAuthorization } from './credentials';
import { looksLikeKey } from '../common/key-shape';
import type { KeyCache } from './cache';
import type { KeyAuthRecord } from '../store/types';

export interface AuthenticateDeps {
  cache: KeyCache;
  onFailure(reason: AuthFailureReason): void;
  onSuccess?(record: KeyAuthRecord): void;
  now?: () => number;
}

export function authenticate({ cache, onFailure, onSuccess, now = Date.now }: AuthenticateDeps): RequestHandler {
  const admit = (record: KeyAuthRecord | undefined, res: Response, next: NextFunction) => {
    const refusal = refusalOf(record, now());
    if (refusal) {
      onFailure(refusal);
      throw errors.invalidApiKey();
    }
    contextOf(res).key = record;
    onSuccess?.(record!);
    next();
  };
  // Not async: a cached key (nearly every request) is admitted without a promise or a later tick.
  return function authenticateRequest(req, res, next) {
    const credentials = parseAuthorization(req.headers.authorization);
    if (!credentials.ok) {
      onFailure(credentials.problem);
      throw credentials.problem === 'missing' ? errors.missingApiKey() : errors.invalidAuthorizationHeader(credentials.reason);
    }
    if (!looksLikeKey(credentials.key)) return admit(undefined, res, next);
    const hit = cache.cached(credentials.key);
    if (hit) return admit(hit.record, res, next);
    return lookup(cache, credentials.key).then((record) => admit(record, res, next));
  };
}

async function lookup(cache: KeyCache, key: string): Promise<KeyAuthRecord | undefined> {
  try {
    return await cache.lookup(key);
  } catch (cause) {
    if (cause instanceof GatewayError) throw cause; // the store's guard: 503 key_store_unavailable
    const unavailable = errors.keyStoreUnavailable();
    unavailable.cause = cause;
    throw unavailable;
  }
}

function refusalOf(record: KeyAuthRecord | undefined, now: number): AuthFailureReason | undefined {
  if (!record) return 'unknown';
  if (record.revokedAt) return 'revoked';
  if (record.expiresAt && Date.parse(record.expiresAt) <= now) return 'expired';
  return undefined;
}
