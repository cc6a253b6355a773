/**
 * Start-up parts both the single process (main.ts) and the cluster primary (cluster.ts) use: the
 * once-per-deployment preparation, config reload, and the banner that tells a person how to use it.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { Auditor } from '../accounts/audit';
import { Accounts, passwordPath } from '../accounts/service';
import { defaultAccountId } from '../store/default-account';
import { Sessions } from '../accounts/sessions';
import { openKeyStore } from '../store/open';
import type { GuardedKeyStore } from '../store/guarded';
import { loadConfig, type Config } from '../config';
import { fingerprintOf, loadOrCreateDevCertificate } from './dev-certificate';
import type { Logger } from '../telemetry/log';
import { startMockWorkerProcess, type MockWorkerProcess } from '../mock-worker/process';
import type { Listeners, TlsMaterial } from './listeners';
import { StoreWait } from './store-wait';

export interface Gateway {
  readonly config: Config;
  readonly listeners: Listeners;
  /** SIGHUP: re-read the config file; true when the new one took effect, false when it was refused. */
  reload(): Promise<boolean>;
  shutdown(): Promise<void>;
}

export type Tls = TlsMaterial & { fingerprint: string; certFile: string };

/** The new config, or undefined (logged) when it does not load: the running one is kept. */
export function reloadConfig(configFile: string, running: Config, log: Logger): Config | undefined {
  let next: Config;
  try {
    next = loadConfig(configFile);
  } catch (err) {
    log.error({ err: (err as Error).message }, 'config reload refused: the running config is kept');
    return undefined;
  }
  const changed = (pick: (config: Config) => unknown) => JSON.stringify(pick(next)) !== JSON.stringify(pick(running));
  const restartOnly = [
    ...RESTART_ONLY_SETTINGS.filter((name) => changed((config) => config[name])),
    ...RESTART_ONLY_RATE_LIMIT_SETTINGS.filter((name) => changed((config) => config.rateLimit[name])).map((name) => `rateLimit.${name}`),
    ...RESTART_ONLY_USAGE_SETTINGS.filter((name) => changed((config) => config.usage[name])).map((name) => `usage.${name}`),
  ];
  if (restartOnly.length > 0) log.warn({ settings: restartOnly }, 'these settings change only on restart; the running values are kept');
  const kept = Object.fromEntries(RESTART_ONLY_SETTINGS.map((name) => [name, running[name]]));
  const keptRateLimit = Object.fromEntries(RESTART_ONLY_RATE_LIMIT_SETTINGS.map((name) => [name, running.rateLimit[name]]));
  const keptUsage = Object.fromEntries(RESTART_ONLY_USAGE_SETTINGS.map((name) => [name, running.usage[name]]));
  return { ...next, ...kept, rateLimit: { ...next.rateLimit, ...keptRateLimit }, usage: { ...next.usage, ...keptUsage } };
}

/** What a reload leaves alone: listeners, TLS, stores, process model. Providers, upstream settings and limits are reloaded. */
const RESTART_ONLY_SETTINGS = ['listen', 'tls', 'plainHttp', 'admin', 'dataDir', 'store', 'keyStore', 'server', 'mockWorker', 'log', 'limits', 'trustedProxies', 'auth', 'tracing', 'shutdown', 'console', 'quota'] as const satisfies ReadonlyArray<keyof Config>;
/** The rate-limit store is opened once (its counters carry over a reload); the limits themselves reload. */
const RESTART_ONLY_RATE_LIMIT_SETTINGS = ['store', 'url', 'timeoutMs'] as const satisfies ReadonlyArray<keyof Config['rateLimit']>;
/** Usage recording outlives a reload (what it holds would be lost): its retention and cap with it. */
const RESTART_ONLY_USAGE_SETTINGS = ['retentionDays', 'maxPairsPerKeyDay'] as const satisfies ReadonlyArray<keyof Config['usage']>;

/** What exists once per deployment, made by the single or primary process before serving starts. */
export async function prepareOnce(config: Config, log: Logger) {
  const tls = await tlsMaterial(config);
  // A PostgreSQL away at start is waited for (store-wait.ts), each step tried again until it answers.
  const wait = new StoreWait(config, log, true);
  const keyStore = await wait.until('opening the key store', () => openStore(config, log));
  // Made through the accounts service like any other key: audited `key.created` by `first-start`.
  // Only on an empty store, asked with one `limit 1` read: listing a million keys to count them
  // would take longer than the store's deadline, and the start would fail.
  const firstKey = await wait.until('checking for keys', async () =>
    config.auth.createFirstKey && !(await keyStore.hasKeys())
      ? await accountParts(config, log, keyStore).accounts.createKey(await defaultAccountId(keyStore), { name: 'first key' }, { kind: 'first-start' }, undefined)
      : undefined,
  );
  const firstOwner = config.console.enabled ? await wait.until('making the first owner', () => firstOwnerLink(config, log, keyStore)) : undefined;
  await wait.done();
  const mockWorker: MockWorkerProcess | undefined = config.mockWorker ? await startMockWorkerProcess(config.mockWorker) : undefined;
  return { tls, keyStore, firstKey, firstOwner, mockWorker };
}

/** A `server.processes` sibling's store: waited for as the primary's is, without the admin stand-in (the primary owns that listener). */
export async function openWorkerStore(config: Config, log: Logger): Promise<GuardedKeyStore> {
  const wait = new StoreWait(config, log, false);
  const store = await wait.until('opening the key store', () => openStore(config, log));
  await wait.done();
  return store;
}

/** The person a fresh install signs in to the console as: a platform admin and owner of `default`. */
export const FIRST_OWNER_EMAIL = 'admin@localhost';

/** What the banner says about the first owner: their one-time link (this once), or how to make one. */
export type FirstOwner = { email: string; token: string } | { email: string; needsLink: true };

/** The counter that makes "this start made the first owner" true of one start per store, replicas or not. */
const FIRST_OWNER_MARK = 'first-owner-link';

/**
 * On a store whose `default` account has no members yet (a first start), the first owner is made: a
 * platform admin (audited `admin.granted`, as everything here is, by `first-start`) and owner of
 * `default`. The start that made them prints a one-time link to set the password, once per store
 * (a store counter decides, so two replicas starting at once print one link, not two). Later starts
 * print no link, which would sit in logs for a week, but while the first owner has no password they
 * say how to make one: `chatgate members password-link`.
 */
export async function firstOwnerLink(config: Config, log: Logger, store: GuardedKeyStore, now: () => Date = () => new Date()): Promise<FirstOwner | undefined> {
  const { accounts } = accountParts(config, log, store);
  const starter = { kind: 'first-start' } as const;
  const defaultId = await defaultAccountId(store);
  let owner = await store.getPerson(FIRST_OWNER_EMAIL);
  // A `default` with members but no first owner: someone runs it already, as they chose.
  if (!owner && (await store.listMembers(defaultId)).length === 0) {
    owner = (await accounts.addMember(defaultId, { email: FIRST_OWNER_EMAIL, role: 'owner' }, starter, undefined)).person;
    owner = await accounts.setAdmin(owner.email, true, starter, undefined);
    const [made] = await store.bumpCounters([{ name: FIRST_OWNER_MARK, expiresAt: new Date(now().getTime() + 100 * 365 * 24 * 3600_000) }], now());
    if (made === 1 && owner.passwordHash === null) return { email: owner.email, token: await accounts.passwordLink(owner.email, defaultId, starter, undefined) };
  }
  owner ??= await store.getPerson(FIRST_OWNER_EMAIL); // another replica, starting at the same time, may have made them
  if (!owner) return undefined;
  return owner.passwordHash === null ? { email: owner.email, needsLink: true } : undefined;
}

/** What acts on accounts, members, keys and sessions over the store, each change audited. */
export function accountParts(config: Config, log: Logger, store: GuardedKeyStore) {
  const auditor = new Auditor(store, log);
  const accounts = new Accounts(store, auditor);
  const sessions = new Sessions(store, auditor, { ...config.console.session, signIn: config.console.signIn }, log);
  return { auditor, accounts, sessions };
}

/** The key store, its outage and recovery each logged once (every call has its deadline: keyStore.timeoutMs). */
export function openStore(config: Config, log: Logger): Promise<GuardedKeyStore> {
  return openKeyStore(config, {
    listener: (state, error) => log.warn({ state, err: error?.message }, `key store change notifications ${state}`),
    down: (cause) =>
      log.error(
        { err: (cause as Error)?.message ?? String(cause), maxStaleMs: config.auth.maxStaleMs },
        'key store unreachable: known keys are served from the cache, unknown keys refused (503), until it answers again',
      ),
    up: () => log.info('key store reachable again'),
    imported: (file, counts) => log.warn({ file, imported: counts }, 'the new SQLite key store imported the file store found beside it; that file is no longer read'),
    checkpointsFailed: (err) => log.warn({ err: (err as Error)?.message ?? String(err) }, 'a SQLite thread (checkpoints, usage writes) failed: its work runs on the event loop again'),
  }, { serving: true });
}

export async function tlsMaterial(config: Config): Promise<Tls> {
  if (config.tls) {
    const cert = readFileSync(config.tls.cert, 'utf8');
    return { cert, key: readFileSync(config.tls.key, 'utf8'), fingerprint: fingerprintOf(cert), certFile: config.tls.cert };
  }
  return loadOrCreateDevCertificate(path.resolve(config.dataDir, 'tls'));
}

export interface FirstStart {
  firstKey?: string | undefined;
  firstOwner?: FirstOwner | undefined;
}

export function banner(config: Config, publicPort: number, admin: { address: string; port: number }, tls: { fingerprint: string; certFile: string }, { firstKey, firstOwner }: FirstStart = {}): string {
  const host = ['0.0.0.0', '::'].includes(config.listen.host) ? 'localhost' : config.listen.host;
  const base = `https://${host.includes(':') ? `[${host}]` : host}:${publicPort}`;
  const lines = [
    '',
    `chatgate is serving ${base}/v1/chat/completions`,
    `  TLS certificate ${tls.certFile}`,
    `  SHA-256 fingerprint ${tls.fingerprint}`,
    `  metrics and health on http://${admin.address}:${admin.port} (/metrics, /healthz, /readyz)`,
    config.admin.token ? `  admin API on http://${admin.address}:${admin.port}/admin/api/ (Bearer <admin token>)` : '  admin API off (no admin.token)',
    config.console.enabled ? `  console on ${base}/console/` : '  console off (console.enabled: false)',
  ];
  if (config.server.processes > 1) lines.push(`  ${config.server.processes} serving processes`);
  if (firstKey) {
    const model = config.providers.mock ? 'mock/echo' : `${Object.keys(config.providers)[0]}/<model>`;
    lines.push(
      '',
      'The key store was empty, so one key was created. It is shown this once; the store keeps only its digest:',
      `  ${firstKey}`,
      '',
      'Try it:',
      `  curl -k ${base}/v1/chat/completions -H "Authorization: Bearer ${firstKey}" -H "Content-Type: application/json" -d '{"model":"${model}","messages":[{"role":"user","content":"Hello!"}]}'`,
    );
  }
  if (firstOwner && 'token' in firstOwner) {
    lines.push(
      '',
      `Sign in to the console as ${firstOwner.email}, a platform admin and the owner of the account 'default'.`,
      'Set the password with this one-time link (printed this once; it works once, for a week):',
      `  ${base}${passwordPath(firstOwner.token)}`,
    );
  } else if (firstOwner) {
    lines.push(
      '',
      `${firstOwner.email}, the console's first owner, has no password yet. Make a one-time link to set it (it voids older ones):`,
      `  chatgate members password-link --email ${firstOwner.email}`,
    );
  }
  return `${lines.join('\n')}\n\n`;
}
