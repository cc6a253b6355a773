/**
 * The admin token guard: `Authorization: Bearer <admin token>`, compared in constant time. Failures
 * are logged (the client's address and the path, never what was offered) and throttled per client
 * address: past `maxFailures` in a window, that address gets 429 until the window has passed, so a
 * token cannot be guessed at wire speed, and the owner is locked out of nothing for longer than a
 * window (another address is not affected at all).
 */
import type { RequestHandler } from 'express';
import { LRUCache } from 'lru-cache';
import { parseAuthorization } from '../auth/credentials';
import { sameSecret } from '../auth/keys';
import { errors } from '../errors';

export interface TokenGuardEvents {
  /** A wrong or missing token, from this client. */
  refused(client: string, path: string): void;
  /** This client passed the limit: it is refused without a check until `untilMs` (Date.now() time). */
  throttled(client: string, untilMs: number): void;
  /** A request refused while its client is throttled. */
  throttledRequest(): void;
}

export interface TokenGuardOptions {
  maxFailures: number;
  windowMs: number;
  now?: () => number;
}

interface Failures {
  count: number;
  since: number;
  blockedUntil: number;
}

export const ADMIN_TOKEN_THROTTLE: TokenGuardOptions = { maxFailures: 10, windowMs: 60_000 };

export function requireAdminToken(token: string, events: TokenGuardEvents, { maxFailures, windowMs, now = Date.now }: TokenGuardOptions = ADMIN_TOKEN_THROTTLE): RequestHandler {
  // Bounded: a spray from many addresses forgets the oldest ones rather than growing without end.
  const failures = new LRUCache<string, Failures>({ max: 10_000 });
  return function requireAdmin(req, _res, next) {
    const client = req.socket.remoteAddress ?? 'unknown';
    const at = now();
    const seen = failures.get(client);
    if (seen && seen.blockedUntil > at) {
      events.throttledRequest();
      throw errors.tooManyFailedAttempts(seen.blockedUntil - at);
    }
    const credentials = parseAuthorization(req.headers.authorization);
    const offered = credentials.ok && credentials.scheme === 'bearer' ? credentials.key : '';
    if (sameSecret(offered, token) && credentials.ok) return next();

    const record = seen && at - seen.since < windowMs ? seen : { count: 0, since: at, blockedUntil: 0 };
    record.count++;
    failures.set(client, record);
    events.refused(client, req.path);
    if (record.count >= maxFailures) {
      record.blockedUntil = at + windowMs;
      events.throttled(client, record.blockedUntil);
    }
    throw errors.invalidAdminToken();
  };
}
