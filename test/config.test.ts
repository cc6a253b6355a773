import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { ConfigError, DEFAULT_CONFIG_FILE, configFileFrom, loadConfig, parseConfig } from '../src/config';

const minimal = { providers: { a: { workers: ['http://x:1'] } } };
/** No CHATGATE_* variables: the tests must not depend on the environment they run in. */
const noEnv = {};

function problems(document: unknown): string {
  try {
    parseConfig(document);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as Error).message;
  }
  throw new Error('expected the config to be refused');
}

function unfrozen(value: unknown, at = 'config'): string[] {
  if (typeof value !== 'object' || value === null) return [];
  const own = Object.isFrozen(value) ? [] : [at];
  return own.concat(...Object.entries(value).map(([key, child]) => unfrozen(child, `${at}.${key}`)));
}

test('the embedded defaults are the documented ones', () => {
  const config = loadConfig(DEFAULT_CONFIG_FILE, noEnv);
  expect(config.listen).toEqual({ host: '0.0.0.0', port: 8443, backlog: 4096 });
  expect(config.admin).toEqual({ host: '127.0.0.1', port: 9464, allowedHosts: [] });
  expect(config.keyStore).toEqual({ type: 'sqlite', path: './data/chatgate.db', timeoutMs: 1000 });
  // A config that names no key store gets the same: SQLite, not the deprecated JSON file.
  expect(parseConfig({ providers: { mock: { workers: ['http://127.0.0.1:9100'] } } }).keyStore).toEqual({ type: 'sqlite', path: './data/chatgate.db', timeoutMs: 1000 });
  expect(Object.keys(config.providers)).toEqual(['mock']);
  expect(config.providers.mock!.workers).toEqual(['http://127.0.0.1:9100']);
  // The database follows dataDir unless keyStore names its own path.
  const workers = { mock: { workers: ['http://127.0.0.1:9100'] } };
  expect(parseConfig({ providers: workers, dataDir: '/var/lib/chatgate/' }).keyStore).toMatchObject({ type: 'sqlite', path: '/var/lib/chatgate/chatgate.db' });
  expect(parseConfig({ providers: workers, dataDir: '/var/lib/chatgate', keyStore: { type: 'sqlite', path: '/srv/keys.db' } }).keyStore).toMatchObject({ path: '/srv/keys.db' });
  expect(config.limits.maxBodyBytes).toBe(16 * 1024 * 1024);
  expect(config.trustedProxies).toEqual([]);
  expect(config.tls).toBeUndefined();
  expect(config.plainHttp).toBeUndefined();
});

test('the config is frozen all the way down', () => {
  const config = loadConfig(DEFAULT_CONFIG_FILE, noEnv);
  expect(unfrozen(config)).toEqual([]);
  expect(unfrozen(parseConfig({ providers: { a: { workers: [{ url: 'http://x:1', weight: 2 }], upstream: { health: { path: '/ping' } } } } }))).toEqual([]);
});

test('a file that leaves settings out gets exactly the values default.yaml documents', () => {
  const documented = loadConfig(DEFAULT_CONFIG_FILE, noEnv);
  const filled = parseConfig(minimal);
  const { providers: _p1, mockWorker: _m1, ...documentedRest } = documented;
  const { providers: _p2, mockWorker: _m2, ...filledRest } = filled;
  expect(filledRest).toStrictEqual(documentedRest);
  expect(filled.providers).toStrictEqual({ a: { workers: ['http://x:1'] } });
  expect(filled.mockWorker).toBeUndefined();
});

test('default.yaml writes out every setting that has a default (commented-out ones excepted)', () => {
  const documented = YAML.parse(readFileSync(DEFAULT_CONFIG_FILE, 'utf8')) as Record<string, unknown>;
  const filled = parseConfig(minimal) as unknown as Record<string, unknown>;
  for (const section of Object.keys(filled)) {
    if (section === 'providers') continue;
    expect([section, section in documented]).toEqual([section, true]);
  }
});

test('a provider override changes only what it names', () => {
  const config = parseConfig({ upstream: { retries: 5 }, providers: { a: { workers: ['http://x:1'], upstream: { health: { path: '/ping' } } } } });
  expect(config.upstream.retries).toBe(5);
  expect(config.upstream.health.path).toBe('/health');
  expect(config.providers.a!.upstream).toEqual({ health: { path: '/ping' } });
});

test('a worker may be a URL or { url, weight, maxConcurrent }, weight 1 by default', () => {
  const config = parseConfig({ providers: { a: { workers: ['https://x:1', { url: 'http://y:2' }, { url: 'http://z:3', weight: 3, maxConcurrent: 8 }] } } });
  expect(config.providers.a!.workers).toEqual(['https://x:1', { url: 'http://y:2', weight: 1 }, { url: 'http://z:3', weight: 3, maxConcurrent: 8 }]);
});

test.each([
  ['a port out of range', { ...minimal, listen: { port: 70000 } }, 'listen.port'],
  ['a backlog of none', { ...minimal, listen: { backlog: 0 } }, 'listen.backlog'],
  ['a port that is not a number', { ...minimal, admin: { port: '9464' } }, 'admin.port'],
  ['a worker that is not an http URL', { providers: { mock: { workers: ['ftp://x'] } } }, 'providers.mock.workers[0]'],
  ['a second worker that is no URL', { providers: { mock: { workers: ['http://x:1', 'x'] } } }, 'providers.mock.workers[1]'],
  ['a provider without workers', { providers: { mock: { workers: [] } } }, 'providers.mock.workers'],
  ['a misspelt top-level key', { ...minimal, lsten: {} }, 'lsten'],
  ['a misspelt nested key', { ...minimal, upstream: { health: { intervalMS: 5 } } }, 'intervalMS'],
  ['no providers', { providers: {} }, 'at least one provider'],
  ['providers missing', {}, 'providers'],
  ['a trusted proxy that is no address', { ...minimal, trustedProxies: ['not-an-ip'] }, 'trustedProxies[0]'],
  ['a negative timeout', { ...minimal, upstream: { connectTimeoutMs: -1 } }, 'upstream.connectTimeoutMs'],
  ['a bad provider name', { providers: { 'bad name': { workers: ['http://x:1'] } } }, 'bad name'],
  ['an unknown key store type', { ...minimal, keyStore: { type: 'mysql' } }, 'keyStore'],
  ['a short admin token', { ...minimal, admin: { token: 'short' } }, 'admin.token'],
  ['an admin token no Bearer header can carry', { ...minimal, admin: { token: 'correct horse battery staple' } }, 'admin.token'],
  ['redis limits without a url', { ...minimal, rateLimit: { store: 'redis' } }, 'rateLimit.url'],
  ['a log level that does not exist', { ...minimal, log: { level: 'verbose' } }, 'log.level'],
  ['an alias whose target names no configured provider', { ...minimal, models: { aliases: { fast: 'b/m' } } }, "models.aliases.fast: names provider 'b'"],
  ['an alias target without a model name', { ...minimal, models: { aliases: { fast: 'a' } } }, 'models.aliases.fast'],
  ['a fallback naming no configured provider', { ...minimal, models: { aliases: { fast: { targets: [{ model: 'a/m' }], fallback: ['c/m'] } } } }, 'models.aliases.fast.fallback[0]'],
  ['an alias without targets', { ...minimal, models: { aliases: { fast: { targets: [] } } } }, 'models.aliases.fast'],
  ['an alias weight of 0', { ...minimal, models: { aliases: { fast: { targets: [{ model: 'a/m', weight: 0 }] } } } }, 'models.aliases.fast.targets[0].weight'],
  ["an alias that would hide a provider's models", { ...minimal, models: { aliases: { 'a/m': 'a/n' } } }, "must not start with a provider's name"],
  ['an endpoint that does not exist', { providers: { a: { workers: ['http://x:1'], endpoints: ['images'] } } }, 'providers.a.endpoints[0]'],
])('%s is refused, naming the field', (_name, document, named) => {
  expect(problems(document)).toContain(named);
});

test('every problem is listed, not just the first', () => {
  const message = problems({ ...minimal, listen: { port: -1 }, admin: { port: 1e6 } });
  expect(message).toContain('listen.port');
  expect(message).toContain('admin.port');
});

test('the environment gives the secrets: key store URL, Redis URL, admin token', () => {
  const config = loadConfig(DEFAULT_CONFIG_FILE, {
    CHATGATE_KEYSTORE_URL: 'postgres://u:p@db/chatgate',
    CHATGATE_REDIS_URL: 'redis://cache:6379',
    CHATGATE_ADMIN_TOKEN: 'a-token-of-sixteen-chars',
  });
  expect(config.keyStore).toEqual({ type: 'postgres', url: 'postgres://u:p@db/chatgate', poolSize: 10, timeoutMs: 1000 });
  expect(config.rateLimit).toMatchObject({ store: 'redis', url: 'redis://cache:6379' });
  expect(config.admin).toEqual({ host: '127.0.0.1', port: 9464, allowedHosts: [], token: 'a-token-of-sixteen-chars' });
});

test("the key store URL from the environment keeps the file's PostgreSQL settings, and replaces a file store", () => {
  const url = 'postgres://u:p@db/chatgate';
  const dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-config-env-'));
  try {
    const file = path.join(dir, 'c.yaml');
    writeFileSync(file, YAML.stringify({ ...minimal, keyStore: { type: 'postgres', url: 'postgres://old/db', poolSize: 3 } }));
    expect(loadConfig(file, {}).keyStore).toEqual({ type: 'postgres', url: 'postgres://old/db', poolSize: 3, timeoutMs: 1000 });
    expect(loadConfig(file, { CHATGATE_KEYSTORE_URL: url }).keyStore).toEqual({ type: 'postgres', url, poolSize: 3, timeoutMs: 1000 });
    writeFileSync(file, YAML.stringify({ ...minimal, keyStore: { type: 'file', path: './keys.json' } }));
    expect(loadConfig(file, { CHATGATE_KEYSTORE_URL: url }).keyStore).toEqual({ type: 'postgres', url, poolSize: 10, timeoutMs: 1000 });
    // Without the URL, the retired file store is refused, saying how to move off it.
    expect(() => loadConfig(file, {})).toThrow(/keyStore: type 'file' .* is no longer a key store: .*'chatgate store import \.\/keys\.json'/);
    writeFileSync(file, YAML.stringify({ ...minimal, keyStore: { type: 'sqlite', path: './store.db' } }));
    expect(loadConfig(file, { CHATGATE_KEYSTORE_URL: url }).keyStore).toEqual({ type: 'postgres', url, poolSize: 10, timeoutMs: 1000 });
    expect(loadConfig(file, {}).keyStore).toEqual({ type: 'sqlite', path: './store.db', timeoutMs: 1000 });
    writeFileSync(file, YAML.stringify({ ...minimal, keyStore: { type: 'postgres', url, poolSize: 0 } }));
    expect(() => loadConfig(file, {})).toThrow(/keyStore\.poolSize/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

describe('loading files', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-config-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  function loadError(file: string): ConfigError {
    try {
      loadConfig(file, noEnv);
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      return err as ConfigError;
    }
    throw new Error(`expected ${file} to be refused`);
  }

  test('a missing file names the file', () => {
    const file = path.join(dir, 'nope.yaml');
    expect(loadError(file).message).toContain(`${file}: cannot be read`);
  });

  test('YAML that does not parse names the file', () => {
    const file = path.join(dir, 'broken.yaml');
    writeFileSync(file, 'listen: { port: [');
    expect(loadError(file).message).toContain(`${file}: not valid YAML`);
  });

  test('the YAML error says where, without quoting the line (it may hold a secret)', () => {
    const file = path.join(dir, 'secret.yaml');
    writeFileSync(file, 'keyStore:\n  type: postgres\n  url: "postgres://chatgate:SECRETPW@db/chatgate\n');
    const message = loadError(file).message;
    expect(message).toMatch(/not valid YAML \(line \d+\)/);
    expect(message).not.toContain('SECRETPW');
  });

  test('a file whose settings are wrong names the file and the field', () => {
    const file = path.join(dir, 'wrong.yaml');
    writeFileSync(file, YAML.stringify({ ...minimal, listen: { port: 70000 } }));
    const message = loadError(file).message;
    expect(message).toContain(file);
    expect(message).toContain('listen.port');
  });

  test('an empty file is refused for want of providers', () => {
    const file = path.join(dir, 'empty.yaml');
    writeFileSync(file, '');
    expect(loadError(file).message).toContain('providers');
  });

  test('a valid file loads', () => {
    const file = path.join(dir, 'ok.yaml');
    writeFileSync(file, YAML.stringify({ ...minimal, listen: { port: 9443 } }));
    const config = loadConfig(file, noEnv);
    expect(config.listen).toEqual({ host: '0.0.0.0', port: 9443, backlog: 4096 });
    expect(config.providers).toEqual(minimal.providers);
  });
});

test('which file: --config, then CHATGATE_CONFIG, then the embedded defaults', () => {
  expect(configFileFrom(undefined, { CHATGATE_CONFIG: '/x.yaml' })).toBe('/x.yaml');
  expect(configFileFrom('/flag.yaml', { CHATGATE_CONFIG: '/env.yaml' })).toBe('/flag.yaml');
  expect(configFileFrom('/flag.yaml', {})).toBe('/flag.yaml');
  expect(configFileFrom(undefined, {})).toBe(DEFAULT_CONFIG_FILE);
  expect(DEFAULT_CONFIG_FILE).toBe(path.resolve(__dirname, '..', 'config', 'default.yaml'));
});

test('forwardHeaders: lower-case names or prefixes; a credential or a header the gateway sets is refused by name', () => {
  expect(parseConfig({ ...minimal, upstream: { forwardHeaders: ['accept', 'x-team-*'] } }).upstream.forwardHeaders).toEqual(['accept', 'x-team-*']);
  expect(() => parseConfig({ ...minimal, upstream: { forwardHeaders: ['Authorization'] } })).toThrow(/upstream\.forwardHeaders\[0\]: must be a header name in lower case/);
  expect(() => parseConfig({ ...minimal, upstream: { forwardHeaders: ['authorization'] } })).toThrow(/upstream\.forwardHeaders\[0\]: is set by the gateway itself, or is a credential/);
  expect(() => parseConfig({ ...minimal, providers: { a: { workers: ['http://x:1'], upstream: { forwardHeaders: ['x-forwarded-for'] } } } })).toThrow(/providers\.a\.upstream\.forwardHeaders\[0\]/);
});

test('aliases: a string is one target of weight 1; targets and fallback are kept in order', () => {
  const config = parseConfig({ providers: { a: { workers: ['http://x:1'] }, b: { workers: ['http://y:1'], endpoints: ['embeddings'] } }, models: { aliases: { fast: 'a/m', 'gpt-4o': { targets: [{ model: 'a/m', weight: 9 }, { model: 'b/n' }], fallback: ['b/o'] } } } });
  expect(config.models.aliases).toEqual({ fast: 'a/m', 'gpt-4o': { targets: [{ model: 'a/m', weight: 9 }, { model: 'b/n', weight: 1 }], fallback: ['b/o'] } });
  expect(config.providers.b!.endpoints).toEqual(['embeddings']);
});

test('workload identity rules: https issuers, subjects that name someone, nothing unknown', () => {
  const rule = { issuer: 'https://token.actions.githubusercontent.com', audience: 'chatgate', subject: 'repo:acme/app:ref:refs/heads/main', account: 'ci' };
  const parsed = parseConfig({ ...minimal, auth: { workloadIdentity: [rule] } }).auth.workloadIdentity;
  expect(parsed).toEqual([{ ...rule, claims: {}, models: [], rateLimit: { requestsPerMinute: null, tokensPerMinute: null, maxConcurrent: null } }]);
  expect(parseConfig(minimal).auth.workloadIdentity).toEqual([]);
  const refused = (changes: Record<string, unknown>) => problems({ ...minimal, auth: { workloadIdentity: [{ ...rule, ...changes }] } });
  expect(refused({ issuer: 'http://token.actions.githubusercontent.com' })).toMatch(/workloadIdentity\[0\]\.issuer.*https/);
  // A glob that names too little would let in every repository (every workload) the shared issuer vouches for, or another owner's named alike.
  for (const subject of ['*', '**', '?*', 'repo:*', 'repo:acme*', '*:ref:refs/heads/main', 'svc-*']) expect(refused({ subject })).toMatch(/workloadIdentity\[0\]\.subject.*two levels/);
  for (const subject of ['repo:acme/*', 'repo:acme/app:ref:refs/heads/release-*', 'system:serviceaccount:ci:*', 'project_path:group/app:ref_type:branch:ref:main']) {
    expect(parseConfig({ ...minimal, auth: { workloadIdentity: [{ ...rule, subject }] } }).auth.workloadIdentity[0]?.subject).toBe(subject);
  }
  expect(refused({ issuer: 'https://issuer.example.com/?tenant=x' })).toMatch(/no query/);
  expect(refused({ claims: { repository_owner_id: { $ne: 1 } } })).toMatch(/claims/);
  expect(refused({ audiences: ['chatgate'] })).toMatch(/audiences/);
  expect(refused({ rateLimit: { requestsPerMinute: -1 } })).toMatch(/requestsPerMinute/);
  expect(refused({ account: '' })).toMatch(/account/);
});
