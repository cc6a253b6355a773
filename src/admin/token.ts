/** The admin token guard: `Authorization: Bearer <admin token>`, compared in constant time. */
import type { RequestHandler } from 'express';
import { parseAuthorization } from '../auth/credentials';
import { sameSecret } from '../auth/keys';
import { errors } from '../errors';

export function requireAdminToken(token: string): RequestHandler {
  return function requireAdmin(req, _res, next) {
    const credentials = parseAuthorization(req.headers.authorization);
    const offered = credentials.ok && credentials.scheme === 'bearer' ? credentials.key : '';
    if (!sameSecret(offered, token) || !credentials.ok) throw errors.invalidAdminToken();
    next();
  };
}
