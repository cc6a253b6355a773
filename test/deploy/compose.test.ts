/**
 * docker-compose.yml comes up in order on the first try: docker-compose validates it, every service
 * runs a pinned image and has a health check, every dependency waits for its health, the database
 * password never goes into a URL, and what the services point at each other (scrape target, webhook,
 * data source, mounted files) lines up.
 */
import { existsSync } from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import YAML from 'yaml';
import { loadConfig } from '../../src/config';
import { DEPLOY, ROOT, read, run } from './tools';

const ENV = { CHATGATE_ADMIN_TOKEN: 'a-token-of-sixteen-or-more', CHATGATE_DB_PASSWORD: 'p@ss:w/rd?#%&= +x' };

interface Service {
  image?: string;
  build?: { context: string; dockerfile: string };
  environment?: Record<string, string>;
  healthcheck?: { test: string[]; interval?: string; disable?: boolean };
  depends_on?: Record<string, { condition: string }>;
  ports?: (string | { published: number | string; target: number; host_ip?: string })[];
  volumes?: (string | { type: string; source: string; target: string; read_only?: boolean })[];
  entrypoint?: string[];
}

/** docker-compose 1.29 prints some ports and volumes in the short form, others in the long one. */
function ports(service: Service): { host: string; published: number; target: number }[] {
  return (service.ports ?? []).map((port) => {
    if (typeof port !== 'string') return { host: port.host_ip ?? '', published: Number(port.published), target: Number(port.target) };
    const parts = port.replace(/\/(tcp|udp)$/, '').split(':');
    const [host, published, target] = parts.length === 3 ? parts : ['', ...parts];
    return { host: host!, published: Number(published), target: Number(target) };
  });
}
function volumes(service: Service): { bind: boolean; source: string; target: string; readOnly: boolean }[] {
  return (service.volumes ?? []).map((volume) => {
    if (typeof volume !== 'string') return { bind: volume.type === 'bind', source: volume.source, target: volume.target, readOnly: volume.read_only === true };
    const [source, target, mode] = volume.split(':');
    return { bind: path.isAbsolute(source!), source: source!, target: target!, readOnly: mode === 'ro' };
  });
}

let services: Record<string, Service>;

beforeAll(() => {
  const config = run('docker-compose', ['config'], { cwd: ROOT, env: ENV });
  expect(config.status).toBe(0);
  services = YAML.parse(config.stdout.replace(/^[\s\S]*?(?=services:)/, '')).services;
});

test('docker-compose validates the compose file, and insists on the secrets it needs', () => {
  expect(run('docker-compose', ['config', '-q'], { cwd: ROOT, env: ENV })).toMatchObject({ status: 0, output: '' });
  expect(Object.keys(services).sort()).toEqual(['alert-log', 'alertmanager', 'gateway', 'grafana', 'mock-worker-1', 'mock-worker-2', 'postgres', 'prometheus', 'redis']);
  for (const name of ['CHATGATE_DB_PASSWORD', 'CHATGATE_ADMIN_TOKEN']) {
    const missing = run('docker-compose', ['config', '-q'], { cwd: ROOT, env: { ...ENV, [name]: '' } });
    expect(missing.status).not.toBe(0);
    expect(missing.output).toContain(name);
  }
});

test('every service runs a pinned image, or the one deploy/Dockerfile builds', () => {
  for (const [name, service] of Object.entries(services)) {
    if (service.build) {
      expect({ name, build: service.build }).toEqual({ name, build: { context: ROOT, dockerfile: 'deploy/Dockerfile' } });
      continue;
    }
    // registry/name:tag with a tag that names a version (digits), never latest.
    expect({ name, image: service.image }).toEqual({ name, image: expect.stringMatching(/^[a-z0-9./_-]+:v?\d+(\.\d+)+(-[a-z0-9.]+)?$/) });
    expect(service.image).not.toMatch(/:latest$/);
  }
});

test('every service has a health check, and every dependency waits for it', () => {
  for (const [name, service] of Object.entries(services)) {
    expect({ name, test: service.healthcheck?.test?.[0] }).toEqual({ name, test: expect.stringMatching(/^CMD(-SHELL)?$/) });
    expect(service.healthcheck?.disable).toBeUndefined();
    for (const [dependency, { condition }] of Object.entries(service.depends_on ?? {})) {
      expect({ name, dependency, condition }).toEqual({ name, dependency, condition: 'service_healthy' });
    }
  }
  expect(Object.keys(services.gateway!.depends_on!).sort()).toEqual(['mock-worker-1', 'mock-worker-2', 'postgres', 'redis']);
  expect(services.postgres!.healthcheck!.test).toEqual(expect.arrayContaining(['pg_isready']));
  expect(services.redis!.healthcheck!.test.join(' ')).toMatch(/redis-cli .*ping/);
  // Prometheus must run while the gateway does not: that is when ChatgateDown fires.
  expect(Object.keys(services.prometheus!.depends_on ?? {})).not.toContain('gateway');
  expect(services.alertmanager!.depends_on).toHaveProperty('alert-log');
  expect(services.grafana!.depends_on).toHaveProperty('prometheus');
});

test('the database password is never put into a URL: the gateway gets it as PGPASSWORD, whatever its characters', () => {
  const environment = services.gateway!.environment!;
  const url = new URL(environment.CHATGATE_KEYSTORE_URL!);
  expect({ username: url.username, password: url.password, host: url.host }).toEqual({ username: 'chatgate', password: '', host: 'postgres:5432' });
  expect(environment.PGPASSWORD).toBe(ENV.CHATGATE_DB_PASSWORD);
  expect(services.postgres!.environment!.POSTGRES_PASSWORD).toBe(ENV.CHATGATE_DB_PASSWORD);
  expect(JSON.stringify(services)).not.toContain(encodeURIComponent(ENV.CHATGATE_DB_PASSWORD));

  // The gateway's own config loading, then the PostgreSQL client as the key store makes it.
  const config = loadConfig(path.join(ROOT, 'config', 'compose.yaml'), environment);
  expect(config.keyStore).toMatchObject({ type: 'postgres', url: environment.CHATGATE_KEYSTORE_URL });
  expect(config.rateLimit).toMatchObject({ store: 'redis', url: 'redis://redis:6379' });
  expect(config.admin.token).toBe(ENV.CHATGATE_ADMIN_TOKEN);
  const saved = process.env.PGPASSWORD;
  process.env.PGPASSWORD = environment.PGPASSWORD;
  try {
    const client = new pg.Client({ connectionString: config.keyStore.type === 'postgres' ? config.keyStore.url : '' });
    expect({ user: client.user, password: client.password, host: client.host, database: client.database }).toEqual({
      user: 'chatgate',
      password: ENV.CHATGATE_DB_PASSWORD,
      host: 'postgres',
      database: 'chatgate',
    });
  } finally {
    if (saved === undefined) delete process.env.PGPASSWORD;
    else process.env.PGPASSWORD = saved;
  }
});

test('only the public port is published beyond this host', () => {
  const published = Object.entries(services).flatMap(([name, service]) => ports(service).map((port) => ({ name, port: port.published, host: port.host })));
  expect(published.sort((a, b) => a.port - b.port)).toEqual([
    { name: 'grafana', port: 3000, host: '127.0.0.1' },
    { name: 'gateway', port: 8443, host: '' },
    { name: 'prometheus', port: 9090, host: '127.0.0.1' },
    { name: 'alertmanager', port: 9093, host: '127.0.0.1' },
    { name: 'gateway', port: 9464, host: '127.0.0.1' },
  ]);
});

test('every file a service mounts from the repository exists', () => {
  const mounts = Object.values(services).flatMap((service) => volumes(service).filter((volume) => volume.bind));
  expect(mounts.length).toBeGreaterThanOrEqual(7);
  for (const mount of mounts) {
    expect({ source: mount.source, exists: existsSync(mount.source) }).toEqual({ source: mount.source, exists: true });
    expect({ source: mount.source, readOnly: mount.readOnly }).toEqual({ source: mount.source, readOnly: true });
  }
});

test("Prometheus scrapes the gateway by a Host its admin listener answers to, and alerts reach the logging receiver", () => {
  const prometheus = YAML.parse(read(DEPLOY, 'prometheus', 'prometheus.yml'));
  const [target] = prometheus.scrape_configs[0].static_configs[0].targets as string[];
  const [host, port] = target!.split(':');
  const gateway = loadConfig(path.join(ROOT, 'config', 'compose.yaml'), {});
  expect(host).toBe('gateway');
  expect(services).toHaveProperty(host!);
  expect(Number(port)).toBe(gateway.admin.port);
  expect(gateway.admin.host).toBe('0.0.0.0');
  expect(gateway.admin.allowedHosts).toContain(host); // else the admin listener answers Prometheus 403
  expect(prometheus.rule_files).toEqual(['rules.yml']);
  expect(volumes(services.prometheus!).map((volume) => [path.relative(ROOT, volume.source), volume.target])).toEqual(
    expect.arrayContaining([
      ['deploy/prometheus/prometheus.yml', '/etc/prometheus/prometheus.yml'],
      ['deploy/prometheus/rules.yml', '/etc/prometheus/rules.yml'],
    ]),
  );

  const alertmanager = YAML.parse(read(DEPLOY, 'alertmanager', 'alertmanager.yml'));
  const receiver = alertmanager.receivers.find((r: { name: string }) => r.name === alertmanager.route.receiver);
  const webhook = new URL(receiver.webhook_configs[0].url);
  expect(webhook.hostname).toBe('alert-log');
  expect(webhook.port).toBe(services['alert-log']!.environment!.PORT);
  expect(services['alert-log']!.entrypoint).toEqual(['node', '/opt/alert-log/webhook-logger.js']);
});

test('Grafana is provisioned with the Prometheus data source and the chatgate dashboard', () => {
  const grafana = services.grafana!;
  const mounted = new Map(volumes(grafana).map((volume) => [volume.target, path.relative(ROOT, volume.source)]));
  expect(mounted.get('/etc/grafana/provisioning/datasources')).toBe('deploy/grafana/provisioning/datasources');
  expect(mounted.get('/etc/grafana/provisioning/dashboards')).toBe('deploy/grafana/provisioning/dashboards');

  const [source, ...others] = YAML.parse(read(DEPLOY, 'grafana', 'provisioning', 'datasources', 'prometheus.yml')).datasources;
  expect(others).toEqual([]);
  expect(source).toMatchObject({ type: 'prometheus', url: 'http://prometheus:9090', isDefault: true });

  const [provider] = YAML.parse(read(DEPLOY, 'grafana', 'provisioning', 'dashboards', 'chatgate.yml')).providers;
  expect(mounted.get(path.posix.join(provider.options.path, 'chatgate.json'))).toBe('deploy/grafana/chatgate.json');

  // A provisioned dashboard gets no import dialog: its data source is a variable, not an __inputs placeholder.
  const dashboard = JSON.parse(read(DEPLOY, 'grafana', 'chatgate.json'));
  expect(dashboard.__inputs).toBeUndefined();
  expect(JSON.stringify(dashboard)).not.toMatch(/\$\{DS_/);
  expect(dashboard.templating.list).toEqual(expect.arrayContaining([expect.objectContaining({ name: 'datasource', type: 'datasource', query: 'prometheus' })]));
  const ids = dashboard.panels.map((panel: { id: number }) => panel.id);
  expect(new Set(ids).size).toBe(ids.length);
});
