/**
 * The console on the public HTTPS listener, at /console/: the page (static files, console/static/)
 * and its API (/console/api). App.ts puts the front stages before it (observe, request id, HTTPS only)
 * with the console's own security headers: a strict Content-Security-Policy, no framing.
 */
import path from 'node:path';
import express, { type RequestHandler, type Router } from 'express';
import { errors } from '../errors';
import { consoleApi, type ConsoleApiDeps } from './api';
import { requireOwnOrigin } from './csrf';

export const CONSOLE_PATH = '/console';
const STATIC_FILES = path.join(__dirname, 'static');

export interface ConsoleDeps extends ConsoleApiDeps {
  /** The console's origin as people reach it (console.publicUrl); absent: https:// and the request's Host. */
  publicOrigin: string | undefined;
  /** Routes for signing in with the identity provider (oidc.ts), when one is configured. */
  oidcRoutes?: Router;
}

export function consoleApp(deps: ConsoleDeps): Router {
  const app = express.Router();
  app.use('/api', requireOwnOrigin(deps.publicOrigin));
  if (deps.oidcRoutes) app.use('/api/oidc', deps.oidcRoutes);
  app.use('/api', consoleApi(deps));
  app.use('/api', notFound);
  app.use(express.static(STATIC_FILES, { index: 'index.html', redirect: true, etag: false, lastModified: false, maxAge: 0 }));
  app.use(notFound);
  return app;
}

const notFound: RequestHandler = (req) => {
  throw errors.routeNotFound(req.method, `${CONSOLE_PATH}${req.path}`);
};
