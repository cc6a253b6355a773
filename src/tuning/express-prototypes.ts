/**
 * Express 5 moves every request and response onto its app's prototypes with Object.setPrototypeOf as
 * it enters. V8 pays for that on every later property access of those objects, in Express and in
 * Node's own HTTP code: measured on the bench machine, a minimal Express app cost 181 µs of CPU per
 * request with the swap and 64 µs without it (plain Node: 34 µs).
 *
 * The listeners create requests and responses of these classes, whose prototypes already are the
 * ones Express swaps to, so its setPrototypeOf finds nothing to change and returns at once. Every
 * public app shares them (a reload builds a new app for the same listeners), so `app` is not on the
 * prototype as Express would put it, but set on each request by the app's first middleware.
 */
import { IncomingMessage, ServerResponse } from 'node:http';
import express from 'express';

export class ExpressRequest extends IncomingMessage {}
Object.setPrototypeOf(ExpressRequest.prototype, express.request);

export class ExpressResponse<Request extends IncomingMessage = IncomingMessage> extends ServerResponse<Request> {}
Object.setPrototypeOf(ExpressResponse.prototype, express.response);

/** Make `app` take requests of the classes above without a prototype swap; call before any other `app.use`. */
export function useSharedPrototypes(app: express.Express): void {
  app.request = ExpressRequest.prototype as unknown as express.Request;
  app.response = ExpressResponse.prototype as unknown as express.Response;
  app.use(function ownedByThisApp(req, res, next) {
    req.app = app;
    res.app = app;
    next();
  });
}
