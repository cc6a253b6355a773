/**
 * The first stage: open the request context and, when the answer is over (finished or cut), count it
 * and write its access log line (and its span, when spans are exported). Stages record their own outcomes on the context; this one reports the
 * request as a whole. The line names the key by id and name, never the key.
 */
import type { Request, RequestHandler } from 'express';
import { endpointLabel } from '../common/endpoints';
import { withoutKeys } from '../common/key-shape';
import { contextOf, createContext, type RequestContext } from '../context';
import type { AccessLog } from '../telemetry/log';
import type { Metrics } from '../telemetry/metrics';
import type { SpanExport } from '../telemetry/tracing';

/** Status recorded for a request whose client left before any answer was sent (nginx's convention). */
const CLIENT_CLOSED_REQUEST = 499;

/** A model request made with a key is over: served when a worker had it (its answer began, or the client left first), else refused by the gateway itself. */
export type KeyRequestEnded = (key: NonNullable<RequestContext['key']>, served: boolean, context: RequestContext) => void;

export function observeRequests(
  metrics: Metrics,
  writeAccessLine: AccessLog | undefined,
  spans?: SpanExport,
  now: () => number = () => performance.now(),
  keyRequestEnded?: KeyRequestEnded,
): RequestHandler {
  return function observeRequest(req, res, next) {
    createContext(res, now());
    metrics.inFlight.inc();
    // Read on arrival: by the end, the proxy stage has replaced `req.headers` with those it sent the worker.
    const client = writeAccessLine ? clientOf(req) : undefined;
    res.on('close', () => {
      const context = contextOf(res);
      const status = res.headersSent ? res.statusCode : CLIENT_CLOSED_REQUEST;
      const seconds = (now() - context.arrivedAt) / 1000;
      metrics.inFlight.dec();
      const endpoint = context.modelRequest?.endpoint ?? endpointLabel(req.originalUrl);
      if (context.key && keyRequestEnded && endpoint !== 'models' && endpoint !== 'console' && endpoint !== 'other') {
        // Served: a worker's answer began, or the client left while a worker had the request (its work
        // counts, whoever hung up). Refused: the gateway answered it itself.
        keyRequestEnded(context.key, context.firstByteAt !== undefined || (context.dispatchedAt !== undefined && !res.headersSent), context);
      }
      metrics.requests.series({ endpoint, provider: context.provider, status: String(status) }).inc();
      metrics.requestDuration.series({ endpoint, provider: context.provider }).observe(seconds);
      writeAccessLine?.(accessLine(context, req.method, req.path, client, status, seconds, res.writableFinished));
      spans?.record(context, { method: req.method, path: req.path, status, endedAt: now() });
    });
    next();
  };
}

function accessLine(context: RequestContext, method: string, path: string, client: string | undefined, status: number, seconds: number, finished: boolean) {
  return {
    requestId: context.requestId,
    traceId: context.trace?.traceId,
    keyId: context.key?.id,
    keyName: context.key?.name,
    client,
    method,
    path: withoutKeys(path),
    endpoint: context.modelRequest?.endpoint,
    provider: context.target?.provider,
    model: context.modelRequest && withoutKeys(context.modelRequest.model),
    alias: context.target?.alias,
    target: context.target && `${context.target.provider}/${withoutKeys(context.target.modelName)}`,
    worker: context.worker,
    status,
    code: context.errorCode,
    durationMs: round(seconds * 1000),
    upstreamFirstByteMs: context.firstByteAt !== undefined && context.dispatchedAt !== undefined ? round(context.firstByteAt - context.dispatchedAt) : undefined,
    stream: context.modelRequest?.stream,
    promptTokens: context.usage?.promptTokens,
    completionTokens: context.usage?.completionTokens,
    completed: finished,
  };
}

const round = (ms: number) => Math.round(ms * 100) / 100;

/** `req.ip`, without proxy-addr's work when no X-Forwarded-For is there to weigh: then it is the peer, trusted proxies or not. */
const clientOf = (req: Request) => (req.headers['x-forwarded-for'] === undefined ? req.socket.remoteAddress : req.ip);
