/**
 * Providers: the prefix of `model` picks a pool of workers (from config). Each worker keeps its own
 * keep-alive agent. A provider's upstream settings are the global ones with its own overrides. The
 * upstream credential is read from the environment at start, never from config.
 */
import type { Config, ProviderConfig, UpstreamSettings } from '../config';
import { ConfigError } from '../config';
import { Pool, type WorkerState } from './pool';
import { definedFields } from '../common/defined-fields';
import { ENDPOINTS, type Endpoint } from '../common/endpoints';
import { HeaderAllowList } from './header-allow-list';
import { createWorker } from './worker';

export interface Provider {
  readonly name: string;
  readonly pool: Pool;
  /** The client headers its workers get (upstream.forwardHeaders). */
  readonly forwardedHeaders: HeaderAllowList;
  /** `Authorization` value for this provider's workers, if it has a credential. */
  readonly authorization: string | undefined;
  readonly settings: UpstreamSettings;
  /** Models named in config; undefined when they are asked of the workers. */
  readonly configuredModels: readonly string[] | undefined;
  /** The endpoints its workers serve (all unless the config names some). */
  readonly endpoints: ReadonlySet<Endpoint>;
  /** A request no worker answered a byte of is run once more on another (providers.<name>.replay). */
  readonly replay: boolean;
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
      forwardedHeaders: new HeaderAllowList(settings.forwardHeaders),
      authorization: upstreamAuthorization(name, provider.apiKeyEnv, env),
      settings,
      configuredModels: provider.models,
      endpoints: new Set(provider.endpoints ?? ENDPOINTS),
      replay: provider.replay ?? true,
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

function upstreamAuthorization(provider: string, variable: string | undefined, env: NodeJS.ProcessEnv): string | undefined {
  if (variable === undefined) return undefined;
  const value = env[variable];
  if (!value) throw new ConfigError(`config providers.${provider}.apiKeyEnv: environment variable ${variable} is not set`);
  return `Bearer ${value}`;
}
