/**
 * What operators deploy with is checked like code. This file: the alerting rules with promtool (lint
 * and unit tests, every alert shown firing and not firing), the Prometheus config, the rules' copy for
 * the Prometheus Operator, and the dashboard and rules against the metric names a live gateway
 * exports. compose.test.ts, kubernetes.test.ts, image.test.ts and alert-log.test.ts check the rest.
 */
import path from 'node:path';
import YAML from 'yaml';
import { gatewayWithWorker } from '../helpers/fixture';
import { bearer, chatBody, request } from '../helpers/http';
import { scrape } from '../helpers/metrics';
import { DEPLOY, read, run } from './tools';

const PROMETHEUS = path.join(DEPLOY, 'prometheus');

interface RuleGroup {
  name: string;
  rules: { alert?: string; record?: string; expr: string; for?: string; labels?: Record<string, string> }[];
}
interface RuleTests {
  rule_files: string[];
  tests: { name: string; alert_rule_test?: { eval_time: string; alertname: string; exp_alerts: unknown[] }[] }[];
}

const groups = (): RuleGroup[] => YAML.parse(read(PROMETHEUS, 'rules.yml')).groups;
const alerts = () => groups().flatMap((group) => group.rules.filter((rule) => rule.alert !== undefined));

test('promtool checks the rules and passes their unit tests', () => {
  expect(run('promtool', ['check', 'rules', 'rules.yml'], { cwd: PROMETHEUS })).toMatchObject({ status: 0 });
  const tested = run('promtool', ['test', 'rules', 'rules.test.yml'], { cwd: PROMETHEUS });
  expect(tested.output).toContain('SUCCESS');
  expect(tested.status).toBe(0);
});

test("promtool accepts compose's Prometheus config, with the rules it loads", () => {
  const checked = run('promtool', ['check', 'config', 'prometheus.yml'], { cwd: PROMETHEUS });
  expect(checked.status).toBe(0);
  expect(checked.output).toMatch(/SUCCESS: 1 rule files found/);
  const config = YAML.parse(read(PROMETHEUS, 'prometheus.yml'));
  expect(config.alerting.alertmanagers[0].static_configs[0].targets).toEqual(['alertmanager:9093']);
  // The job name is what up{job="chatgate"} in ChatgateDown and ChatgateAbsent matches.
  expect(config.scrape_configs.map((job: { job_name: string }) => job.job_name)).toEqual(['chatgate']);
});

test('every alert has a promtool case where it fires and one where it does not', () => {
  const tests: RuleTests = YAML.parse(read(PROMETHEUS, 'rules.test.yml'));
  expect(tests.rule_files).toEqual(['rules.yml']);
  const cases = tests.tests.flatMap((t) => t.alert_rule_test ?? []);
  for (const { alert } of alerts()) {
    const mine = cases.filter((c) => c.alertname === alert);
    expect({ alert, fires: mine.some((c) => c.exp_alerts.length > 0) }).toEqual({ alert, fires: true });
    expect({ alert, staysQuiet: mine.some((c) => c.exp_alerts.length === 0) }).toEqual({ alert, staysQuiet: true });
  }
  // No case names an alert that does not exist (it would pass vacuously with exp_alerts: []).
  const names = new Set(alerts().map((rule) => rule.alert));
  expect(cases.map((c) => c.alertname).filter((name) => !names.has(name))).toEqual([]);
});

test('the alerts watch the gateway itself, its dependencies, its overhead and time to first token', () => {
  const byName = new Map(alerts().map((rule) => [rule.alert!, rule]));
  expect(byName.get('ChatgateDown')?.expr).toBe('up{job="chatgate"} == 0');
  expect(byName.get('ChatgateAbsent')?.expr).toBe('absent(up{job="chatgate"})');
  expect(byName.get('ChatgateDependencyDown')?.expr).toBe('chatgate_dependency_up == 0');
  const recorded = new Map(groups().flatMap((group) => group.rules.filter((rule) => rule.record).map((rule) => [rule.record!, rule.expr])));
  const expanded = (expr: string) => expr.replace(/chatgate:[a-z0-9_:]+/g, (name) => recorded.get(name) ?? name);
  expect(expanded(byName.get('ChatgateHighOverhead')!.expr)).toContain('chatgate_gateway_overhead_seconds_bucket');
  expect(expanded(byName.get('ChatgateSlowFirstToken')!.expr)).toContain('chatgate_stream_time_to_first_token_seconds_bucket');
  // A stream's whole duration is its generation time: no alert (or rule) judges latency by it.
  expect(read(PROMETHEUS, 'rules.yml')).not.toContain('chatgate_request_duration_seconds');
  for (const rule of alerts()) expect({ alert: rule.alert, severity: rule.labels?.severity }).toEqual({ alert: rule.alert, severity: expect.stringMatching(/^(page|warn)$/) });
});

test("the Prometheus Operator's PrometheusRule holds exactly the groups of rules.yml", () => {
  const [rule, ...more] = YAML.parseAllDocuments(read(DEPLOY, 'kubernetes', 'monitoring', 'prometheusrule.yaml')).map((doc) => doc.toJS());
  expect(more).toEqual([]);
  expect(rule).toMatchObject({ apiVersion: 'monitoring.coreos.com/v1', kind: 'PrometheusRule' });
  // On a difference: change rules.yml, then copy its groups into prometheusrule.yaml's spec.groups.
  expect(rule.spec.groups).toEqual(groups());
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
    expect([...rules]).toEqual(expect.arrayContaining(['chatgate_dependency_up', 'chatgate_gateway_overhead_seconds_bucket', 'chatgate_stream_time_to_first_token_seconds_bucket']));
  });
});
