/**
 * What operators deploy with is checked like code: the alerting rules with promtool (lint and unit
 * tests), docker-compose.yml with docker-compose, the dashboard and rules against the metric names a
 * live gateway exports, and the configs in compose and Kubernetes against the config schema.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { parseConfig } from '../../src/config';
import { gatewayWithWorker } from '../helpers/fixture';
import { bearer, chatBody, request } from '../helpers/http';
import { scrape } from '../helpers/metrics';

const ROOT = path.join(__dirname, '..', '..');
const DEPLOY = path.join(ROOT, 'deploy');
const read = (...parts: string[]) => readFileSync(path.join(...parts), 'utf8');

function run(command: string, args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv } = {}) {
  const result = spawnSync(command, args, { encoding: 'utf8', cwd: options.cwd, env: { ...process.env, ...options.env }, timeout: 60_000 });
  expect(result.error).toBeUndefined(); // the tool is installed (.ci/run installs it)
  return { status: result.status, output: result.stdout + result.stderr };
}

test('promtool checks the rules and passes their unit tests', () => {
  expect(run('promtool', ['check', 'rules', 'rules.yml'], { cwd: path.join(DEPLOY, 'prometheus') })).toMatchObject({ status: 0 });
  const tested = run('promtool', ['test', 'rules', 'rules.test.yml'], { cwd: path.join(DEPLOY, 'prometheus') });
  expect(tested.output).toContain('SUCCESS');
  expect(tested.status).toBe(0);
});

test('docker-compose validates the compose file, and insists on the secrets it needs', () => {
  const env = { CHATGATE_ADMIN_TOKEN: 'a-token-of-sixteen-or-more', CHATGATE_DB_PASSWORD: 'x' };
  expect(run('docker-compose', ['config', '-q'], { cwd: ROOT, env })).toEqual({ status: 0, output: '' });
  const services = YAML.parse(run('docker-compose', ['config'], { cwd: ROOT, env }).output.replace(/^[^]*?(?=services:)/, '')).services;
  expect(Object.keys(services).sort()).toEqual(['gateway', 'mock-worker-1', 'mock-worker-2', 'postgres', 'prometheus', 'redis']);
  const missing = run('docker-compose', ['config', '-q'], { cwd: ROOT, env: { CHATGATE_ADMIN_TOKEN: '', CHATGATE_DB_PASSWORD: '' } });
  expect(missing.status).not.toBe(0);
  expect(missing.output).toMatch(/CHATGATE_(DB_PASSWORD|ADMIN_TOKEN)/);
});

test('the configs shipped for compose and Kubernetes are valid configs', () => {
  expect(parseConfig(YAML.parse(read(ROOT, 'config', 'compose.yaml'))).providers.mock!.workers).toHaveLength(2);
  const manifests = YAML.parseAllDocuments(read(DEPLOY, 'kubernetes', 'chatgate.yaml')).map((doc) => doc.toJS());
  expect(manifests.map((m) => m.kind).sort()).toEqual(['ConfigMap', 'Deployment', 'PodDisruptionBudget', 'Secret', 'Service']);
  const configMap = manifests.find((m) => m.kind === 'ConfigMap');
  expect(parseConfig(YAML.parse(configMap.data['chatgate.yaml'])).admin.port).toBe(9464);
  const container = manifests.find((m) => m.kind === 'Deployment').spec.template.spec.containers[0];
  expect(container.readinessProbe.httpGet.path).toBe('/readyz');
  expect(container.livenessProbe.httpGet.path).toBe('/healthz');
});

describe('metric names', () => {
  const f = gatewayWithWorker({ rateLimit: { requestsPerMinute: 1000 } });

  test('every chatgate_ name the dashboard and the rules use is exported by a live gateway', async () => {
    await request(f.gw.url, { ca: f.gw.ca, headers: bearer(f.key), body: chatBody() });
    const exposition = await scrape(f.gw.adminUrl);
    const exported = new Set<string>();
    for (const [, name, type] of exposition.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
      exported.add(name!);
      if (type === 'histogram') for (const suffix of ['_bucket', '_sum', '_count']) exported.add(name + suffix);
    }
    const used = (text: string) => new Set([...text.matchAll(/\bchatgate_[a-z0-9_]+\b/g)].map((m) => m[0]).filter((name) => !name.startsWith('chatgate:')));
    const dashboard = used(read(DEPLOY, 'grafana', 'chatgate.json'));
    const rules = used(read(DEPLOY, 'prometheus', 'rules.yml'));
    expect(dashboard.size).toBeGreaterThan(15);
    expect([...dashboard].filter((name) => !exported.has(name))).toEqual([]);
    expect([...rules].filter((name) => !exported.has(name))).toEqual([]);
  });
});
