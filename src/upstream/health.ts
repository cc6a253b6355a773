/**
 * Active health: every provider's workers are asked GET <base><health.path> on an interval; a worker
 * turns unhealthy after `unhealthyThreshold` failed checks in a row and healthy again after
 * `healthyThreshold` good ones. The same round refreshes the models each healthy worker serves
 * (GET <base>/v1/models), unless the provider names its models in config.
 */
import http from 'node:http';
import https from 'node:https';
import type { WorkerState } from './pool';
import type { Provider, ProviderTable } from './providers';

export interface HealthEvents {
  changed(provider: Provider, state: WorkerState, healthy: boolean): void;
}

interface Streak {
  good: number;
  bad: number;
}

export class HealthChecker {
  private readonly streaks = new Map<WorkerState, Streak>();
  private readonly timers: NodeJS.Timeout[] = [];

  constructor(
    private readonly providers: ProviderTable,
    private readonly events: HealthEvents,
  ) {}

  /** One round now (awaited), then one per interval in the background. */
  async start(): Promise<void> {
    await this.checkAll();
    for (const provider of this.providers.values()) {
      if (!provider.settings.health.enabled) continue;
      const timer = setInterval(() => void this.checkProvider(provider), provider.settings.health.intervalMs);
      timer.unref();
      this.timers.push(timer);
    }
  }

  stop(): void {
    for (const timer of this.timers.splice(0)) clearInterval(timer);
  }

  checkAll(): Promise<void> {
    return Promise.all([...this.providers.values()].map((provider) => this.checkProvider(provider))).then(() => undefined);
  }

  private async checkProvider(provider: Provider): Promise<void> {
    const { health } = provider.settings;
    await Promise.all(
      provider.pool.workers.map(async (state) => {
        if (health.enabled) this.record(provider, state, await probe(state.worker.base + health.path, health.timeoutMs));
        if (provider.configuredModels === undefined && state.healthy) {
          const models = await fetchModels(state.worker.base, health.timeoutMs);
          if (models) state.models = models;
        }
      }),
    );
  }

  private record(provider: Provider, state: WorkerState, ok: boolean): void {
    const streak = this.streaks.get(state) ?? { good: 0, bad: 0 };
    this.streaks.set(state, streak);
    if (ok) {
      streak.good++;
      streak.bad = 0;
    } else {
      streak.bad++;
      streak.good = 0;
    }
    const { healthyThreshold, unhealthyThreshold } = provider.settings.health;
    if (!state.healthy && streak.good >= healthyThreshold) this.flip(provider, state, true);
    else if (state.healthy && streak.bad >= unhealthyThreshold) this.flip(provider, state, false);
  }

  private flip(provider: Provider, state: WorkerState, healthy: boolean): void {
    provider.pool.setHealthy(state, healthy);
    this.events.changed(provider, state, healthy);
  }
}

/** GET url; true for a 2xx within the timeout. Its own connection, so it tests the worker, not a pooled socket. */
export function probe(url: string, timeoutMs: number): Promise<boolean> {
  return get(url, timeoutMs).then((answer) => answer !== undefined && answer.status >= 200 && answer.status < 300);
}

async function fetchModels(base: string, timeoutMs: number): Promise<string[] | undefined> {
  const answer = await get(`${base}/v1/models`, timeoutMs);
  if (answer?.status !== 200) return undefined;
  try {
    const list = JSON.parse(answer.body) as { data?: unknown };
    if (!Array.isArray(list?.data)) return undefined;
    return list.data.map((model: { id?: unknown }) => model?.id).filter((id): id is string => typeof id === 'string');
  } catch {
    return undefined;
  }
}

const MAX_ANSWER_BYTES = 1024 * 1024;

function get(url: string, timeoutMs: number): Promise<{ status: number; body: string } | undefined> {
  const transport = url.startsWith('https:') ? https : http;
  return new Promise((resolve) => {
    const request = transport.get(url, { agent: false, timeout: timeoutMs }, (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => {
        body += chunk;
        if (body.length > MAX_ANSWER_BYTES) request.destroy();
      });
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
      response.on('error', () => resolve(undefined));
    });
    request.on('timeout', () => request.destroy());
    request.on('error', () => resolve(undefined));
  });
}
