/**
 * CSRF: a request that changes something (any method but GET, HEAD and OPTIONS) is refused with 403,
 * before anything happens, unless its Origin is the console's own: the configured public URL's origin,
 * else https:// and the Host it was sent to. Browsers send Origin with every such request, and a page
 * of another site cannot forge it; the session cookie is SameSite=Strict besides.
 */
import type { RequestHandler } from 'express';
import { errors } from '../errors';

const SAFE = new Set(['GET', 'HEAD', 'OPTIONS']);

export function requireOwnOrigin(publicOrigin: string | undefined): RequestHandler {
  return function requireOwnOrigin(req, _res, next) {
    if (SAFE.has(req.method)) return next();
    const expected = publicOrigin ?? `https://${req.headers.host ?? ''}`;
    if (req.headers.origin !== expected) throw errors.originNotAllowed();
    next();
  };
}
