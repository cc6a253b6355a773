/**
 * One worker of a provider's pool: where its requests go (parsed once, so nothing is parsed per
 * request), its label for metrics and logs (never the URL's user info), and its own keep-alive agent.
 */
import type http from 'node:http';
import { ENDPOINT_PATHS, ENDPOINTS, type Endpoint } from '../common/endpoints';
import type { ProviderConfig } from '../config';
import { workerAgent } from './worker-agent';

export interface Worker {
  /** For metric labels and logs: host, port and path of the base URL, never its user info. */
  readonly label: string;
  readonly base: string;
  /** Where chat completions go: <base>/v1/chat/completions. */
  readonly chatCompletionsUrl: string;
  /** Where each endpoint's requests go (<base>/v1/embeddings...), as the target object http-proxy takes (so it parses no URL per request). */
  readonly proxyTargets: Readonly<Record<Endpoint, ProxyTarget>>;
  readonly agent: http.Agent;
  readonly weight: number;
  readonly maxConcurrent: number | undefined;
}

export interface ProxyTarget {
  readonly protocol: string;
  readonly host: string;
  readonly hostname: string;
  readonly port: string;
  readonly path: string;
}

/**
 * An idle pooled connection is closed after this long, or earlier when a worker's "Keep-Alive:
 * timeout=N" asks for less (worker-agent.ts).
 */
const IDLE_CONNECTION_MS = 30_000;

export function createWorker(entry: ProviderConfig['workers'][number], maxSockets: number): Worker {
  const { url: base, weight, maxConcurrent: own } = typeof entry === 'string' ? { url: entry, weight: 1, maxConcurrent: undefined } : entry;
  // Past its sockets the agent would hold requests in a queue of its own, without a deadline or a
  // metric; capping concurrency at the sockets sends them to the pool's bounded, timed queue instead.
  const maxConcurrent = Math.min(own ?? Infinity, maxSockets);
  const url = new URL(base.endsWith('/') ? base : `${base}/`);
  const options = { keepAlive: true, maxSockets, maxFreeSockets: Math.min(maxSockets, 64), scheduling: 'lifo' as const, idleTimeoutMs: IDLE_CONNECTION_MS };
  const hostname = url.hostname.replace(/^\[(.*)\]$/, '$1');
  const path = url.pathname.replace(/\/$/, '');
  const targetOf = (endpoint: Endpoint): ProxyTarget => ({ protocol: url.protocol, host: hostname, hostname, port: url.port, path: path + ENDPOINT_PATHS[endpoint] });
  return {
    label: url.host + path,
    base: url.origin + path,
    chatCompletionsUrl: url.origin + path + ENDPOINT_PATHS.chat,
    proxyTargets: Object.fromEntries(ENDPOINTS.map((endpoint) => [endpoint, targetOf(endpoint)])) as Record<Endpoint, ProxyTarget>,
    agent: workerAgent(url.protocol, options),
    weight,
    maxConcurrent,
  };
}
