/**
 * The admin token guard: `Authorization: Bearer <admin token>`, compared in constant time (digests of
 * equal length, so neither content nor length leaks through timing).
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { RequestHandler } from 'express';
import { parseAuthorization } from '../auth/credentials';
import { GatewayError } from '../errors';

const adminChallenge = { 'WWW-Authenticate': 'Bearer realm="chatgate-admin"' };

export function requireAdminToken(token: string): RequestHandler {
  const expected = createHash('sha256').update(token).digest();
  return function requireAdmin(req, _res, next) {
    const credentials = parseAuthorization(req.headers.authorization);
    const offered = createHash('sha256')
      .update(credentials.ok && credentials.scheme === 'bearer' ? credentials.key : '')
      .digest();
    if (!credentials.ok || !timingSafeEqual(offered, expected)) {
      throw new GatewayError(401, 'invalid_request_error', 'invalid_admin_token', 'The admin API needs Authorization: Bearer <admin token>.', null, adminChallenge);
    }
    next();
  };
}
