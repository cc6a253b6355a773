/**
 * The one error handler: any thrown value -> the OpenAI error body with its status and headers,
 * counted by code. Faults of our own (5xx) are logged with their cause; the client sees only the
 * catalogued message and the request id.
 */
import type { ErrorRequestHandler, Request, Response } from 'express';
import { withoutKeys } from '../common/key-shape';
import { findContext } from '../context';
import { toGatewayError, type GatewayError } from '../errors';
import type { Logger } from '../telemetry/log';
import type { Metrics } from '../telemetry/metrics';

export function handleErrors(log: Logger, metrics: Metrics): ErrorRequestHandler {
  return function handleError(err, req, res, _next) {
    const context = findContext(res);
    const failure = toGatewayError(err, context?.requestId ?? '');
    if (context) context.errorCode = failure.code;
    metrics.errors.series({ code: failure.code }).inc();
    if (failure.status >= 500 && !failure.reportedElsewhere) {
      const cause = err === failure ? failure.cause : err;
      log.error({ requestId: context?.requestId, code: failure.code, method: req.method, path: withoutKeys(req.path), err: cause }, 'request failed');
    }
    if (res.headersSent) {
      res.destroy();
      return;
    }
    res.set(failure.headers);
    if (!req.complete) {
      if (req.readableFlowing === true) return answerWhileDiscarding(req, res, failure);
      // A body left unread (refused before reading, or too large) is not drained: close instead.
      res.set('Connection', 'close');
    }
    res.status(failure.status).json(failure.toBody());
  };
}

/**
 * The body stage refused a body whose rest it lets through to nowhere: the whole answer goes now
 * (with its Content-Length, so the client has it at once), and the response ends when the upload
 * does. Ended earlier, Node would close the connection under a client still sending, which then
 * meets a reset and may lose the answer. A client that never finishes is cut by requestTimeout.
 */
function answerWhileDiscarding(req: Request, res: Response, failure: GatewayError): void {
  const body = JSON.stringify(failure.toBody());
  res.status(failure.status);
  res.set('Content-Type', 'application/json; charset=utf-8');
  res.set('Content-Length', String(Buffer.byteLength(body)));
  res.write(body);
  const end = () => res.end();
  req.once('end', end);
  req.once('close', end);
}
