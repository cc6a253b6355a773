/**
 * The proxy's headers: what a worker gets of the client's request, and what the client gets of the
 * worker's answer. Pure functions of the request and its context (index.ts and answer.ts call them).
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { Request } from 'express';
import { CLIENT_TOKEN_PREFIX, KEY_PREFIX, withoutKeys } from '../../common/key-shape';
import type { RequestContext, UpstreamTarget } from '../../context';
import { traceparentOf } from '../../telemetry/trace-context';
import type { Provider } from '../providers';

const DROPPED_RESPONSE_HEADERS = new Set(['connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'trailer', 'upgrade', 'transfer-encoding']);

/**
 * The headers a worker gets: the client's that the provider's allow-list names (upstream.forwardHeaders),
 * with anything shaped like a chatgate key replaced, and what the gateway sets itself. Every other
 * client header is dropped: an auth proxy in front of a model server may believe an X-Forwarded-User
 * or an X-Remote-User, and credentials are the client's, not the worker's.
 */
export function upstreamHeaders(req: Request, context: RequestContext, target: UpstreamTarget, provider: Provider): IncomingHttpHeaders {
  const headers: IncomingHttpHeaders = {};
  const named = namedByConnection(req.headers.connection);
  const forwarded = provider.forwardedHeaders;
  for (const name in req.headers) {
    if (!forwarded.allows(name) || named?.has(name)) continue;
    const value = req.headers[name];
    headers[name] = typeof value === 'string' ? keyFree(value) : value?.map(keyFree);
  }
  headers['content-type'] = 'application/json';
  headers['content-length'] = String(target.body.length);
  headers['x-request-id'] = context.requestId;
  if (context.trace) {
    headers.traceparent = traceparentOf(context.trace);
    if (context.trace.tracestate) headers.tracestate = context.trace.tracestate;
  }
  headers['x-forwarded-proto'] = 'https';
  headers['x-forwarded-for'] = forwardedFor(req);
  if (provider.authorization) headers.authorization = provider.authorization;
  return headers;
}

/** A value with anything key-shaped replaced; the test first, as nearly every value holds no key. */
const keyFree = (value: string): string => (value.includes(KEY_PREFIX) || value.includes(CLIENT_TOKEN_PREFIX) ? withoutKeys(value) : value);

/** Headers the client's Connection header names as hop-by-hop (its usual values name none worth a Set). */
function namedByConnection(connection: string | undefined): Set<string> | undefined {
  if (connection === undefined || connection === 'keep-alive' || connection === 'close') return undefined;
  return new Set(connection.split(',').map((name) => name.trim().toLowerCase()));
}

/** The client chain as far as we trust it: trusted proxies' X-Forwarded-For (farthest first), then our peer. */
function forwardedFor(req: Request): string {
  const peer = req.socket.remoteAddress ?? '';
  if (req.headers['x-forwarded-for'] === undefined) return peer; // no chain to trust or not: skip proxy-addr
  return [...req.ips, peer].filter(Boolean).join(', ');
}

/** A copy: the worker's own headers stay as they came, for the agent (it reads Keep-Alive: timeout= from them). */
export function clientResponseHeaders(workerHeaders: IncomingHttpHeaders): IncomingHttpHeaders {
  const headers: IncomingHttpHeaders = {};
  for (const name in workerHeaders) {
    if (!DROPPED_RESPONSE_HEADERS.has(name) && name !== 'x-request-id') headers[name] = workerHeaders[name];
  }
  const workerRequestId = workerHeaders['x-request-id'];
  if (workerRequestId !== undefined) headers['x-upstream-request-id'] = workerRequestId;
  if (String(headers['content-type'] ?? '').startsWith('text/event-stream')) {
    // Tell nginx and ingress controllers in front of us not to buffer the stream.
    headers['cache-control'] = 'no-cache';
    headers['x-accel-buffering'] = 'no';
  }
  return headers;
}
