/**
 * Every instrument, in one place, on our own registry (never prom-client's global one).
 * Labels carry only bounded, non-secret values: configured provider names, status codes, reason codes.
 */
import { Gauge, Registry, collectDefaultMetrics } from 'prom-client';
import { CounterFamily, HistogramFamily } from '../tuning/instruments';

const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300];
const INTER_TOKEN_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5];
const OVERHEAD_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1];

const LINT_FAILING_DEFAULT_METRICS = ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'];

export type AuthFailureReason = 'missing' | 'malformed' | 'unknown' | 'revoked' | 'expired' | 'rotated' | 'ip_not_allowed' | 'workload_identity';

/** What the per-worker gauges read at scrape time. */
export interface WorkerSnapshot {
  provider: string;
  worker: string;
  up: boolean;
  outstanding: number;
}

/** Where the scrape-time gauges read their values (set by watchDependencies and watchUpstreams). */
interface Sources {
  dependencies: Record<string, () => boolean>;
  workers: () => Iterable<WorkerSnapshot>;
  queues: () => Iterable<{ provider: string; queued: number }>;
}

export function createMetrics() {
  const registry = new Registry();
  const sources: Sources = { dependencies: {}, workers: () => [], queues: () => [] };
  collectDefaultMetrics({ register: registry });
  // Gauges named *_total fail `promtool check metrics`; the per-type nodejs_active_* gauges stay.
  for (const name of LINT_FAILING_DEFAULT_METRICS) registry.removeSingleMetric(name);
  const registers = [registry];

  // Registered in this order, which is the order of the exposition.
  return {
    registry,
    ...requestInstruments(registers),
    ...accessInstruments(registers, sources),
    ...upstreamInstruments(registers, sources),
    /** Where chatgate_dependency_up reads each dependency's state at scrape time. */
    watchDependencies(dependencies: Record<string, () => boolean>) {
      sources.dependencies = { ...sources.dependencies, ...dependencies };
    },
    /** Where the per-worker and per-provider gauges read their values at scrape time. */
    watchUpstreams(upstreams: { workers: () => Iterable<WorkerSnapshot>; queues: () => Iterable<{ provider: string; queued: number }> }) {
      sources.workers = upstreams.workers;
      sources.queues = upstreams.queues;
    },
  };
}

export type Metrics = ReturnType<typeof createMetrics>;

type Registers = Registry[];

/** The public listener's requests: how many, how they ended, how long they took, what they used. */
function requestInstruments(registers: Registers) {
  return {
    requests: new CounterFamily({
      name: 'chatgate_requests_total',
      help: 'Requests answered on the public listener, by endpoint (chat, completions, embeddings, responses, models, console, other), provider and HTTP status.',
      labelNames: ['endpoint', 'provider', 'status'] as const,
      registers,
    }),
    errors: new CounterFamily({
      name: 'chatgate_errors_total',
      help: 'Error answers, by error code (the OpenAI error body code).',
      labelNames: ['code'] as const,
      registers,
    }),
    requestDuration: new HistogramFamily({
      name: 'chatgate_request_duration_seconds',
      help: 'Time from the request arriving to the last byte of the answer, by endpoint and provider.',
      labelNames: ['endpoint', 'provider'] as const,
      buckets: LATENCY_BUCKETS,
      registers,
    }),
    upstreamTimeToFirstByte: new HistogramFamily({
      name: 'chatgate_upstream_time_to_first_byte_seconds',
      help: 'Time from sending the request to a worker to its response headers, by provider.',
      labelNames: ['provider'] as const,
      buckets: LATENCY_BUCKETS,
      registers,
    }),
    streamFirstToken: new HistogramFamily({
      name: 'chatgate_stream_time_to_first_token_seconds',
      help: "Streams: time from sending the request to a worker to the first SSE chunk of its answer (a chunk carries about one token), by provider.",
      labelNames: ['provider'] as const,
      buckets: LATENCY_BUCKETS,
      registers,
    }),
    streamInterToken: new HistogramFamily({
      name: 'chatgate_stream_inter_token_seconds',
      help: 'Streams: time between consecutive SSE chunks from a worker, as relayed, by provider.',
      labelNames: ['provider'] as const,
      buckets: INTER_TOKEN_BUCKETS,
      registers,
    }),
    gatewayOverhead: new HistogramFamily({
      name: 'chatgate_gateway_overhead_seconds',
      help: 'Time spent in the gateway itself before a request is sent to a worker (every stage from arrival to dispatch), by provider.',
      labelNames: ['provider'] as const,
      buckets: OVERHEAD_BUCKETS,
      registers,
    }),
    inFlight: new Gauge({
      name: 'chatgate_requests_in_flight',
      help: 'Requests on the public listener that have not been answered yet.',
      registers,
    }),
  };
}

/** Who got in and who was refused (keys, the key cache, the admin token, quotas, budgets, rate limits), and the shared stores' health. */
function accessInstruments(registers: Registers, sources: Sources) {
  return {
    authFailures: new CounterFamily({
      name: 'chatgate_auth_failures_total',
      help: 'Requests refused by authentication, by reason.',
      labelNames: ['reason'] as const,
      registers,
    }),
    keyCacheHits: new CounterFamily({
      name: 'chatgate_key_cache_hits_total',
      help: 'Key lookups answered by the in-process cache (known and recently unknown keys).',
      labelNames: [],
      registers,
    }).series({}),
    keyCacheMisses: new CounterFamily({
      name: 'chatgate_key_cache_misses_total',
      help: 'Key lookups the cache could not answer (concurrent ones for the same key share one key store read).',
      labelNames: [],
      registers,
    }).series({}),
    keyCacheStaleServed: new CounterFamily({
      name: 'chatgate_key_cache_stale_served_total',
      help: 'Known keys served past their cache TTL because the key store could not be reached (stale-if-error, up to auth.maxStaleMs).',
      labelNames: [],
      registers,
    }).series({}),
    dependencyUp: new Gauge({
      name: 'chatgate_dependency_up',
      help: 'Whether a shared dependency answers (1) or not (0): key_store, rate_limit_store. /readyz says degraded while one is down.',
      labelNames: ['dependency'] as const,
      registers,
      aggregator: 'min', // cluster mode: down if any serving process finds it down
      collect() {
        this.reset();
        for (const [dependency, up] of Object.entries(sources.dependencies)) this.set({ dependency }, up() ? 1 : 0);
      },
    }),
    adminAuthFailures: new CounterFamily({
      name: 'chatgate_admin_auth_failures_total',
      help: 'Admin API requests refused for their token, by outcome: invalid (401), throttled (429: too many failures from one client).',
      labelNames: ['outcome'] as const,
      registers,
    }),
    quotaRefused: new CounterFamily({
      name: 'chatgate_quota_refused_total',
      help: 'Requests refused 429 insufficient_quota, by whose quota (key, account, or endUser: an end user of an account) and period (day or month, UTC).',
      labelNames: ['scope', 'period'] as const,
      registers,
    }),
    budgetRefused: new CounterFamily({
      name: 'chatgate_budget_refused_total',
      help: 'Requests refused 429 insufficient_quota for a budget, by whose budget (key, account, or endUser) and period (day or month, UTC).',
      labelNames: ['scope', 'period'] as const,
      registers,
    }),
    quotaSyncErrors: new CounterFamily({
      name: 'chatgate_quota_sync_errors_total',
      help: 'Quota counter syncs that failed (Redis or the key store away); what was used is kept and counted locally meanwhile.',
      labelNames: [],
      registers,
    }).series({}),
    rateLimited: new CounterFamily({
      name: 'chatgate_rate_limited_total',
      help: 'Requests refused by a per-key limit, by reason: requests, tokens, concurrency.',
      labelNames: ['reason'] as const,
      registers,
    }),
    rateLimitStoreErrors: new CounterFamily({
      name: 'chatgate_rate_limit_store_errors_total',
      help: 'Rate limit checks the store (Redis) could not answer; failOpen decides what the request got.',
      labelNames: [],
      registers,
    }).series({}),
  };
}

/** The workers: the tokens they reported, aliases' fallbacks, their health, load, queues, retries, timeouts and broken answers. */
function upstreamInstruments(registers: Registers, sources: Sources) {
  return {
    tokens: new CounterFamily({
      name: 'chatgate_tokens_total',
      help: 'Tokens the workers reported using, by endpoint, provider, model (other: not in the provider model list), the alias the client named (none: none) and kind.',
      labelNames: ['endpoint', 'provider', 'model', 'alias', 'kind'] as const,
      registers,
    }),
    fallbacks: new CounterFamily({
      name: 'chatgate_alias_fallbacks_total',
      help: "Requests an alias sent on to its next target because this provider's pool could not take them (no worker available, or every one tried failed before the request reached it).",
      labelNames: ['alias', 'provider'] as const,
      registers,
    }),
    workerUp: new Gauge({
      name: 'chatgate_worker_up',
      help: 'Whether a worker takes traffic now (1) or not (0: failing health checks or ejected).',
      labelNames: ['provider', 'worker'] as const,
      registers,
      aggregator: 'max', // cluster mode: up if any serving process can use it (not the count of processes)
      collect() {
        this.reset();
        for (const w of sources.workers()) this.set({ provider: w.provider, worker: w.worker }, w.up ? 1 : 0);
      },
    }),
    workerOutstanding: new Gauge({
      name: 'chatgate_worker_outstanding_requests',
      help: 'Requests a worker is handling now.',
      labelNames: ['provider', 'worker'] as const,
      registers,
      collect() {
        this.reset();
        for (const w of sources.workers()) this.set({ provider: w.provider, worker: w.worker }, w.outstanding);
      },
    }),
    queued: new Gauge({
      name: 'chatgate_upstream_queued_requests',
      help: 'Requests waiting for a worker with room, by provider.',
      labelNames: ['provider'] as const,
      registers,
      collect() {
        this.reset();
        for (const q of sources.queues()) this.set({ provider: q.provider }, q.queued);
      },
    }),
    ejections: new CounterFamily({
      name: 'chatgate_worker_ejections_total',
      help: 'Times a worker was taken out of its pool after consecutive failures.',
      labelNames: ['provider', 'worker'] as const,
      registers,
    }),
    /** Requests sent again, by provider and why (the per-worker family below has the worker too). */
    requestRetries: new CounterFamily({
      name: 'chatgate_retries_total',
      help: 'Requests sent again to another worker (or a fresh connection): reason unsent (the request was not sent), stale (a reused connection reset unread), replayed (sent, no byte of an answer came back).',
      labelNames: ['provider', 'reason'] as const,
      registers,
    }),
    retries: new CounterFamily({
      name: 'chatgate_upstream_retries_total',
      help: 'Requests sent again after the connection to this worker failed: reason unsent (before the request was sent), stale (a reused connection reset unread), replayed (sent, but the worker failed before any byte of its answer).',
      labelNames: ['provider', 'worker', 'reason'] as const,
      registers,
    }),
    timeouts: new CounterFamily({
      name: 'chatgate_upstream_timeouts_total',
      help: 'Upstream timeouts, by phase: connect, first_byte (waiting for the answer to start), idle (silence mid-answer).',
      labelNames: ['provider', 'worker', 'phase'] as const,
      registers,
    }),
    streamFailures: new CounterFamily({
      name: 'chatgate_upstream_broken_answers_total',
      help: 'Answers a worker started and did not finish (it died or fell silent mid-answer).',
      labelNames: ['provider', 'worker'] as const,
      registers,
    }),
  };
}
