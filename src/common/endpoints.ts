/**
 * The OpenAI endpoints chatgate serves, each through the same stages, and where a worker serves it.
 * A provider may serve some of them (`providers.<name>.endpoints`), a key may be limited to some.
 */
export const ENDPOINTS = ['chat', 'completions', 'embeddings', 'responses'] as const;
export type Endpoint = (typeof ENDPOINTS)[number];

export const ENDPOINT_PATHS: Readonly<Record<Endpoint, string>> = {
  chat: '/v1/chat/completions',
  completions: '/v1/completions',
  embeddings: '/v1/embeddings',
  responses: '/v1/responses',
};

/** Streams whose usage comes in a chunk the gateway may have to ask for (stream_options.include_usage). */
export const USAGE_CHUNK_ENDPOINTS: ReadonlySet<Endpoint> = new Set<Endpoint>(['chat', 'completions']);

const ENDPOINT_OF_PATH: ReadonlyMap<string, Endpoint> = new Map(Object.entries(ENDPOINT_PATHS).map(([endpoint, path]) => [path, endpoint as Endpoint]));

/** The metric label of a request's URL (path and query): an endpoint, or models, console, other. */
export function endpointLabel(url: string): Endpoint | 'models' | 'console' | 'other' {
  const query = url.indexOf('?');
  const path = query === -1 ? url : url.slice(0, query);
  const endpoint = ENDPOINT_OF_PATH.get(path);
  if (endpoint) return endpoint;
  if (path === '/v1/models' || path.startsWith('/v1/models/')) return 'models';
  if (path === '/console' || path.startsWith('/console/')) return 'console';
  return 'other';
}

/** The path of an endpoint, for errors and docs. */
export const endpointPath = (endpoint: Endpoint): string => ENDPOINT_PATHS[endpoint];
