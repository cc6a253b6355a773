/**
 * The one error handler: any thrown value -> the OpenAI error body with its status and headers,
 * counted by code. Faults of our own (5xx) are logged with their cause; the client sees only the
 * catalogued message and the request id.
 */
import type { ErrorRequestHandler } from 'express';
import { withoutKeys } from '../common/key-shape';
import { findContext } from '../context';
import { toGatewayError } from '../errors';
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
    // A body left unread (refused before reading, or too large) is not drained: close instead. One
    // the body stage is discarding as it comes (flowing) keeps the connection.
    if (!req.complete && req.readableFlowing !== true) res.set('Connection', 'close');
    res.status(failure.status).json(failure.toBody());
  };
}
