/**
 * Configuration: one YAML file (config/default.yaml when none is named), validated once at start
 * into a typed, frozen Config. A bad file fails with the offending field named. Relative paths are
 * resolved against the working directory.
 */
import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { z } from 'zod';
import { alerts, alias, clientTokens, count, host, hostName, milliseconds, port, prices, provider, secretScanning, trustedProxies, upstreamSettings, workerUrl, workloadIdentity, type UpstreamSettings } from './config/parts';

export { DEFAULT_FORWARD_HEADERS, NEVER_FORWARDED, type UpstreamSettings } from './config/parts';

export const DEFAULT_CONFIG_FILE = path.join(__dirname, '..', 'config', 'default.yaml');

/** Every setting of the file: exported for the test that keeps docs/configuration.md complete. */
export const configSchema = z.strictObject({
  listen: z
    .strictObject({
      host: host.default('0.0.0.0'),
      port: port.default(8443),
      /** Connections the kernel holds until the gateway accepts them (Linux caps it at net.core.somaxconn). */
      backlog: z.number().int().min(1).max(65535).default(4096),
    })
    .prefault({}),
  server: z
    .strictObject({
      /** Serving processes on the same ports: a number, or auto (one per core). */
      processes: z
        .union([z.literal('auto'), z.number().int().min(1).max(256)])
        .default(1)
        .transform((value) => (value === 'auto' ? availableParallelism() : value)),
    })
    .prefault({}),
  tls: z.strictObject({ cert: z.string().min(1), key: z.string().min(1) }).optional(),
  plainHttp: z.strictObject({ host: host.default('0.0.0.0'), port }).optional(),
  admin: z
    .strictObject({
      host: host.default('127.0.0.1'),
      port: port.default(9464),
      /**
       * Host names (besides IP addresses and localhost) the admin listener answers to; any other Host
       * header gets 403, so a page on another site cannot read it through DNS rebinding.
       */
      allowedHosts: z.array(z.string().min(1).transform((name) => name.toLowerCase())).default([]),
      /** Guards /admin/api and the console. Absent: both are off. */
      token: z
        .string()
        .min(16, 'must be at least 16 characters')
        .regex(/^[A-Za-z0-9\-._~+/]+=*$/, 'must be letters, digits and - . _ ~ + / only (it is sent as a Bearer token; a space or # could never match)')
        .optional(),
    })
    .prefault({}),
  trustedProxies,
  dataDir: z.string().min(1).default('./data'),
  /** Starting while the key store (PostgreSQL) is away: wait for it, or give up (exit 1) after startupTimeoutMs; null: wait as long as it takes. */
  store: z.strictObject({ startupTimeoutMs: milliseconds.nullable().default(null) }).prefault({}),
  keyStore: z
    .discriminatedUnion('type', [
      // The embedded default: one SQLite file, shared by the gateway, its processes and the CLI.
      // Its path defaults to <dataDir>/chatgate.db (filled in below, where dataDir is known).
      z.strictObject({ type: z.literal('sqlite'), path: z.string().min(1).optional(), timeoutMs: milliseconds.default(1_000) }),
      // Retired: the JSON file store, rewritten whole on every change. Named here only to say how to move off it.
      z.object({ type: z.literal('file'), path: z.unknown().optional() }).transform((retired, ctx) => {
        const file = typeof retired.path === 'string' ? retired.path : './data/keys.json';
        ctx.addIssue({ code: 'custom', message: `type 'file' (a JSON file rewritten whole on every change) is no longer a key store: set keyStore to {type: sqlite} (the default; a new SQLite file beside a keys.json imports it at its first start), or import it once with 'chatgate store import ${file}'` });
        return z.NEVER;
      }),
      z.strictObject({
        type: z.literal('postgres'),
        url: z.string().regex(/^postgres(ql)?:\/\//, 'must be a postgres:// URL'),
        // Per process (a cluster's primary too), plus one connection that listens for key changes.
        poolSize: z.number().int().min(1).max(100).default(10),
        /** Every call to the store gives up after this long, measured by the gateway (a frozen server enforces nothing). */
        timeoutMs: milliseconds.default(1_000),
      }),
    ])
    .prefault({ type: 'sqlite' }),
  auth: z
    .strictObject({
      cacheSize: count.default(10_000),
      /** How long a cached key is trusted while the store's change feed is down (or the store has none). */
      cacheTtlMs: milliseconds.default(30_000),
      /** How long a cached key is trusted while the change feed is live (every change drops it at once): the safety net. */
      cacheMaxAgeMs: milliseconds.default(3_600_000),
      /** While the key store cannot be reached, a known key is still served this long after the store last confirmed it. */
      maxStaleMs: milliseconds.default(3_600_000),
      negativeCacheSize: count.default(10_000),
      negativeCacheTtlMs: milliseconds.default(5_000),
      createFirstKey: z.boolean().default(true),
      lastUsedFlushMs: milliseconds.default(10_000),
      workloadIdentity,
    })
    .prefault({}),
  limits: z
    .strictObject({
      maxBodyBytes: count.default(16 * 1024 * 1024),
      /** JSON bodies are scanned before they are parsed: arrays and objects nested deeper than this get 400 ... */
      maxJsonDepth: count.default(64),
      /** ... as do bodies with more values (array elements and object members) than this. */
      maxJsonElements: count.default(1_000_000),
      maxHeaders: count.default(100),
      headersTimeoutMs: milliseconds.default(10_000),
      requestTimeoutMs: milliseconds.default(60_000),
      keepAliveTimeoutMs: milliseconds.default(5_000),
    })
    .prefault({}),
  upstream: upstreamSettings(true).prefault({}),
  providers: z
    .record(z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]*$/, 'provider names are letters, digits, ".", "_" and "-"'), provider)
    .refine((providers) => Object.keys(providers).length > 0, 'at least one provider is required'),
  /** Public model names (`gpt-4o`) for configured models, so clients written against other names run unchanged. */
  models: z
    .strictObject({
      aliases: z.record(z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$/, 'alias names are letters, digits, ".", "_", ":", "/" and "-", at most 128'), alias).default({}),
    })
    .prefault({}),
  mockWorker: z
    .strictObject({
      host: host.default('127.0.0.1'),
      port: port.default(9100),
      latencyMs: z.number().int().min(0).default(0),
      tokensPerSecond: z.number().positive().default(50),
    })
    .optional(),
  rateLimit: z
    .strictObject({
      /** Defaults for every key; absent means unlimited. A key's own limits override them. */
      requestsPerMinute: count.optional(),
      tokensPerMinute: count.optional(),
      maxConcurrent: count.optional(),
      /** memory: this process only; redis: one limit across every replica. */
      store: z.enum(['memory', 'redis']).default('memory'),
      url: z.string().regex(/^rediss?:\/\//, 'must be a redis:// URL').optional(),
      /** When Redis cannot be reached: true admits requests unlimited, false refuses them (503). */
      failOpen: z.boolean().default(true),
      timeoutMs: milliseconds.default(250),
    })
    .prefault({})
    .refine((limits) => limits.store !== 'redis' || limits.url !== undefined, { message: 'store: redis needs url (or env CHATGATE_REDIS_URL)', path: ['url'] }),
  /** The web console on the public listener, where account owners and members manage their keys. */
  console: z
    .strictObject({
      enabled: z.boolean().default(true),
      /** The console's origin as people reach it (behind a proxy that changes the host); absent: https:// and the request's Host. */
      publicUrl: z.url({ protocol: /^https$/, error: 'must be an https:// URL' }).optional(),
      /**
       * Without publicUrl, the host names (any port) whose Host header may make the OIDC redirect
       * address, besides `localhost` and listen.host; any other Host gets 400 and no redirect.
       */
      allowedHosts: z.array(hostName).default([]),
      /**
       * Invites by email: a person an owner adds gets their one-time set-password link in their own
       * mailbox, so it never passes through the inviter. Absent: the answer carries the link.
       */
      smtp: z
        .strictObject({
          host,
          port: z.number().int().min(1).max(65535),
          /** true: TLS from the first byte (port 465); false: plain, upgraded by STARTTLS when the server offers it. */
          secure: z.boolean().default(false),
          /** The sender, `invites@example.com` or `chatgate <invites@example.com>`. */
          from: z.string().min(3).max(320).regex(/^[^\r\n]*@[^\r\n]*$/, 'must be an email address, or a name and <address>, on one line'),
          user: z.string().min(1).optional(),
          /** The environment variable holding the SMTP password (never the password itself in this file). */
          passwordEnv: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'must be an environment variable name').optional(),
        })
        .refine((smtp) => (smtp.user === undefined) === (smtp.passwordEnv === undefined), { message: 'user and passwordEnv go together (both, or neither)', path: ['passwordEnv'] })
        .optional(),
      session: z.strictObject({ idleMs: milliseconds.default(3_600_000), absoluteMs: milliseconds.default(43_200_000) }).prefault({}),
      /**
       * Password sign-ins per fixed window of windowMs: past maxFailures for one email from one client
       * address, 429 from that address until the window ends; past emailMaxFailures for one email from
       * every address together, one sign-in per windowMs / emailMaxFailures (slowed, never locked).
       */
      signIn: z
        .strictObject({ maxFailures: count.default(5), emailMaxFailures: count.default(20), windowMs: milliseconds.default(900_000) })
        .prefault({})
        .refine((signIn) => signIn.windowMs / signIn.emailMaxFailures >= 1_000, { message: 'windowMs / emailMaxFailures must be at least 1000 (a second per slowed sign-in)', path: ['emailMaxFailures'] }),
      /** Sign-in with the company's OpenID Connect provider (Keycloak, Okta, Entra ID, Google, Dex...). */
      oidc: z
        .strictObject({
          issuer: z.url().refine((url) => new URL(url).protocol === 'https:', {
            message:
              'must be an https:// URL: OpenID Connect needs HTTPS to the identity provider, so with http:// every sign-in would fail. ' +
              'For a provider whose certificate a private CA signed, keep https:// and trust that CA: start chatgate with NODE_EXTRA_CA_CERTS=/path/ca.pem',
          }),
          clientId: z.string().min(1),
          /** The environment variable holding the client secret (never the secret itself in this file). */
          clientSecretEnv: z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, 'must be an environment variable name'),
          scopes: z.array(z.string().min(1)).default(['openid', 'email', 'profile']),
          /** The ID token claim the mappings match: a string or a list of strings (e.g. groups). */
          claim: z.string().min(1).default('groups'),
          /** A claim value -> an account (by name; made if missing) and a role there, or the platform admin role. */
          mappings: z
            .array(
              z.strictObject({
                value: z.string().min(1),
                account: z.string().min(1).optional(),
                role: z.enum(['owner', 'member']).default('member'),
                admin: z.boolean().default(false),
              }),
            )
            .default([]),
        })
        .optional(),
    })
    .prefault({}),
  /** Chargeback prices per model: each answer's cost, in usage rows. */
  prices,
  /** Leak reports that revoke (GitHub's secret scanning partner reports). */
  secretScanning,
  clientTokens,
  /** Alerts at thresholds of quotas and budgets (accounts/alerts.ts). */
  alerts,
  /** Token quotas of accounts and keys: counters every replica shares, synced this often. */
  quota: z
    .strictObject({
      syncMs: milliseconds.default(500),
      /** Reserved at admission for the output of a request that sets no max_tokens (or kin), under a quota. */
      defaultReserveTokens: z.number().int().min(0).max(100_000_000).default(1024),
      /** A request whose output bound does not fit what is left is served with its bound lowered to fit, instead of refused. */
      capMaxTokens: z.boolean().default(false),
    })
    .prefault({}),
  /** What an answer used, as the worker reports it. */
  usage: z
    .strictObject({
      /**
       * A client that leaves during an answer: its rest is read (not relayed) this long at most for the
       * worker's usage, then the worker's connection is closed and the estimate charged; 0: at once.
       */
      drainAfterDisconnectMs: z.number().int().min(0).max(600_000).default(5_000),
      /** Days of usage kept (daily rows and the ledger), today not counted; older days are deleted. At least 62: a month's quota starts from its usage. */
      retentionDays: z.number().int().min(62).max(3650).default(400),
      /**
       * The ledger's rows a key may make in a UTC day, one per model and end user, in each process: a
       * client naming a new end user on every request would make a row a request. Its further pairs
       * that day are counted under model and end user `*`.
       */
      maxPairsPerKeyDay: z.number().int().min(1).max(1_000_000).default(10_000),
    })
    .prefault({}),
  shutdown: z.strictObject({ drainTimeoutMs: milliseconds.default(30_000) }).prefault({}),
  log: z
    .strictObject({
      level: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
      /** stdout, stderr, or a file path (appended to). */
      destination: z.string().min(1).default('stdout'),
      /** One line per request at level info. */
      access: z.boolean().default(true),
    })
    .prefault({}),
  tracing: z
    .strictObject({
      /** OTLP/HTTP traces endpoint (…/v1/traces); absent: no spans are exported. */
      otlpEndpoint: workerUrl.optional(),
      serviceName: z.string().min(1).default('chatgate'),
    })
    .prefault({}),
}).superRefine((config, ctx) => {
  // An alias must point at configured providers, and must not hide a provider's models.
  for (const [name, alias] of Object.entries(config.models.aliases)) {
    const at = ['models', 'aliases', name];
    const prefix = name.includes('/') ? name.slice(0, name.indexOf('/')) : undefined;
    if (prefix !== undefined && prefix in config.providers) {
      ctx.addIssue({ code: 'custom', path: at, message: `an alias must not start with a provider's name ('${prefix}/'): it would hide that provider's models` });
    }
    const targets = typeof alias === 'string' ? [{ model: alias, at }] : [
      ...alias.targets.map((target, i) => ({ model: target.model, at: [...at, 'targets', i, 'model'] })),
      ...alias.fallback.map((model, i) => ({ model, at: [...at, 'fallback', i] })),
    ];
    for (const target of targets) {
      const provider = target.model.slice(0, target.model.indexOf('/'));
      if (!(provider in config.providers)) ctx.addIssue({ code: 'custom', path: target.at, message: `names provider '${provider}', which is not configured` });
    }
  }
}).transform((config) => {
  const { keyStore } = config;
  if (keyStore.type !== 'sqlite') return { ...config, keyStore };
  return { ...config, keyStore: { ...keyStore, path: keyStore.path ?? `${config.dataDir.replace(/\/+$/, '')}/chatgate.db` } };
});

type Overrides<T> = { [K in keyof T]?: T[K] extends readonly unknown[] ? T[K] : T[K] extends object ? Partial<T[K]> : T[K] };

type Parsed = z.output<typeof configSchema>;
export type ProviderConfig = Omit<Parsed['providers'][string], 'upstream'> & { upstream?: Overrides<UpstreamSettings> };
export type Config = Omit<Parsed, 'upstream' | 'providers'> & {
  upstream: UpstreamSettings;
  providers: Record<string, ProviderConfig>;
};

export class ConfigError extends Error {
  override name = 'ConfigError';
}

/** The file to load: --config, else CHATGATE_CONFIG, else the embedded defaults. */
export function configFileFrom(flag: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  return flag ?? env.CHATGATE_CONFIG ?? DEFAULT_CONFIG_FILE;
}

export function loadConfig(file: string, env: NodeJS.ProcessEnv = process.env): Config {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError(`config ${file}: cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
  let document: unknown;
  try {
    // Without prettyErrors the message does not quote the file's lines: one may hold a password or token.
    document = YAML.parse(text, { prettyErrors: false });
  } catch (err) {
    const at = (err as { pos?: [number, number] }).pos?.[0];
    const line = at === undefined ? '' : ` (line ${text.slice(0, at).split('\n').length})`;
    throw new ConfigError(`config ${file}: not valid YAML${line}: ${(err as Error).message}`);
  }
  return parseConfig(withEnvironment(document ?? {}, env), file);
}

/**
 * Settings the environment may give, so that secrets need not sit in the file:
 * CHATGATE_KEYSTORE_URL (a postgres:// URL: the shared key store), CHATGATE_REDIS_URL (shared rate
 * limits) and CHATGATE_ADMIN_TOKEN.
 */
function withEnvironment(document: unknown, env: NodeJS.ProcessEnv): unknown {
  if (typeof document !== 'object' || document === null || Array.isArray(document)) return document;
  const merged = { ...(document as Record<string, unknown>) };
  if (env.CHATGATE_KEYSTORE_URL) {
    const fromFile = merged.keyStore as { type?: unknown } | undefined;
    merged.keyStore = { ...(fromFile?.type === 'postgres' ? fromFile : {}), type: 'postgres', url: env.CHATGATE_KEYSTORE_URL };
  }
  if (env.CHATGATE_REDIS_URL) merged.rateLimit = { ...(merged.rateLimit as object | undefined), store: 'redis', url: env.CHATGATE_REDIS_URL };
  if (env.CHATGATE_ADMIN_TOKEN) merged.admin = { ...(merged.admin as object | undefined), token: env.CHATGATE_ADMIN_TOKEN };
  return merged;
}

export function parseConfig(document: unknown, source = 'config'): Config {
  const result = configSchema.safeParse(document);
  if (!result.success) {
    const problems = result.error.issues.map((issue) => `  ${fieldPath(issue.path) || '(top level)'}: ${issue.message}`);
    throw new ConfigError(`config ${source} is not valid:\n${problems.join('\n')}`);
  }
  return deepFreeze(result.data as Config);
}

function fieldPath(parts: readonly PropertyKey[]): string {
  return parts.map((part, i) => (typeof part === 'number' ? `[${part}]` : `${i === 0 ? '' : '.'}${String(part)}`)).join('');
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}
