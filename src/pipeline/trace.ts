/**
 * The trace stage (W3C trace context): keep the client's trace (a valid `traceparent`), or start one,
 * and take a new span id for the gateway's hop; the worker gets `traceparent` (and the client's
 * `tracestate`) with the gateway as parent, so a request can be followed from client to model server.
 */
import type { RequestHandler } from 'express';
import { holdsKey } from '../common/key-shape';
import { contextOf } from '../context';
import { parseTraceparent, randomHex } from '../telemetry/trace-context';

export const continueTrace: RequestHandler = function continueTrace(req, res, next) {
  const incoming = parseTraceparent(typeof req.headers.traceparent === 'string' ? req.headers.traceparent : undefined);
  const sentState = incoming && typeof req.headers.tracestate === 'string' ? req.headers.tracestate.slice(0, 512) : undefined;
  // Vendors' state travels as it came, unless it holds something shaped like a key: then it is dropped.
  const tracestate = sentState !== undefined && !holdsKey(sentState) ? sentState : undefined;
  contextOf(res).trace = {
    traceId: incoming?.traceId ?? randomHex(16),
    spanId: randomHex(8),
    parentSpanId: incoming?.parentId,
    flags: incoming?.flags ?? '01',
    tracestate,
  };
  next();
};
