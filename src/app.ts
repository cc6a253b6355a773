/**
 * The public Express app: the request path's stages in order, nothing else. It does not listen;
 * process/listeners.ts gives it sockets and supertest can drive it directly.
 *
 *   observe -> security headers -> request id -> trace context -> transport guard (HTTPS, header count) -> authenticate -> rate limit -> quota, budget ->
 *   read + validate body -> reserve tokens, bound for a budget -> route -> reserve money -> proxy;  anything thrown -> the one error handler.
 * Chat completions, completions, embeddings and responses (common/endpoints.ts) each have this chain.
 * GET /v1/models shares the first stages and lists what the key may use. The console (/console/) has
 * the same observing, ids and transport guard, with a page's security headers.
 */
import express, { type RequestHandler, type Router } from 'express';
import { authenticate } from './auth/authenticate';
import type { KeyCache } from './auth/cache';
import type { ClientTokens } from './auth/client-tokens';
import type { WorkloadIdentities } from './auth/workload-identity';
import { CLIENT_TOKENS_PATH, mintClientTokens } from './auth/client-token-route';
import { corsFor } from './pipeline/cors';
import type { KeyAuthRecord } from './store/types';
import { readAndValidateBody } from './pipeline/body';
import type { Config } from './config';
import { handleErrors } from './pipeline/error-handler';
import { useSharedPrototypes } from './tuning/express-prototypes';
import { modelLister } from './pipeline/model-list';
import { errors } from './errors';
import { accessLogOf, type Logger } from './telemetry/log';
import type { Metrics } from './telemetry/metrics';
import { observeRequests, type KeyRequestEnded } from './pipeline/observe';
import type { createProxy } from './upstream/proxy';
import { assignRequestId } from './pipeline/request-id';
import { limitRate } from './ratelimit/limit-rate';
import type { RateLimiter } from './ratelimit/limiter';
import { route } from './pipeline/route';
import { API_SECURITY_HEADERS, CONSOLE_SECURITY_HEADERS, securityHeaders } from './pipeline/security-headers';
import { CONSOLE_PATH } from './console/app';
import { boundForBudget, reserveBudget, type CostBound } from './accounts/enforce-budget';
import { enforceQuota, reserveQuota } from './accounts/enforce-quota';
import { GITHUB_LEAK_REPORTS_PATH } from './accounts/leak-reports';
import { Prices } from './accounts/prices';
import type { QuotaTracker } from './accounts/quota';
import { continueTrace } from './pipeline/trace';
import { limitHeaderCount, requireHttps } from './pipeline/transport';
import type { SpanExport } from './telemetry/tracing';
import type { ProviderTable } from './upstream/providers';
import type { AliasTable } from './upstream/aliases';
import { ENDPOINT_PATHS, ENDPOINTS } from './common/endpoints';
import { required } from './context';

export const CHAT_COMPLETIONS_PATH = ENDPOINT_PATHS.chat;
export const MODELS_PATH = '/v1/models';

export interface PublicAppDeps {
  config: Config;
  metrics: Metrics;
  log: Logger;
  keyCache: KeyCache;
  providers: ProviderTable;
  /** Model aliases (models.aliases); none when absent. */
  aliases?: AliasTable;
  proxy: ReturnType<typeof createProxy>;
  limiter: RateLimiter;
  onKeyUsed?: (record: KeyAuthRecord) => void;
  /** A model request made with a key is over, served by a worker or refused by the gateway: for usage. */
  onKeyRequestEnded?: KeyRequestEnded;
  /** POST /secret-scanning/github, when the config trusts a GitHub signing key (accounts/leak-reports.ts). */
  leakReports?: RequestHandler[];
  /** Client tokens' signing and checking (auth/client-tokens.ts); used when clientTokens.enabled. */
  clientTokens?: ClientTokens;
  /** Workload identity (auth/workload-identity.ts); used when auth.workloadIdentity has rules. */
  workloads?: WorkloadIdentities;
  spans?: SpanExport;
  quota: QuotaTracker;
  /** Budgets in money (accounts/enforce-budget.ts); absent: none enforced. */
  budgets?: QuotaTracker;
  /** The console (page and API) at /console, when it is on. */
  console?: Router;
}

export function createPublicApp({ config, metrics, log, keyCache, providers, aliases = new Map(), proxy, limiter, quota, budgets, onKeyUsed, onKeyRequestEnded, leakReports, clientTokens, workloads, spans, console }: PublicAppDeps): express.Express {
  const app = express();
  app.disable('x-powered-by');
  app.disable('etag');
  app.set('trust proxy', config.trustedProxies.length > 0 ? [...config.trustedProxies] : false);
  useSharedPrototypes(app);

  // Every path passes the same front stages; the hot route is the router's first layer, so a chat
  // request matches at once and runs its whole chain inside one route.
  const observe = observeRequests(metrics, config.log.access ? accessLogOf(log) : undefined, spans, undefined, onKeyRequestEnded);
  const idsAndTransport = [assignRequestId, continueTrace, requireHttps, limitHeaderCount(config.limits.maxHeaders)];
  const front = [observe, securityHeaders(API_SECURITY_HEADERS), ...idsAndTransport];
  const tokens = config.clientTokens.enabled ? clientTokens : undefined;
  const authenticateKey = authenticate({ cache: keyCache, tokens, workloads: workloads?.enabled ? workloads : undefined, onFailure: (reason) => metrics.authFailures.series({ reason }).inc(), onSuccess: onKeyUsed });
  // CORS for the pages that may call with a client token: nothing at all on the hot path without any.
  const cors = config.clientTokens.allowedOrigins.length > 0 ? corsFor(config.clientTokens.allowedOrigins) : undefined;
  const answerCors = cors ? [cors.answer] : [];
  const limits = { maxBytes: config.limits.maxBodyBytes, maxJsonDepth: config.limits.maxJsonDepth, maxJsonElements: config.limits.maxJsonElements };
  const budgetRefused = (scope: 'key' | 'account' | 'endUser', period: 'day' | 'month') => metrics.budgetRefused.series({ scope, period }).inc();
  const admit = [
    authenticateKey,
    limitRate(limiter, metrics),
    enforceQuota(quota, (scope, period) => metrics.quotaRefused.series({ scope, period }).inc()),
    ...(budgets ? [enforceQuota(budgets, budgetRefused, 'budget')] : []),
  ];
  const holdAfterCloseMs = config.usage.drainAfterDisconnectMs + 1000;
  const { defaultReserveTokens } = config.quota;
  const reserve = reserveQuota(quota, { defaultReserveTokens, capMaxTokens: config.quota.capMaxTokens, holdAfterCloseMs }, (scope, period) => metrics.quotaRefused.series({ scope, period }).inc());
  const prices = new Prices(config.prices);
  const routeRequest = route(providers, aliases, undefined, config.prices.unpricedModels === 'refuse' ? (model) => prices.priceOf(model) !== undefined : undefined);
  const [bound, reserveMoney] = budgets
    ? [[boundForBudget(budgets, defaultReserveTokens)], [reserveBudget(budgets, costBound(prices), { defaultReserveTokens, holdAfterCloseMs, unpricedAllowed: config.prices.unpricedModels === 'allow' }, budgetRefused)]]
    : [[], []];
  // Chat completions first: the hot route is the router's first layer. Every endpoint has the same
  // chain; only what its body must hold differs.
  for (const endpoint of ENDPOINTS) {
    app.post(ENDPOINT_PATHS[endpoint], ...front, ...answerCors, ...admit, readAndValidateBody(limits, endpoint), reserve, ...bound, routeRequest, ...reserveMoney, proxy.handle);
  }
  const models = modelLister(providers, aliases);
  app.get(MODELS_PATH, ...front, ...answerCors, authenticateKey, models.list);
  app.get(`${MODELS_PATH}/*model`, ...front, ...answerCors, authenticateKey, models.retrieve);
  if (cors) app.options([...Object.values(ENDPOINT_PATHS), MODELS_PATH, `${MODELS_PATH}/*model`], ...front, cors.preflight);
  if (tokens) app.post(CLIENT_TOKENS_PATH, ...front, authenticateKey, limitRate(limiter, metrics), ...mintClientTokens(tokens));
  // The console is a page: a page's security headers, the same observing, ids and transport guard.
  if (console) {
    app.use(CONSOLE_PATH, observe, securityHeaders(CONSOLE_SECURITY_HEADERS), ...idsAndTransport, console);
  } else {
    // Turned off (console.enabled: false): say so, rather than a 404 that reads like a wrong address.
    app.use(CONSOLE_PATH, ...front, () => {
      throw errors.consoleDisabled();
    });
  }
  if (leakReports) app.post(GITHUB_LEAK_REPORTS_PATH, ...front, ...leakReports);
  app.use(...front);
  app.all(Object.values(ENDPOINT_PATHS), (req) => {
    throw errors.methodNotAllowed(req.method, 'POST');
  });
  if (tokens) {
    app.all(CLIENT_TOKENS_PATH, (req) => {
      throw errors.methodNotAllowed(req.method, 'POST');
    });
  }
  app.all([MODELS_PATH, `${MODELS_PATH}/*model`], (req) => {
    throw errors.methodNotAllowed(req.method, 'GET');
  });
  app.use((req) => {
    throw errors.routeNotFound(req.method, req.path);
  });
  app.use(handleErrors(log, metrics));
  return app;
}

/**
 * What a routed request may cost at its model's price: the model it was routed to and, for an alias,
 * the fallbacks routing kept for it (the dearest counts); undefined when one of them has no price.
 */
function costBound(prices: Prices): CostBound {
  return (context, promptTokens, completionTokens) => {
    let most = 0;
    for (const model of required(context.target, 'target').mayAnswer) {
      if (!prices.priceOf(model)) return undefined;
      most = Math.max(most, prices.costNanos(model, { promptTokens, completionTokens }));
    }
    return most;
  };
}
