/**
 * Providers: the prefix of `model` picks a pool of workers (from config). Each worker keeps its own
 * keep-alive agent. A provider's upstream settings are the global ones with its own overrides. The
 * upstream credential is read from the environment at start, never from config.
 */
import type http from 'node:http';
import type { Config, ProviderConfig, UpstreamSettings } from '../config';
import { ConfigError } from '../config';
import { Pool, type WorkerState } from './pool';
import { definedFields } from '../defined-fields';
import { workerAgent } from './worker-agent';

export interface Worker {
  /** For metric labels and logs: host, port and path of the base URL, never its user info. */
  readonly label: string;
  readonly base: string;
  /** Where chat completions go: <base>/v1/chat/completions. */
  readonly chatCompletionsUrl: string;
  /** The same, as the target object http-proxy takes (so it parses no URL per request). */
  readonly proxyTarget: { protocol: string; host: string; hostname: string; port: string; path: string };
  readonly agent: http.Agent;
  readonly weight: number;
  readonly maxConcurrent: number | undefined;
}

export interface Provider {
  readonly name: string;
  readonly pool: Pool;
  /** `Authorization` value for this provider's workers, if it has a credential. */
  readonly authorization: string | undefined;
  readonly settings: UpstreamSettings;
  /** Models named in config; undefined when they are asked of the workers. */
  readonly configuredModels: readonly string[] | undefined;
}

/** Where a validated request goes, and the body it goes with (model renamed for the worker). */
export interface UpstreamTarget {
  readonly provider: Provider;
  /** Kept for retries until a worker's answer starts, then released: a long stream must not hold its prompt. */
  body: Buffer;
  /** The gateway added stream_options.include_usage: the usage chunk is not the client's. */
  readonly dropUsageChunk: boolean;
}

export type ProviderTable = ReadonlyMap<string, Provider>;

export interface UpstreamEvents {
  ejected(provider: string, state: WorkerState, forMs: number): void;
}

export function buildProviders(config: Config, events: UpstreamEvents, env: NodeJS.ProcessEnv = process.env): ProviderTable {
  const table = new Map<string, Provider>();
  for (const [name, provider] of Object.entries(config.providers)) {
    const settings = effectiveSettings(config.upstream, provider.upstream);
    const workers = provider.workers.map((entry) => createWorker(entry, settings.maxSocketsPerWorker));
    table.set(name, {
      name,
      pool: new Pool(workers, settings, { ejected: (state, forMs) => events.ejected(name, state, forMs) }),
      authorization: upstreamAuthorization(name, provider.apiKeyEnv, env),
      settings,
      configuredModels: provider.models,
    });
  }
  return table;
}

export function closeProviders(table: ProviderTable): void {
  for (const provider of table.values()) {
    provider.pool.close();
    for (const state of provider.pool.workers) state.worker.agent.destroy();
  }
}

function effectiveSettings(defaults: UpstreamSettings, own: ProviderConfig['upstream']): UpstreamSettings {
  if (!own) return defaults;
  return {
    ...defaults,
    ...definedFields(own),
    queue: { ...defaults.queue, ...definedFields(own.queue) },
    health: { ...defaults.health, ...definedFields(own.health) },
    ejection: { ...defaults.ejection, ...definedFields(own.ejection) },
  };
}

/**
 * An idle pooled connection is closed after this long, or earlier when a worker's "Keep-Alive:
 * timeout=N" asks for less (worker-agent.ts).
 */
const IDLE_CONNECTION_MS = 30_000;

function createWorker(entry: ProviderConfig['workers'][number], maxSockets: number): Worker {
  const { url: base, weight, maxConcurrent: own } = typeof entry === 'string' ? { url: entry, weight: 1, maxConcurrent: undefined } : entry;
  // Past its sockets the agent would hold requests in a queue of its own, without a deadline or a
  // metric; capping concurrency at the sockets sends them to the pool's bounded, timed queue instead.
  const maxConcurrent = Math.min(own ?? Infinity, maxSockets);
  const url = new URL(base.endsWith('/') ? base : base + '/');
  const options = { keepAlive: true, maxSockets, maxFreeSockets: Math.min(maxSockets, 64), scheduling: 'lifo' as const, idleTimeoutMs: IDLE_CONNECTION_MS };
  const chatCompletions = new URL('v1/chat/completions', url);
  const hostname = chatCompletions.hostname.replace(/^\[(.*)\]$/, '$1');
  const path = url.pathname.replace(/\/$/, '');
  return {
    label: url.host + path,
    base: url.origin + path,
    chatCompletionsUrl: chatCompletions.toString(),
    proxyTarget: { protocol: chatCompletions.protocol, host: hostname, hostname, port: chatCompletions.port, path: chatCompletions.pathname },
    agent: workerAgent(url.protocol, options),
    weight,
    maxConcurrent,
  };
}

function upstreamAuthorization(provider: string, variable: string | undefined, env: NodeJS.ProcessEnv): string | undefined {
  if (variable === undefined) return undefined;
  const value = env[variable];
  if (!value) throw new ConfigError(`config providers.${provider}.apiKeyEnv: environment variable ${variable} is not set`);
  return `Bearer ${value}`;
}
