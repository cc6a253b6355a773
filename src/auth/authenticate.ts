/** The authentication stage: Authorization header -> key record on the request context, or 401. */
import { BlockList, isIPv4 } from 'node:net';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
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
  const admit = (record: KeyAuthRecord | undefined, req: Request, res: Response, next: NextFunction) => {
    const refusal = refusalOf(record, now());
    if (refusal) {
      onFailure(refusal);
      throw errors.invalidApiKey();
    }
    if (record!.allowedIps.length > 0 && !fromAllowedAddress(record!, req.ip)) {
      onFailure('ip_not_allowed');
      throw errors.ipNotAllowed();
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
    if (!looksLikeKey(credentials.key)) return admit(undefined, req, res, next);
    const hit = cache.cached(credentials.key);
    if (hit) return admit(hit.record, req, res, next);
    return lookup(cache, credentials.key).then((record) => admit(record, req, res, next));
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
  // A secret a rotation replaced: it works until its grace ends, on every replica alike (the time is
  // in the record, so no cache keeps it a moment longer).
  if (record.previousKey && !(record.previousKeyExpiresAt && Date.parse(record.previousKeyExpiresAt) > now)) return 'rotated';
  return undefined;
}

/** Each key's allowed ranges, made once per record (the cache keeps records). */
const allowLists = new WeakMap<KeyAuthRecord, BlockList>();

/**
 * Whether the client address (Express's `req.ip`: the connection's, or through `trustedProxies` the
 * one they forward) is in one of the key's ranges. An IPv4 client seen on a dual-stack socket
 * (`::ffff:10.1.2.3`) is matched as IPv4. No address: not allowed.
 */
function fromAllowedAddress(record: KeyAuthRecord, ip: string | undefined): boolean {
  if (!ip) return false;
  let list = allowLists.get(record);
  if (!list) {
    list = new BlockList();
    for (const cidr of record.allowedIps) {
      const [address = '', prefix = ''] = cidr.split('/');
      list.addSubnet(address, Number(prefix), isIPv4(address) ? 'ipv4' : 'ipv6');
    }
    allowLists.set(record, list);
  }
  const mapped = ip.startsWith('::ffff:') ? ip.slice(7) : '';
  if (isIPv4(mapped)) return list.check(mapped, 'ipv4');
  return list.check(ip, isIPv4(ip) ? 'ipv4' : 'ipv6');
}
