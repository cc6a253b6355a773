/**
 * The operations app, served on the admin listener (plain HTTP, private): Prometheus metrics,
 * liveness and readiness, and, when an admin token is configured, the admin API. People manage keys
 * in the console on the public listener (src/console/).
 * It answers only to Host names that cannot be a rebinding attack (IP addresses, localhost, and the
 * names in admin.allowedHosts), gives every answer a request id, and throttles wrong admin tokens.
 */
import { isIP } from 'node:net';
import express, { type RequestHandler } from 'express';
import type { Accounts } from '../accounts/service';
import { createContext } from '../context';
import { errors } from '../errors';
import { handleErrors } from '../pipeline/error-handler';
import { assignRequestId } from '../pipeline/request-id';
import { securityHeaders } from '../pipeline/security-headers';
import type { Logger } from '../telemetry/log';
import type { Metrics } from '../telemetry/metrics';
import { adminApi } from './api';
import { READINESS_DEADLINE_MS, within, type Readiness } from './readiness';
import { requireAdminToken } from './token';

export interface AdminAppDeps {
  metrics: Metrics;
  log: Logger;
  accounts: Accounts;
  /** The price table's currency, that usage costs are in. */
  currency?: () => string;
  /** Guards /admin/api; undefined turns it off. */
  adminToken: string | undefined;
  /** Host names this listener answers to besides IP addresses and localhost. */
  allowedHosts?: readonly string[];
  /** The Prometheus exposition: this process's registry, or every process's in cluster mode. */
  exposition: () => Promise<string>;
  readiness: () => Promise<Readiness>;
}

const NO_ANSWER: Readiness = { ready: false, status: 'not_ready', checks: { answered: false } };

export function createAdminApp({ metrics, log, accounts, currency = () => 'USD', adminToken, allowedHosts = [], exposition, readiness }: AdminAppDeps): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.disable('etag');
  app.use(securityHeaders());
  app.use((_req, res, next) => {
    createContext(res, performance.now());
    next();
  });
  app.use(assignRequestId);
  app.use(requireKnownHost(allowedHosts));

  app.get('/metrics', async (_req, res) => {
    res.type(metrics.registry.contentType).send(await exposition());
  });
  app.get('/healthz', (_req, res) => {
    res.json({ status: 'ok' });
  });
  app.get('/readyz', async (_req, res) => {
    const { ready, status, checks } = await within(READINESS_DEADLINE_MS, readiness(), NO_ANSWER);
    res.status(ready ? 200 : 503).json({ status, checks });
  });

  if (adminToken) {
    const guard = requireAdminToken(adminToken, {
      refused: (client, where) => {
        metrics.adminAuthFailures.series({ outcome: 'invalid' }).inc();
        log.warn({ client, path: where }, 'admin token refused');
      },
      throttled: (client, untilMs) => log.warn({ client, until: new Date(untilMs).toISOString() }, 'too many wrong admin tokens from this client: refused until then'),
      throttledRequest: () => metrics.adminAuthFailures.series({ outcome: 'throttled' }).inc(),
    });
    app.use('/admin/api', guard, adminApi(accounts, currency));
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

/**
 * DNS rebinding: a page on another site, whose name the attacker points at this listener's address,
 * could read /metrics and /readyz from a browser inside the network. Its requests carry the
 * attacker's name in Host; Prometheus, probes and scripts use an address, localhost, or a name the
 * operator lists.
 */
export function hostAllowed(host: string | undefined, allowedHosts: readonly string[]): boolean {
  if (host === undefined) return true; // HTTP/1.0 without Host: no browser sends that
  const name = hostName(host);
  return name === 'localhost' || isIP(name) !== 0 || allowedHosts.includes(name);
}

function hostName(host: string): string {
  const lower = host.trim().toLowerCase();
  if (lower.startsWith('[')) return lower.slice(1, lower.indexOf(']') === -1 ? undefined : lower.indexOf(']'));
  const colon = lower.lastIndexOf(':');
  return (colon === -1 ? lower : lower.slice(0, colon)).replace(/\.$/, '');
}

function requireKnownHost(allowedHosts: readonly string[]): RequestHandler {
  return function requireKnownHost(req, _res, next) {
    if (!hostAllowed(req.headers.host, allowedHosts)) throw errors.hostNotAllowed();
    next();
  };
}
