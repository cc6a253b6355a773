/**
 * The composition root: load config, build every part, open the listeners, print how to use them,
 * and drain on SIGTERM/SIGINT. Nothing here is per request.
 *
 * Three roles share these parts. A single process does everything. With `server.processes` > 1 the
 * primary process (cluster.ts) prepares what must exist once (certificate, first key, mock worker),
 * serves the admin listener with every process's metrics, and keeps N serving processes running;
 * each serving process (`role: worker`) runs the request path on the shared public ports.
 */
import { randomBytes } from 'node:crypto';
import cluster from 'node:cluster';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { AggregatorRegistry } from 'prom-client';
import { createAdminApp } from './admin/app';
import { Prices } from './accounts/prices';
import { endUserOf, useDetail } from './accounts/end-users';
import { githubKeys, GithubSigningKeys } from './accounts/github-keys';
import { githubLeakReports } from './accounts/leak-reports';
import { judgeReadiness, PING_DEADLINE_MS, within, type Readiness } from './admin/readiness';
import { createPublicApp } from './app';
import { KeyCache } from './auth/cache';
import { ClientTokens } from './auth/client-tokens';
import { WorkloadIdentities } from './auth/workload-identity';
import type { GuardedKeyStore } from './store/guarded';
import { retainUsage, UsageRecorder } from './auth/usage-recorder';
import { startPrimary, type WorkerMessages } from './process/cluster';
import { accountParts, banner, openWorkerStore, prepareOnce, reloadConfig, tlsMaterial, type Gateway } from './process/startup';
import { consoleApp } from './console/app';
import { createOidcRoutes } from './accounts/oidc';
import { createMailer } from './accounts/mailer';
import { QuotaTracker, TOKENS, type AccountLimits, type Measure, type QuotaCounters } from './accounts/quota';
import { BUDGET, budgetLimitsOf } from './accounts/enforce-budget';
import { Alerts, alertSettings } from './accounts/alerts';
import type { AccountRecord } from './store/types';
import { loadConfig, type Config } from './config';
import { GatewayError } from './errors';
import { required } from './context';
import { accessLogOf, createLogger, destinationOf, type Logger } from './telemetry/log';
import { createMetrics, type Metrics } from './telemetry/metrics';
import { logProcessWarnings } from './telemetry/process-warnings';
import { createProxy } from './upstream/proxy';
import { createSpanExport } from './telemetry/tracing';
import { RateLimiter } from './ratelimit/limiter';
import { MemoryRateLimitStore } from './ratelimit/memory';
import type { RateLimitStore } from './ratelimit/store';
import { openListeners } from './process/listeners';
import { HealthChecker } from './upstream/health';
import { listsModel } from './pipeline/model-list';
import { buildProviders, closeProviders, type Provider, type ProviderTable } from './upstream/providers';
import { buildAliases } from './upstream/aliases';

export async function startGateway(configFile: string, out: NodeJS.WritableStream = process.stderr): Promise<Gateway> {
  const config = loadConfig(configFile);
  const log = createLogger(config.log.level, destinationOf(config.log.destination));
  logProcessWarnings(log);
  if (cluster.isWorker) return startServing(config, configFile, log, 'worker');
  if (config.server.processes > 1) return startPrimary(config, log, out, configFile);
  return startServing(config, configFile, log, 'single', out);
}

async function startServing(config: Config, configFile: string, log: Logger, role: 'single' | 'worker', out: NodeJS.WritableStream = process.stderr): Promise<Gateway> {
  const once = role === 'single' ? await prepareOnce(config, log) : { tls: await tlsMaterial(config), keyStore: await openWorkerStore(config, log), firstKey: undefined, firstOwner: undefined, mockWorker: undefined };
  const { tls, keyStore, firstKey, firstOwner, mockWorker } = once;
  const metrics = createMetrics();
  const people = accountParts(config, log, keyStore);
  const lasting = await buildLastingParts(config, log, metrics, keyStore, people);
  let serving = await buildServing(config, log, metrics, lasting);
  const writeAccessLine = accessLogOf(log);
  let accepting = true;
  const readiness = async (): Promise<Readiness> =>
    judgeReadiness({
      accepting,
      keyStoreAnswers: await within(
        PING_DEADLINE_MS,
        keyStore.ping().then(() => true),
        false,
      ),
      servableKeys: lasting.keyCache.servableKeys(),
      providers: Object.fromEntries([...serving.providers.values()].map((p) => [p.name, p.pool.availableWorkers().length > 0])),
      rateLimitStore: lasting.rateLimitStore.shared ? lasting.rateLimitStore.reachable : undefined,
    });
  metrics.watchDependencies({
    key_store: () => keyStore.reachable,
    ...(lasting.rateLimitStore.shared ? { rate_limit_store: () => lasting.rateLimitStore.reachable } : {}),
  });

  const listeners = await openListeners(
    config,
    {
      publicApp: (req, res) => serving.handle(req, res),
      adminApp:
        role === 'single'
          ? createAdminApp({ metrics, log, accounts: people.accounts, currency: () => lasting.platform.currency, adminToken: config.admin.token, allowedHosts: config.admin.allowedHosts, exposition: () => metrics.registry.metrics(), readiness })
          : undefined,
    },
    tls,
    {
      plainHttpRefused: (client) => {
        metrics.errors.series({ code: 'https_required' }).inc();
        if (config.log.access) writeAccessLine({ client, status: 403, code: 'https_required', tls: false }, 'plain HTTP refused on the HTTPS port');
      },
      clientErrorRefused: (code) => metrics.errors.series({ code }).inc(),
    },
  );
  if (role === 'worker') answerPrimary(metrics, readiness, lasting.keyCache, listeners.publicAddress.port);

  log.info(
    {
      role,
      https: `${listeners.publicAddress.address}:${listeners.publicAddress.port}`,
      plainHttp: listeners.plainAddress ? `${listeners.plainAddress.address}:${listeners.plainAddress.port}` : null,
      admin: listeners.adminAddress ? `${listeners.adminAddress.address}:${listeners.adminAddress.port}` : null,
      providers: [...serving.providers.keys()],
      mockWorker: mockWorker ? mockWorker.port : null,
      tlsFingerprintSha256: tls.fingerprint,
    },
    'chatgate listening',
  );
  if (role === 'single') out.write(banner(config, listeners.publicAddress.port, listeners.adminAddress!, tls, { firstKey: firstKey?.key, firstOwner }));

  let reloading = Promise.resolve(true);
  return {
    config,
    listeners,
    reload() {
      reloading = reloading.then(async () => {
        const next = reloadConfig(configFile, config, log);
        if (!next) return false;
        const previous = serving;
        try {
          serving = await buildServing(next, log, metrics, lasting);
        } catch (err) {
          // A file can load and still not be servable (an apiKeyEnv naming an unset variable).
          log.error({ err: (err as Error).message }, 'config reload refused: the running config is kept');
          return false;
        }
        log.info({ providers: [...serving.providers.keys()] }, 'config reloaded');
        void previous.retire(config.shutdown.drainTimeoutMs);
        return true;
      });
      return reloading;
    },
    async shutdown() {
      accepting = false;
      await reloading; // a serving unit still being built would otherwise never be retired
      log.info({ deadlineMs: config.shutdown.drainTimeoutMs }, 'draining');
      const { cut } = await listeners.drain(config.shutdown.drainTimeoutMs);
      await serving.retire(0);
      await lasting.close();
      await listeners.closeAdmin();
      await mockWorker?.stop();
      await keyStore.close();
      log.info({ cut }, 'stopped');
      log.flush();
    },
  };
}

/** What outlives a config reload: the key cache, usage recording, the rate limit counters. */
async function buildLastingParts(config: Config, log: Logger, metrics: Metrics, keyStore: GuardedKeyStore, people: ReturnType<typeof accountParts>) {
  const { cacheSize, cacheTtlMs, cacheMaxAgeMs, maxStaleMs, negativeCacheSize, negativeCacheTtlMs } = config.auth;
  const keyCache = new KeyCache(
    keyStore,
    { size: cacheSize, ttlMs: cacheTtlMs, maxAgeMs: cacheMaxAgeMs, maxStaleMs, negativeSize: negativeCacheSize, negativeTtlMs: negativeCacheTtlMs },
    { hit: () => metrics.keyCacheHits.inc(), miss: () => metrics.keyCacheMisses.inc(), staleServed: () => metrics.keyCacheStaleServed.inc() },
  );
  keyStore.onChange((digests) => keyCache.applyChanges(digests));
  // An outage of the store is logged once, by the store's guard; the batch waits for the next flush.
  const usageFailed = (err: unknown) => !(err instanceof GatewayError && err.reportedElsewhere) && log.warn({ err: (err as Error).message }, 'could not record key usage');
  const usage = new UsageRecorder(keyStore, usageFailed, config.usage.maxPairsPerKeyDay);
  usage.start(config.auth.lastUsedFlushMs);
  const stopRetention = retainUsage(keyStore, config.usage.retentionDays, (err) => {
    if (!(err instanceof GatewayError && err.reportedElsewhere)) log.warn({ err: (err as Error).message }, 'could not delete old usage');
  });
  const rateLimitStore = await openRateLimitStore(config, log);
  const spans = await createSpanExport(config.tracing);
  const publicOrigin = config.console.publicUrl ? new URL(config.console.publicUrl).origin : undefined;
  const oidc = config.console.oidc;
  const oidcRoutes = oidc ? createOidcRoutes(oidc, { accounts: people.accounts, sessions: people.sessions, store: keyStore, publicOrigin, allowedHosts: [...config.console.allowedHosts, config.listen.host], log }) : undefined;
  const alerts = new Alerts(keyStore, people.auditor, alertSettings(config), log);
  people.accounts.leaks.onRevoked = (key, where) => alerts.keyLeaked(key, where);
  alerts.watchExpiries(config.alerts.expiringCheckMs);
  /** This process among the replicas that share Redis: one name for its token and budget counters. */
  const replica = randomBytes(9).toString('base64url');
  /** A tracker of token quotas (TOKENS) or of budgets (BUDGET), each with counters of its own. */
  const tracker = async (measure: Measure, accountLimits: (account: AccountRecord) => AccountLimits) => {
    const made = new QuotaTracker(await openQuotaCounters(config, keyStore, rateLimitStore, metrics, log, replica), {
      // One read for the accounts in use, each sync: not one per account (a thousand teams would be
      // two thousand queries a second on the database at the default syncMs), nor every account.
      accountQuota: async (ids) => new Map((await keyStore.listAccounts(ids)).map((account) => [account.id, accountLimits(account)] as const)),
      // Where a quota set midway through a period starts from (see quota.ts): what the keys used, as
      // every replica writes it every auth.lastUsedFlushMs.
      usage: (accountId, from, to) => keyStore.usage(accountId, from, to),
      syncFailed: () => metrics.quotaSyncErrors.inc(),
      crossed: (crossing) => alerts.crossed(measure === BUDGET ? 'budget' : 'tokens', crossing),
    }, undefined, {
      usageFlushMs: config.auth.lastUsedFlushMs,
      // Every replica knows a key's new quota at once while its change feed is live, within auth.cacheTtlMs
      // when it is not; then it has written what it used before within a flush.
      settleMs: config.auth.cacheTtlMs + 2 * config.auth.lastUsedFlushMs,
      measure,
      thresholds: config.alerts.thresholds,
      // A request waits for Redis no longer than rateLimit.timeoutMs in all (with the store: 1 s at least).
      primeTimeoutMs: config.rateLimit.store === 'redis' ? config.rateLimit.timeoutMs : Math.max(config.rateLimit.timeoutMs, 1000),
    });
    made.start(config.quota.syncMs);
    return made;
  };
  const quota = await tracker(TOKENS, (account) => ({ ...account.quota, endUserPerDay: account.endUserQuota?.tokensPerDay ?? null }));
  const budgets = await tracker(BUDGET, budgetLimitsOf);
  // The platform's default rate limits, which a reload may change (buildServing keeps this current).
  const platform = { limits: config.rateLimit as Config['rateLimit'], currency: config.prices.currency };
  const mailer = config.console.enabled && config.console.smtp ? createMailer(config.console.smtp) : undefined;
  const invites = mailer ? { mailer, publicOrigin, trustedHosts: new Set(['localhost', config.listen.host, ...config.console.allowedHosts].map((name) => name.toLowerCase())) } : undefined;
  const consoleRouter = config.console.enabled
    ? consoleApp({ accounts: people.accounts, sessions: people.sessions, oidc: Boolean(oidc), usageFlushMs: config.auth.lastUsedFlushMs, publicOrigin, oidcRoutes, platformLimits: () => platform.limits, currency: () => platform.currency, invites })
    : undefined;
  // The keys GitHub signs leak reports with: kept across reloads, each reload says which (github-keys.ts).
  const githubSigningKeys = new GithubSigningKeys({
    failed: (err) => log.warn({ err: (err as Error)?.message ?? String(err) }, "could not fetch GitHub's secret-scanning keys: the keys known before stay"),
    fetched: (count) => log.info({ keys: count }, "fetched GitHub's secret-scanning keys"),
  });
  return {
    platform,
    clientTokens: new ClientTokens(keyStore),
    workloads: new WorkloadIdentities(keyStore, log),
    leaks: people.accounts.leaks,
    githubSigningKeys,
    keyCache,
    usage,
    rateLimitStore,
    spans,
    consoleRouter,
    quota,
    budgets,
    alerts,
    async close() {
      githubSigningKeys.stop();
      stopRetention();
      await usage.stop();
      await quota.stop().catch(() => undefined);
      await budgets.stop().catch(() => undefined);
      await alerts.stop();
      mailer?.close();
      await rateLimitStore.close();
      await spans?.shutdown().catch((err: Error) => log.warn({ err: err.message }, 'could not export the last spans'));
    },
  };
}

type LastingParts = Awaited<ReturnType<typeof buildLastingParts>>;

/**
 * The request path for one config: providers and their health checks, limits, proxy, the app. A
 * reload builds a new one; the old one finishes the requests it had, then is retired.
 */
async function buildServing(config: Config, log: Logger, metrics: Metrics, lasting: LastingParts) {
  const providers = buildProviders(config, {
    ejected: (provider, state, forMs) => {
      metrics.ejections.series({ provider, worker: state.worker.label }).inc();
      log.warn({ provider, worker: state.worker.label, forMs }, 'worker ejected after consecutive failures');
    },
  });
  watchUpstreams(metrics, providers);
  const health = new HealthChecker(providers, {
    changed: (provider, state, healthy) => log.warn({ provider: provider.name, worker: state.worker.label, healthy }, 'worker health changed'),
  });
  await health.start();

  const { keyCache, usage } = lasting;
  const limiter = new RateLimiter(lasting.rateLimitStore, config.rateLimit, {
    storeFailed: (err) => {
      metrics.rateLimitStoreErrors.inc();
      log.debug({ err: (err as Error).message }, 'rate limit store error');
    },
    storeRecovered: () => log.debug('rate limit store took a command again'), // the Redis health check logs when it answers again
  });
  const prices = new Prices(config.prices);
  // The signing keys GitHub's reports are verified with: a reload takes new ones (GitHub rotates them).
  lasting.githubSigningKeys.configure(githubKeys(config.secretScanning.github.publicKeys), config.secretScanning.github.keysUrl);
  const leakReports = lasting.githubSigningKeys.enabled ? githubLeakReports(lasting.leaks, lasting.githubSigningKeys) : undefined;
  const proxy = createProxy(metrics, providers, {
    usage: (context, provider, tokens) => {
      const key = required(context.key, 'key');
      const target = required(context.target, 'target');
      const labels = { endpoint: target.endpoint, provider: provider.name, model: modelLabel(provider, target.modelName), alias: target.alias ?? 'none' };
      metrics.tokens.series({ ...labels, kind: 'prompt' }).inc(tokens.promptTokens);
      metrics.tokens.series({ ...labels, kind: 'completion' }).inc(tokens.completionTokens);
      const costNanos = prices.costNanos(`${provider.name}/${target.modelName}`, tokens);
      usage.tokens(key, tokens.promptTokens, tokens.completionTokens, undefined, costNanos, useDetail(context, key.accountId, `${provider.name}/${target.modelName}`));
      const endUser = endUserOf(context, key.accountId);
      lasting.quota.charge(key, tokens.promptTokens + tokens.completionTokens, endUser);
      lasting.budgets.charge(key, costNanos, endUser);
      context.quotaReservation?.release(); // charged: what it reserved is let go
      context.budgetReservation?.release();
      if (context.tokensPerMinute) limiter.debitTokens(key.id, context.tokensPerMinute, tokens.promptTokens + tokens.completionTokens);
    },
  }, config.usage);
  lasting.platform.limits = config.rateLimit;
  lasting.platform.currency = config.prices.currency;
  lasting.alerts.configure(alertSettings(config));
  lasting.workloads.configure(config.auth.workloadIdentity);
  for (const tracker of [lasting.quota, lasting.budgets]) tracker.setThresholds(config.alerts.thresholds);
  const publicApp = createPublicApp({ config, metrics, log, keyCache, providers, aliases: buildAliases(config), proxy, limiter, quota: lasting.quota, budgets: lasting.budgets, onKeyUsed: (record) => usage.used(record), onKeyRequestEnded: (key, served, context) => usage.ended(key, served, undefined, useDetail(context, key.accountId, undefined)), leakReports, clientTokens: lasting.clientTokens, workloads: lasting.workloads, spans: lasting.spans, console: lasting.consoleRouter });
  let inFlight = 0;
  let drained: (() => void) | undefined;
  return {
    providers,
    handle(req: IncomingMessage, res: ServerResponse) {
      inFlight++;
      res.once('close', () => {
        if (--inFlight === 0) drained?.();
      });
      publicApp(req, res);
    },
    /** Once its last request has ended (or the deadline passed), close what only this config used. */
    async retire(deadlineMs: number) {
      if (inFlight > 0) {
        await new Promise<void>((resolve) => {
          drained = resolve;
          setTimeout(resolve, deadlineMs).unref();
        });
      }
      health.stop();
      proxy.close();
      closeProviders(providers);
      await limiter.settleOwed();
    },
  };
}

/** A serving process in cluster mode answers the primary: metrics (prom-client's protocol), readiness, cache drops. */
function answerPrimary(metrics: Metrics, readiness: () => Promise<Readiness>, keyCache: KeyCache, port: number): void {
  AggregatorRegistry.setRegistries([metrics.registry]);
  new AggregatorRegistry(); // installs prom-client's listener for the primary's metric requests
  process.send?.({ type: 'chatgate:serving', port });
  process.on('message', (message: WorkerMessages) => {
    if (message?.type === 'chatgate:readiness') {
      void readiness().then((answer) => process.send?.({ type: 'chatgate:readiness', id: message.id, answer }));
    } else if (message?.type === 'chatgate:key-changes') {
      keyCache.applyChanges(message.digests);
    }
  });
}

function watchUpstreams(metrics: Metrics, providers: ProviderTable): void {
  metrics.watchUpstreams({
    workers: () =>
      [...providers.values()].flatMap((provider) =>
        provider.pool.workers.map((state) => ({ provider: provider.name, worker: state.worker.label, up: state.isAvailable(Date.now()), outstanding: state.outstanding })),
      ),
    queues: () => [...providers.values()].map((provider) => ({ provider: provider.name, queued: provider.pool.queued })),
  });
}

/** The model label of the token metric: a name the provider lists, else 'other' (labels stay bounded). */
function modelLabel(provider: Provider, modelName: string): string {
  return listsModel(provider, modelName) ? modelName : 'other';
}

/**
 * Quota counters where rate limits are shared: Redis, over the key store (the truth, reseeding Redis
 * when it comes back empty, and the count while it is away); else in the key store alone.
 */
async function openQuotaCounters(config: Config, store: GuardedKeyStore, rateLimitStore: RateLimitStore, metrics: Metrics, log: Logger, replica: string): Promise<QuotaCounters> {
  if (config.rateLimit.store === 'redis' && config.rateLimit.url) {
    const { RedisQuotaCounters } = await import('./accounts/redis-quota.js'); // ioredis only where Redis is used
    return new RedisQuotaCounters(store, {
      url: config.rateLimit.url,
      timeoutMs: config.rateLimit.timeoutMs,
      storeFlushMs: config.auth.lastUsedFlushMs,
      redisUp: () => rateLimitStore.reachable,
      replica,
      events: {
        failed: () => metrics.quotaSyncErrors.inc(),
        reseeded: (counters) => log.warn({ counters }, 'quota counters lost by Redis (restarted empty?): seeded again from the key store'),
      },
    });
  }
  return { add: (amounts) => store.addQuotaUsage(amounts), totals: (scopes) => store.quotaUsage(scopes) };
}

async function openRateLimitStore(config: Config, log: Logger): Promise<RateLimitStore> {
  const { store, url, timeoutMs } = config.rateLimit;
  if (store === 'memory' || !url) return new MemoryRateLimitStore();
  const { RedisRateLimitStore } = await import('./ratelimit/redis.js'); // ioredis only where Redis is used
  const redis = new RedisRateLimitStore(url, timeoutMs, {
    connection: (state, reason) =>
      state === 'lost'
        ? log.warn({ failOpen: config.rateLimit.failOpen, reason }, `rate limit store (Redis) unreachable: requests are ${config.rateLimit.failOpen ? 'admitted unlimited' : 'refused'} until it is back`)
        : state === 'restored'
          ? log.info('rate limit store (Redis) answers again: limits enforced')
          : log.info('rate limit store (Redis) connected'),
  });
  await redis.connected();
  return redis;
}
