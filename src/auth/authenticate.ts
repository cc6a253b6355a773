/** The authentication stage: Authorization header -> key record on the request context, or 401. */
import { BlockList, isIPv4 } from 'node:net';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { errors, GatewayError } from '../errors';
import { contextOf } from '../context';
import type { AuthFailureReason } from '../telemetry/metrics';
import { parseAuthorization } from './credentials';
import { CLIENT_TOKEN_PREFIX, looksLikeKey } from '../common/key-shape';
import type { KeyCache } from './cache';
import type { KeyAuthRecord } from '../store/types';
import type { ClientTokens, ClientTokenScope, Verified } from './client-tokens';
import { looksLikeJwt, type Checked, type WorkloadIdentities } from './workload-identity';

export interface AuthenticateDeps {
  cache: KeyCache;
  /** Client tokens (client-tokens.ts): a `cgt_` credential stands in for its parent key. Absent: none accepted. */
  tokens?: ClientTokens;
  /** Workload identity (workload-identity.ts): a JWT of a trusted issuer stands for an account. Absent: none accepted. */
  workloads?: WorkloadIdentities;
  onFailure(reason: AuthFailureReason): void;
  onSuccess?(record: KeyAuthRecord): void;
  now?: () => number;
}

export function authenticate({ cache, tokens, workloads, onFailure, onSuccess, now = Date.now }: AuthenticateDeps): RequestHandler {
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
  /** A client token: its parent key, as it is now (revoked, rotated, expired: refused), narrowed to the token's scope. */
  const admitToken = (tokens: ClientTokens, token: string, req: Request, res: Response, next: NextFunction) => {
    const withParent = (verified: Verified) => {
      if ('refused' in verified) {
        onFailure(verified.refused);
        throw errors.invalidApiKey();
      }
      const { scope } = verified;
      const hit = cache.cachedDigest(scope.parent);
      if (hit) return admit(hit.record && narrowed(hit.record, scope), req, res, next);
      return lookup(() => cache.lookupDigest(scope.parent)).then((record) => admit(record && narrowed(record, scope), req, res, next));
    };
    const verified = tokens.verify(token);
    return verified instanceof Promise ? lookup(() => verified).then(withParent) : withParent(verified);
  };
  /** A workload's JWT: checked against its issuer's keys (a token checked before: at once), then admitted as its account's identity. */
  const admitWorkload = (workloads: WorkloadIdentities, token: string, req: Request, res: Response, next: NextFunction) => {
    const withChecked = (checked: Checked) => {
      if ('refused' in checked) {
        onFailure('workload_identity');
        throw errors.invalidApiKey();
      }
      return admit(checked.record, req, res, next);
    };
    const checked = workloads.check(token);
    return checked instanceof Promise ? lookup(() => checked).then(withChecked) : withChecked(checked);
  };
  // Not async: a cached key (nearly every request) is admitted without a promise or a later tick.
  return function authenticateRequest(req, res, next) {
    const credentials = parseAuthorization(req.headers.authorization);
    if (!credentials.ok) {
      onFailure(credentials.problem);
      throw credentials.problem === 'missing' ? errors.missingApiKey() : errors.invalidAuthorizationHeader(credentials.reason);
    }
    if (tokens && credentials.key.startsWith(CLIENT_TOKEN_PREFIX)) return admitToken(tokens, credentials.key, req, res, next);
    if (workloads && looksLikeJwt(credentials.key)) return admitWorkload(workloads, credentials.key, req, res, next);
    if (!looksLikeKey(credentials.key)) return admit(undefined, req, res, next);
    const hit = cache.cached(credentials.key);
    if (hit) return admit(hit.record, req, res, next);
    return lookup(() => cache.lookup(credentials.key)).then((record) => admit(record, req, res, next));
  };
}

/** Matches no endpoint: a token whose endpoints its key no longer has (an empty list would mean every one). */
const NO_ENDPOINT = ['(none left)'];

/**
 * The key as a client token allows it, from the key as it is now: endpoints narrowed here (to what
 * both allow, so a key narrowed after the mint narrows its tokens too), models, output bound and end
 * user applied by later stages.
 */
function narrowed(record: KeyAuthRecord, scope: ClientTokenScope): KeyAuthRecord {
  const both = scope.endpoints && (record.endpoints.length === 0 ? scope.endpoints : scope.endpoints.filter((endpoint) => record.endpoints.includes(endpoint)));
  const clientToken = { models: scope.models, maxTokens: scope.maxTokens, endUser: scope.endUser, expiresAt: scope.expiresAt };
  return { ...record, endpoints: !both ? record.endpoints : both.length > 0 ? both : NO_ENDPOINT, clientToken } as KeyAuthRecord;
}

/** A store read for authenticating: its failure is 503 key_store_unavailable, never a 500. */
async function lookup<T>(read: () => Promise<T>): Promise<T> {
  try {
    return await read();
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

/** Each key's allowed ranges, made once per record's list (the cache keeps records; a client token's copy shares its key's list). */
const allowLists = new WeakMap<readonly string[], BlockList>();

/**
 * Whether the client address (Express's `req.ip`: the connection's, or through `trustedProxies` the
 * one they forward) is in one of the key's ranges. An IPv4 client seen on a dual-stack socket
 * (`::ffff:10.1.2.3`) is matched as IPv4. No address: not allowed.
 */
function fromAllowedAddress(record: KeyAuthRecord, ip: string | undefined): boolean {
  if (!ip) return false;
  let list = allowLists.get(record.allowedIps);
  if (!list) {
    list = new BlockList();
    for (const cidr of record.allowedIps) {
      const [address = '', prefix = ''] = cidr.split('/');
      list.addSubnet(address, Number(prefix), isIPv4(address) ? 'ipv4' : 'ipv6');
    }
    allowLists.set(record.allowedIps, list);
  }
  const mapped = ip.startsWith('::ffff:') ? ip.slice(7) : '';
  if (isIPv4(mapped)) return list.check(mapped, 'ipv4');
  return list.check(ip, isIPv4(ip) ? 'ipv4' : 'ipv6');
}
