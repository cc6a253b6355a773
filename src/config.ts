/**
 * Configuration: one YAML file (config/default.yaml when none is named), validated once at start
 * into a typed, frozen Config. A bad file fails with the offending field named. Relative paths are
 * resolved against the working directory.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { z } from 'zod';
import { authSection, clientTokensSection, secretScanningSection } from './config/auth';
import { consoleSection } from './config/console';
import { adminSection, limitsSection, listenSection, plainHttpSection, serverSection, shutdownSection, tlsSection, trustedProxiesSection } from './config/listeners';
import type { UpstreamSettings } from './config/parts';
import { mockWorkerSection, modelsSection, providersSection, upstreamSection } from './config/providers';
import { alertsSection, pricesSection, quotaSection, rateLimitSection, usageSection } from './config/quota';
import { dataDirSection, keyStoreSection, storeSection } from './config/store';
import { logSection, tracingSection } from './config/telemetry';

export { DEFAULT_FORWARD_HEADERS, NEVER_FORWARDED, type UpstreamSettings } from './config/parts';

export const DEFAULT_CONFIG_FILE = path.join(__dirname, '..', 'config', 'default.yaml');

/**
 * Every setting of the file, one section each from config/: exported for the test that keeps
 * docs/configuration.md complete.
 */
export const configSchema = z.strictObject({
  listen: listenSection,
  server: serverSection,
  tls: tlsSection,
  plainHttp: plainHttpSection,
  admin: adminSection,
  trustedProxies: trustedProxiesSection,
  dataDir: dataDirSection,
  store: storeSection,
  keyStore: keyStoreSection,
  auth: authSection,
  limits: limitsSection,
  upstream: upstreamSection,
  providers: providersSection,
  models: modelsSection,
  mockWorker: mockWorkerSection,
  rateLimit: rateLimitSection,
  console: consoleSection,
  prices: pricesSection,
  secretScanning: secretScanningSection,
  clientTokens: clientTokensSection,
  alerts: alertsSection,
  quota: quotaSection,
  usage: usageSection,
  shutdown: shutdownSection,
  log: logSection,
  tracing: tracingSection,
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
