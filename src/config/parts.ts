/**
 * Configuration's building blocks: the value shapes every section uses (ports, hosts, durations,
 * trusted proxies), and the providers' part: workers, upstream settings (global defaults and a
 * provider's overrides, from one description), which client headers may reach a worker, and model
 * aliases. src/config.ts puts them into the whole schema.
 */
import { createPublicKey } from 'node:crypto';
import { isIP } from 'node:net';
import proxyAddr from 'proxy-addr';
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

export const trustedProxies = z
  .array(z.string().min(1))
  .default([])
  .superRefine((entries, ctx) => {
    for (const [index, entry] of entries.entries()) {
      try {
        proxyAddr.compile([entry]);
      } catch {
        ctx.addIssue({ code: 'custom', path: [index], message: `'${entry}' is not an IP address, a CIDR range or loopback/linklocal/uniquelocal` });
      }
    }
  });

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

/** A price per million tokens: a chargeback rate in the operator's currency, never negative. */
const perMillion = z.number().min(0).max(1_000_000);

/**
 * `prices`: what a million tokens of a model cost, per `<provider>/<model_name>` glob (the first
 * that matches, in the order written), in one currency: the operator's own table, versioned with
 * the config, never fetched.
 */
export const prices = z
  .strictObject({
    currency: z.string().regex(/^[A-Z]{3}$/, 'must be a three-letter currency code such as USD or EUR').default('USD'),
    models: z
      .record(
        z.string().regex(/^[^\s]+$/, "must be a '<provider>/<model_name>' glob such as 'vllm/*'"),
        z.strictObject({ inputPerMillion: perMillion, outputPerMillion: perMillion, cachedInputPerMillion: perMillion.optional() }),
      )
      .default({}),
    /**
     * A model no glob names: served at no cost (`allow`), or refused 403 model_not_priced (`refuse`).
     * Unset: served at no cost, except to a key that has a budget (of its own or its account's).
     */
    unpricedModels: z.enum(['allow', 'refuse']).optional(),
  })
  .prefault({});

/** A PEM public key, refused at start when it is not one (it verifies leak reports). */
const publicKeyPem = z.string().refine(
  (pem) => {
    if (!pem.trimStart().startsWith('-----BEGIN PUBLIC KEY-----')) return false; // a private key pasted here is not taken
    try {
      const key = createPublicKey(pem);
      return key.asymmetricKeyType === 'ec' && key.asymmetricKeyDetails?.namedCurve === 'prime256v1';
    } catch {
      return false;
    }
  },
  { message: 'must be a PEM public key (-----BEGIN PUBLIC KEY-----) on the P-256 curve, as GitHub signs with ECDSA P-256' },
);

/**
 * `secretScanning`: leak reports that revoke. `github.publicKeys` are the keys GitHub's secret
 * scanning signs its reports with; `github.keysUrl`, where GitHub publishes them
 * (https://api.github.com/meta/public_keys/secret_scanning), fetched and kept current. With either,
 * POST /secret-scanning/github takes reports signed by one of them.
 */
export const secretScanning = z
  .strictObject({
    github: z
      .strictObject({
        publicKeys: z
          .array(z.strictObject({ identifier: z.string().min(1).max(200), key: publicKeyPem }))
          .refine((keys) => new Set(keys.map((k) => k.identifier)).size === keys.length, { message: 'each identifier may be listed once' })
          .default([]),
        keysUrl: z
          .url({ protocol: /^https$/, error: 'must be an https:// URL, such as https://api.github.com/meta/public_keys/secret_scanning' })
          .optional(),
      })
      .prefault({}),
  })
  .prefault({});

/** An origin as a browser sends it: scheme, host and any port, nothing after. */
const origin = z.string().refine((value) => {
  try {
    return /^https?:$/.test(new URL(value).protocol) && new URL(value).origin === value;
  } catch {
    return false;
  }
}, 'must be an origin as browsers send it: http(s)://host[:port], lower case, no path or trailing slash');

/**
 * `clientTokens`: short-lived tokens a key mints for code on people's devices (POST /v1/client-tokens,
 * auth/client-tokens.ts). `allowedOrigins`: the web pages (origins) whose scripts may call the model
 * endpoints (CORS); none by default. `enabled: false` refuses `cgt_` tokens and the mint.
 */
export const clientTokens = z.strictObject({ enabled: z.boolean().default(true), allowedOrigins: z.array(origin).max(100).default([]) }).prefault({});

/** A rule's limit: a whole number (0: no limit) or null (the configured default), as a key's. */
const ruleLimit = z.number().int().min(0).max(2_147_483_647).nullable().default(null);

/**
 * `auth.workloadIdentity`: issuers whose JWTs authenticate as an account (auth/workload-identity.ts).
 * `subject` is a glob (`*` any run of characters, `?` one) over the token's `sub`, whose part before
 * its first wildcard names at least two levels (two `:` or `/`): with a shared issuer (GitHub's,
 * GitLab's), `repo:*` or `repo:acme*` would let in every repository, or another owner's whose name
 * starts alike. `claims`: other claims the token must carry with exactly these values
 * (`repository_owner_id`, which a renamed or re-registered owner cannot take over).
 */
const subjectGlob = z
  .string()
  .min(1)
  .max(255)
  .refine((glob) => {
    const wildcard = glob.search(/[*?]/);
    return wildcard === -1 || (glob.slice(0, wildcard).match(/[:/]/g) ?? []).length >= 2;
  }, "must name whose workloads: before its first * or ?, at least two levels (two ':' or '/'), as 'repo:my-org/*' or 'system:serviceaccount:ci:*'");

export const workloadIdentity = z
  .array(
    z.strictObject({
      issuer: z
        .url({ protocol: /^https$/, error: "must be an https:// URL, exactly as the tokens' iss claim" })
        .refine((value) => !value.includes('?') && !value.includes('#'), 'must have no query or fragment (OpenID Connect Discovery)'),
      audience: z.string().min(1).max(512),
      subject: subjectGlob,
      account: z.string().min(1).max(200),
      claims: z.record(z.string().min(1).max(100), z.union([z.string().max(1000), z.number(), z.boolean()])).default({}),
      models: z.array(z.string().min(1).max(256)).max(100).default([]),
      rateLimit: z.strictObject({ requestsPerMinute: ruleLimit, tokensPerMinute: ruleLimit, maxConcurrent: ruleLimit }).prefault({}),
    }),
  )
  .max(100)
  .default([]);

/**
 * Alerts at thresholds of quotas and budgets: one POST to `webhookUrl` (JSON; its `text` reads well in
 * Slack or Teams) per threshold per period of a key's or an account's limit, from one replica.
 */
export const alerts = z
  .strictObject({
    /** Where alerts are POSTed; absent: they are kept and shown in the console only. A secret: never logged. */
    webhookUrl: z.url({ protocol: /^https?$/, error: 'must be an http:// or https:// URL' }).optional(),
    /** Shares of a limit, ascending, each above 0 and at most 1. */
    thresholds: z
      .array(z.number().gt(0).max(1))
      .min(1)
      .max(10)
      .refine((list) => list.every((value, i) => i === 0 || value > list[i - 1]!), { message: 'must be ascending, each once' })
      .default([0.5, 0.8, 1]),
    /** An account's own webhook (its owners set it) may be at a loopback or private address: for gateways whose chat tools are inside. */
    allowPrivateAccountWebhooks: z.boolean().default(false),
    /** Each POST's deadline. */
    timeoutMs: z.number().int().min(100).max(60_000).default(5000),
    /** How often each replica looks for keys that expire within a week (a key.expiring alert each). */
    expiringCheckMs: z.number().int().min(1000).max(86_400_000).default(600_000),
  })
  .prefault({});
