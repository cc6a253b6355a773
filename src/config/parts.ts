/**
 * Configuration's building blocks: the value shapes every section uses (ports, hosts, durations),
 * and the providers' part: workers, upstream settings (global defaults and a provider's overrides,
 * from one description), which client headers may reach a worker, and model aliases. The sections
 * are in the other files of config/, one constant each; src/config.ts lists them into the whole schema.
 */
import { isIP } from 'node:net';
import { z } from 'zod';
import { ENDPOINTS } from '../common/endpoints';

export const port = z.number().int().min(0).max(65535);
export const host = z.string().min(1);
/** A host name or IP address as the Host header names it (no port, scheme or path), kept in lower case without a final dot. */
export const hostName = z
  .string()
  .transform((name) => name.trim().toLowerCase().replace(/\.$/, ''))
  .refine((name) => /^[a-z0-9]([a-z0-9-]{0,62})(\.[a-z0-9]([a-z0-9-]{0,62}))*$/.test(name) || isIP(name) !== 0, {
    message: 'must be a host name or an IP address, without a port, scheme or path',
  });
export const milliseconds = z.number().int().positive();
export const count = z.number().int().positive();

/** A header name in lower case, or a prefix of names ending in `*` (`x-stainless-*`). */
export const headerPattern = z
  .string()
  .regex(/^[a-z0-9!#$%&'+.^_`|~-]+\*?$/, "must be a header name in lower case, or a prefix ending in '*'")
  .refine((name) => !NEVER_FORWARDED.includes(name.replace(/\*$/, '')), 'is set by the gateway itself, or is a credential: it is never forwarded');

/**
 * What a client may tell a worker: content negotiation, its own identity, and OpenAI's request
 * options (OpenAI-Beta, the SDKs' x-stainless-* telemetry, Idempotency-Key). Anything else (an
 * X-Forwarded-User, an X-Remote-User, an X-Auth-Token) could be believed by an auth proxy in front of a
 * model server, and is dropped.
 */
export const DEFAULT_FORWARD_HEADERS: readonly string[] = ['accept', 'accept-language', 'user-agent', 'openai-beta', 'x-stainless-*', 'idempotency-key'];
/** Credentials, hop-by-hop headers and what the gateway sets itself: never passed on, whatever the config says. */
export const NEVER_FORWARDED: readonly string[] = [
  'authorization', 'proxy-authorization', 'cookie', 'api-key', 'x-api-key', 'openai-organization', 'openai-project',
  'connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'expect', 'host',
  'content-length', 'content-type', 'content-encoding', 'accept-encoding', 'forwarded', 'x-forwarded-for', 'x-forwarded-proto',
  'x-forwarded-host', 'x-forwarded-port', 'x-real-ip', 'x-request-id', 'traceparent', 'tracestate',
];

export const workerUrl = z.url({ protocol: /^https?$/, error: 'must be an http:// or https:// URL' });
export const worker = z.union([
  workerUrl,
  z.strictObject({
    url: workerUrl,
    /** Share of traffic relative to the pool's other workers. */
    weight: z.number().positive().default(1),
    /** Requests this worker takes at once; past it, requests wait in the provider's queue. */
    maxConcurrent: count.optional(),
  }),
]);

/**
 * Upstream behaviour: `upstream` holds the defaults, and a provider's own `upstream` block overrides any
 * of them. Built twice from one description, with defaults and with every field optional, so an
 * override never fills in defaults over the global values.
 */
export function upstreamSettings(withDefaults: boolean) {
  const setting = <T extends z.ZodType>(type: T, fallback: z.input<T>) =>
    withDefaults ? type.default(fallback as never) : type.optional();
  const section = <T extends z.ZodRawShape>(shape: T) =>
    withDefaults ? z.strictObject(shape).prefault({} as never) : z.strictObject(shape).optional();
  return z.strictObject({
    connectTimeoutMs: setting(milliseconds, 5_000),
    firstByteTimeoutMs: setting(milliseconds, 120_000),
    idleTimeoutMs: setting(milliseconds, 60_000),
    retries: setting(z.number().int().min(0).max(10), 2),
    // Envoy's per-cluster defaults: a worker (vLLM, TGI) queues thousands itself; a cap lower than what
    // it takes is the operator's to set per worker (its maxConcurrent, e.g. vLLM's max_num_seqs).
    maxSocketsPerWorker: setting(count, 1024),
    queue: section({ size: setting(z.number().int().min(0), 1024), timeoutMs: setting(milliseconds, 10_000) }),
    /** Client request headers passed on to workers (lower case; a trailing * matches a prefix). Every other is dropped. */
    forwardHeaders: setting(z.array(headerPattern), [...DEFAULT_FORWARD_HEADERS]),
    health: section({
      enabled: setting(z.boolean(), true),
      path: setting(z.string().startsWith('/'), '/health'),
      intervalMs: setting(milliseconds, 5_000),
      timeoutMs: setting(milliseconds, 2_000),
      healthyThreshold: setting(count, 2),
      unhealthyThreshold: setting(count, 2),
    }),
    ejection: section({
      consecutiveFailures: setting(count, 3),
      baseMs: setting(milliseconds, 5_000),
      maxMs: setting(milliseconds, 300_000),
    }),
  });
}

export const provider = z.strictObject({
  workers: z.array(worker).min(1),
  /** Name of the environment variable holding the credential sent to this provider's workers. */
  apiKeyEnv: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'must be an environment variable name').optional(),
  /** The models GET /v1/models lists for this provider; absent: asked of the workers' own /v1/models. */
  models: z.array(z.string().min(1)).optional(),
  /** The endpoints its workers serve; absent: all of them. */
  endpoints: z.array(z.enum(ENDPOINTS)).min(1).optional(),
  /**
   * A request whose worker failed after it was sent but before any byte of the answer (reset, closed,
   * the worker killed) is run once more on another worker (absent: true). false: never (upstreams where a second
   * generation costs money or has effects).
   */
  replay: z.boolean().optional(),
  upstream: upstreamSettings(false).optional(),
});

/** `<provider>/<model_name>`: what an alias points at. */
export const aliasTarget = z.string().regex(/^[^/\s]+\/\S+$/, "must be '<provider>/<model_name>'");
/**
 * A public model name -> one target, or several with weights (a canary) and a fallback list tried in
 * order when the chosen target's pool has no worker to take the request.
 */
export const alias = z.union([
  aliasTarget,
  z.strictObject({
    targets: z.array(z.strictObject({ model: aliasTarget, weight: z.number().positive().default(1) })).min(1),
    fallback: z.array(aliasTarget).default([]),
  }),
]);

/** What `upstream` holds once defaults are filled in (spelt out: zod cannot infer it through upstreamSettings). */
export interface UpstreamSettings {
  connectTimeoutMs: number;
  firstByteTimeoutMs: number;
  idleTimeoutMs: number;
  retries: number;
  maxSocketsPerWorker: number;
  queue: { size: number; timeoutMs: number };
  forwardHeaders: readonly string[];
  health: { enabled: boolean; path: string; intervalMs: number; timeoutMs: number; healthyThreshold: number; unhealthyThreshold: number };
  ejection: { consecutiveFailures: number; baseMs: number; maxMs: number };
}
