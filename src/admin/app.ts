/**
 * The operations app, served on the admin listener (plain HTTP, private): Prometheus metrics,
 * liveness and readiness, and, when an admin token is configured, the admin API and the key console.
 */
import path from 'node:path';
import express from 'express';
import { securityHeaders } from '../pipeline/security-headers';
import type { KeyStore } from '../auth/store/types';
import { handleErrors } from '../pipeline/error-handler';
import { errors } from '../errors';
import type { Logger } from '../telemetry/log';
import type { Metrics } from '../telemetry/metrics';
import { adminApi } from './api';

const CONSOLE_FILES = path.join(__dirname, 'console');

export interface Readiness {
  ready: boolean;
  checks: Record<string, unknown>;
}

export interface AdminAppDeps {
  metrics: Metrics;
  log: Logger;
  keyStore: KeyStore;
  /** Guards /admin/api and /admin/; undefined turns both off. */
  adminToken: string | undefined;
  /** The Prometheus exposition: this process's registry, or every process's in cluster mode. */
  exposition: () => Promise<string>;
  readiness: () => Promise<Readiness>;
}

export function createAdminApp({ metrics, log, keyStore, adminToken, exposition, readiness }: AdminAppDeps): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.disable('etag');
  app.use(securityHeaders());

  app.get('/metrics', async (_req, res) => {
    res.type(metrics.registry.contentType).send(await exposition());
  });
  app.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });
  app.get('/readyz', async (_req, res) => {
    const { ready, checks } = await readiness();
    res.status(ready ? 200 : 503).json({ status: ready ? 'ready' : 'not_ready', checks });
  });

  if (adminToken) {
    app.use('/admin/api', adminApi(keyStore, adminToken));
    app.use('/admin', express.static(CONSOLE_FILES, { index: 'index.html', redirect: true }));
  } else {
    app.use('/admin', () => {
      throw errors.adminApiDisabled();
    });
  }
  app.use((req) => {
    throw errors.routeNotFound(req.method, req.path);
  });
  app.use(handleErrors(log, metrics));
  return app;
}
