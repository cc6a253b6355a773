/**
 * CORS for the model endpoints, so that browser code on the configured origins
 * (`clientTokens.allowedOrigins`) can call them with a client token (auth/client-tokens.ts). Mounted
 * only when an origin is configured: nothing on the request path otherwise.
 */
import type { Request, RequestHandler } from 'express';

const HEADER_LIST = /^[A-Za-z0-9!#$%&'*+.^_`|~-]+(\s*,\s*[A-Za-z0-9!#$%&'*+.^_`|~-]+)*$/;
const EXPOSED = 'x-request-id, retry-after, x-ratelimit-limit-requests, x-ratelimit-remaining-requests, x-ratelimit-reset-requests, x-ratelimit-limit-tokens, x-ratelimit-remaining-tokens, x-ratelimit-reset-tokens';

/**
 * CORS for the model endpoints, for the configured origins only (exact `scheme://host[:port]`): a
 * preflight gets 204 with what it asked for (no cookies are ever read, so no credentials mode); an
 * answer gets `Access-Control-Allow-Origin`. Any other origin gets nothing, and a browser keeps its
 * page from reading the answer.
 */
export function corsFor(allowedOrigins: readonly string[]): { answer: RequestHandler; preflight: RequestHandler } {
  const allowed = new Set(allowedOrigins);
  const originOf = (req: Request) => {
    const origin = req.headers.origin;
    return typeof origin === 'string' && allowed.has(origin) ? origin : undefined;
  };
  const answer: RequestHandler = (req, res, next) => {
    res.vary('Origin');
    const origin = originOf(req);
    if (origin) res.set({ 'access-control-allow-origin': origin, 'access-control-expose-headers': EXPOSED });
    next();
  };
  const preflight: RequestHandler = (req, res, next) => {
    const origin = originOf(req);
    const method = req.headers['access-control-request-method'];
    if (!origin || typeof method !== 'string') return next(); // not a preflight this gateway answers: 405 as before
    const headers = req.headers['access-control-request-headers'];
    res.vary('Origin').status(204).set({
      'access-control-allow-origin': origin,
      'access-control-allow-methods': 'POST, GET',
      'access-control-allow-headers': typeof headers === 'string' && headers.length <= 2048 && HEADER_LIST.test(headers) ? headers : 'authorization, content-type',
      'access-control-max-age': '600',
    });
    res.end();
  };
  return { answer, preflight };
}
