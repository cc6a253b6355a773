/**
 * The transport guard: only requests that reached us over TLS go further. A request that arrived in
 * plain HTTP counts as secure only when it comes from a trusted proxy that says X-Forwarded-Proto:
 * https (Express's `req.secure` under the `trust proxy` setting built from `trustedProxies`).
 */
import type { RequestHandler } from 'express';
import { errors } from '../errors';

export const requireHttps: RequestHandler = function requireHttps(req, _res, next) {
  if (!req.secure) throw errors.httpsRequired();
  next();
};

/**
 * Node's parser keeps at most `maxHeadersCount` headers and silently drops the rest; the listeners
 * keep one more than the limit, so a request over it is seen here and refused rather than trimmed.
 */
export function limitHeaderCount(maxHeaders: number): RequestHandler {
  return function limitHeaders(req, _res, next) {
    if (req.rawHeaders.length > 2 * maxHeaders) throw errors.headersTooLarge();
    next();
  };
}
