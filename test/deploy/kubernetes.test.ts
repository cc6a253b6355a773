/**
 * deploy/kubernetes, rendered offline by `kubectl kustomize` as `kubectl apply -k` would send it: the
 * objects are well formed, the pods meet the Pod Security "restricted" level, only the monitoring
 * namespace reaches the admin port, no Secret is shipped, rollouts drain within the grace period,
 * readiness does not hang on the key store, and the Prometheus Operator objects find the pods.
 * Every object is also validated against its kind's schema: kubernetes-models (the Kubernetes 1.27
 * OpenAPI schemas) and @kubernetes-models/prometheus-operator (the Prometheus Operator's CRDs).
 */
import * as prometheusOperatorModels from '@kubernetes-models/prometheus-operator';
import * as kubernetesModels from 'kubernetes-models';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { parseConfig, type Config } from '../../src/config';
import { DEPLOY, type K8sObject, ROOT, kustomize, read, selects } from './tools';

const KUBERNETES = path.join(DEPLOY, 'kubernetes');
const OVERLAY = path.join(KUBERNETES, 'overlays', 'example');

/** The API version each kind is served as in every supported Kubernetes release (1.27 on). */
const API_VERSIONS: Record<string, string> = {
  Namespace: 'v1',
  ConfigMap: 'v1',
  Service: 'v1',
  Deployment: 'apps/v1',
  PodDisruptionBudget: 'policy/v1',
  HorizontalPodAutoscaler: 'autoscaling/v2',
  NetworkPolicy: 'networking.k8s.io/v1',
  ServiceMonitor: 'monitoring.coreos.com/v1',
  PrometheusRule: 'monitoring.coreos.com/v1',
};
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/;
/** Volume types the restricted level allows. */
const RESTRICTED_VOLUMES = ['configMap', 'csi', 'downwardAPI', 'emptyDir', 'ephemeral', 'persistentVolumeClaim', 'projected', 'secret'];

/** A kubernetes-models class: built from an object, its validate() checks it against the kind's schema. */
interface ModelClass {
  apiVersion: string;
  kind: string;
  new (data: object): { validate(): void };
}
/** Every kind the two packages have a schema for, by "apiVersion kind". */
const MODELS = new Map<string, ModelClass>();
(function collect(namespace: object, depth: number) {
  for (const value of Object.values(namespace)) {
    if (typeof value === 'function' && typeof value.apiVersion === 'string' && typeof value.kind === 'string') MODELS.set(`${value.apiVersion} ${value.kind}`, value as ModelClass);
    else if (value !== null && typeof value === 'object' && depth < 3) collect(value, depth + 1); // group, then version, namespaces
  }
})({ kubernetesModels, prometheusOperatorModels }, 0);

/**
 * What is wrong with an object by its kind's schema: a missing required field, a wrong type, format or
 * enum value, and (as `kubectl apply`'s default strict validation would refuse them) fields the schema
 * does not have. The schemas leave unknown fields open, so these are found by recording which fields the
 * validator reads: one it never reads, in an object it does not walk as a map, is not in the schema.
 * A kind with no schema here is an error too.
 */
function schemaErrors(object: K8sObject): string[] {
  const Model = MODELS.get(`${object.apiVersion} ${object.kind}`);
  if (!Model) return [`no schema for ${object.apiVersion} ${object.kind}`];
  const model = new Model(object);
  const errors: string[] = [];
  try {
    model.validate();
  } catch (error) {
    errors.push((error as Error).message);
  }
  const visited = new Map<object, { path: string; read: Set<string>; walked: boolean }>();
  const record = (value: unknown, at: string): unknown => {
    if (value === null || typeof value !== 'object') return value;
    const entry = visited.get(value) ?? { path: at, read: new Set<string>(), walked: false };
    visited.set(value, entry);
    return new Proxy(value, {
      get: (target, key) => {
        if (typeof key !== 'string') return Reflect.get(target, key);
        entry.read.add(key);
        return record(Reflect.get(target, key), `${at}/${key}`);
      },
      has: (target, key) => {
        if (typeof key === 'string') entry.read.add(key);
        return Reflect.has(target, key);
      },
      ownKeys: (target) => {
        entry.walked = true;
        return Reflect.ownKeys(target);
      },
    });
  };
  try {
    model.validate.call(record(structuredClone(object), ''));
  } catch {
    // reported above
  }
  const unknown = [...visited]
    .filter(([value, v]) => !Array.isArray(value) && !v.walked)
    .flatMap(([value, v]) => Object.keys(value).filter((key) => !v.read.has(key)).map((key) => `${v.path}/${key}`));
  if (unknown.length > 0) errors.push(`fields not in the schema: ${unknown.join(', ')}`);
  return errors;
}

let overlay: K8sObject[];
let base: K8sObject[];
let monitoring: K8sObject[];

beforeAll(() => {
  overlay = kustomize(OVERLAY);
  base = kustomize(path.join(KUBERNETES, 'base'));
  monitoring = kustomize(path.join(KUBERNETES, 'monitoring'));
});

const one = (objects: K8sObject[], kind: string, name?: string): K8sObject => {
  const found = objects.filter((o) => o.kind === kind && (name === undefined || o.metadata.name === name));
  expect({ kind, name, count: found.length }).toEqual({ kind, name, count: 1 });
  return found[0]!;
};
const deployment = () => one(overlay, 'Deployment');
const podSpec = () => deployment().spec.template.spec;
const containers = () => [...(podSpec().initContainers ?? []), ...podSpec().containers] as K8sObject[];
const gatewayConfig = (objects: K8sObject[]): Config => parseConfig(YAML.parse(one(objects, 'ConfigMap').data['chatgate.yaml']));
const containerPort = (name: string): number => podSpec().containers[0].ports.find((p: { name: string }) => p.name === name).containerPort;

test('the base, the monitoring objects and the example overlay render, with the kinds and API versions expected', () => {
  expect(base.map((o) => o.kind).sort()).toEqual(['ConfigMap', 'Deployment', 'HorizontalPodAutoscaler', 'NetworkPolicy', 'PodDisruptionBudget', 'Service']);
  expect(monitoring.map((o) => o.kind).sort()).toEqual(['PrometheusRule', 'Service', 'ServiceMonitor']);
  expect(overlay.map((o) => o.kind).sort()).toEqual([...base, ...monitoring].map((o) => o.kind).concat('Namespace').sort());
  for (const object of overlay) {
    const { kind, apiVersion, metadata } = object;
    expect({ kind, apiVersion }).toEqual({ kind, apiVersion: API_VERSIONS[kind] });
    expect({ kind, name: metadata.name }).toEqual({ kind, name: expect.stringMatching(kind === 'Namespace' || kind === 'Service' ? DNS_LABEL : DNS_SUBDOMAIN) });
    expect({ kind, namespace: metadata.namespace }).toEqual({ kind, namespace: kind === 'Namespace' ? undefined : 'chatgate' });
    if (kind !== 'Namespace') expect({ kind, name: metadata.labels?.['app.kubernetes.io/name'] }).toEqual({ kind, name: 'chatgate' });
  }
  // Every manifest in the folder is part of some kustomization: none is left for `kubectl apply -f` to find alone.
  const listed = new Set<string>();
  for (const dir of ['base', 'monitoring', 'overlays/example']) {
    const kustomization = YAML.parse(read(KUBERNETES, dir, 'kustomization.yaml'));
    for (const entry of [...(kustomization.resources ?? []), ...(kustomization.configMapGenerator ?? []).flatMap((g: { files: string[] }) => g.files)]) {
      listed.add(path.join(dir, String(entry).replace(/^[^=]*=/, '')));
    }
  }
  for (const dir of ['base', 'monitoring', 'overlays/example']) {
    for (const file of readdirSync(path.join(KUBERNETES, dir)).filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml')) {
      expect({ file: path.join(dir, file), listed: listed.has(path.join(dir, file)) }).toEqual({ file: path.join(dir, file), listed: true });
    }
  }
});

test("every object validates against its kind's schema (Kubernetes 1.27 OpenAPI, Prometheus Operator CRDs)", () => {
  for (const [dir, objects] of [['base', base], ['monitoring', monitoring], ['overlays/example', overlay]] as const) {
    for (const object of objects) {
      const { kind, metadata } = object;
      expect({ dir, kind, name: metadata.name, errors: schemaErrors(object) }).toEqual({ dir, kind, name: metadata.name, errors: [] });
    }
  }
  // The validation bites: on copies broken in one place each.
  const broken = (kind: string, breakIt: (o: K8sObject) => void): string[] => {
    const copy = structuredClone(one(overlay, kind));
    breakIt(copy);
    return schemaErrors(copy);
  };
  expect(broken('Deployment', (d) => (d.spec.template.spec.containers[0].ports[0].containerPort = '8443'))).toEqual([expect.stringContaining('containerPort must be integer')]);
  expect(broken('Deployment', (d) => delete d.spec.selector)).toEqual([expect.stringContaining('data/spec must have required property selector')]);
  expect(broken('Deployment', (d) => (d.spec.template.spec.containers[0].resources.requests.cpu = 'lots'))).toEqual([expect.stringContaining('must match format "quantity"')]);
  expect(broken('Deployment', (d) => (d.spec.replicaCount = 3))).toEqual(['fields not in the schema: /spec/replicaCount']);
  expect(broken('Deployment', (d) => (d.spec.template.spec.containers[0].securityContext.runAsNonroot = true))).toEqual([
    'fields not in the schema: /spec/template/spec/containers/0/securityContext/runAsNonroot',
  ]);
  expect(broken('ServiceMonitor', (m) => (m.spec.endpoints[0].scheme = 'tcp'))).toEqual([expect.stringContaining('scheme must be equal to one of the allowed values')]);
  expect(broken('PrometheusRule', (r) => (r.spec.groups[0].rules[0].expression = r.spec.groups[0].rules[0].expr))).toEqual([
    'fields not in the schema: /spec/groups/0/rules/0/expression',
  ]);
  expect(schemaErrors({ apiVersion: 'example.com/v1', kind: 'Widget', metadata: { name: 'w' } })).toEqual(['no schema for example.com/v1 Widget']);
  expect(schemaErrors({ apiVersion: 'networking.k8s.io/v1', kind: 'Widget', metadata: { name: 'w' } })).toEqual(['no schema for networking.k8s.io/v1 Widget']);
});

test('the objects are well formed: selectors match, named ports and volumes exist, the config is a valid chatgate config', () => {
  const d = deployment();
  const podLabels = d.spec.template.metadata.labels;
  expect(selects(d.spec.selector.matchLabels, podLabels)).toBe(true);
  const spec = podSpec();
  const portNames = new Set(spec.containers.flatMap((c: K8sObject) => (c.ports ?? []).map((p: { name: string }) => p.name)));
  const volumeNames = new Set(spec.volumes.map((v: { name: string }) => v.name));
  for (const c of containers()) {
    expect(c.name).toMatch(DNS_LABEL);
    for (const port of c.ports ?? []) expect(port).toEqual({ name: expect.stringMatching(/^[a-z0-9-]{1,15}$/), containerPort: expect.any(Number), protocol: 'TCP' });
    for (const mount of c.volumeMounts ?? []) expect({ mount: mount.name, exists: volumeNames.has(mount.name) }).toEqual({ mount: mount.name, exists: true });
    for (const probe of ['startupProbe', 'readinessProbe', 'livenessProbe']) {
      if (c[probe]) expect({ probe, port: portNames.has(c[probe].httpGet.port) }).toEqual({ probe, port: true });
    }
    for (const variable of c.env ?? []) {
      expect(variable.name).toMatch(/^[A-Z_][A-Z0-9_]*$/);
      if (variable.valueFrom) expect(variable.valueFrom.secretKeyRef).toEqual({ name: expect.any(String), key: expect.any(String) });
    }
  }
  for (const service of overlay.filter((o) => o.kind === 'Service')) {
    expect(selects(service.spec.selector, podLabels)).toBe(true);
    for (const port of service.spec.ports) expect({ service: service.metadata.name, targetPort: portNames.has(port.targetPort) }).toEqual({ service: service.metadata.name, targetPort: true });
  }
  // The ConfigMap the pods mount is the generated (hash-named) one, and holds a valid config.
  const configMap = one(overlay, 'ConfigMap');
  expect(spec.volumes.find((v: { name: string }) => v.name === 'config').configMap.name).toBe(configMap.metadata.name);
  expect(d.spec.template.spec.containers[0].args).toEqual(['serve', '--config', '/etc/chatgate/config/chatgate.yaml']);
  const mount = spec.containers[0].volumeMounts.find((m: { name: string }) => m.name === 'config');
  expect(path.posix.join(mount.mountPath, Object.keys(configMap.data)[0]!)).toBe('/etc/chatgate/config/chatgate.yaml');
  for (const objects of [base, overlay]) {
    const config = gatewayConfig(objects);
    expect(config.listen.port).toBe(containerPort('https'));
    expect(config.admin).toMatchObject({ host: '0.0.0.0', port: containerPort('admin') }); // probes and Prometheus come by pod IP
    expect(config.tls).toEqual({ cert: '/etc/chatgate/tls/tls.crt', key: '/etc/chatgate/tls/tls.key' });
  }
});

test('every pod and container meets the Pod Security "restricted" level, on a read-only root filesystem', () => {
  const spec = podSpec();
  expect(spec.automountServiceAccountToken).toBe(false);
  for (const field of ['hostNetwork', 'hostPID', 'hostIPC', 'hostUsers']) expect(spec[field] === true).toBe(false);
  expect(spec.securityContext).toMatchObject({ runAsNonRoot: true, runAsUser: expect.any(Number), seccompProfile: { type: 'RuntimeDefault' } });
  expect(spec.securityContext.runAsUser).toBeGreaterThan(0);
  for (const volume of spec.volumes) {
    const type = Object.keys(volume).find((key) => key !== 'name');
    expect({ volume: volume.name, type, allowed: RESTRICTED_VOLUMES.includes(type!) }).toEqual({ volume: volume.name, type, allowed: true });
  }
  for (const c of containers()) {
    const context = c.securityContext ?? {};
    expect({ container: c.name, context }).toEqual({
      container: c.name,
      context: expect.objectContaining({ allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: ['ALL'] } }),
    });
    expect(context.privileged === true).toBe(false);
    expect(context.runAsUser ?? spec.securityContext.runAsUser).toBeGreaterThan(0);
    expect(context.runAsNonRoot ?? spec.securityContext.runAsNonRoot).toBe(true);
    expect((context.seccompProfile ?? spec.securityContext.seccompProfile).type).toBe('RuntimeDefault');
    for (const port of c.ports ?? []) expect(port.hostPort).toBeUndefined();
  }
  // The data dir is writable although the root filesystem is not: an emptyDir is mounted there.
  const dataDir = gatewayConfig(overlay).dataDir;
  const dataMount = podSpec().containers[0].volumeMounts.find((m: { mountPath: string }) => m.mountPath === dataDir);
  expect(spec.volumes.find((v: { name: string }) => v.name === dataMount?.name)).toMatchObject({ emptyDir: expect.any(Object) });
  // The runtime uid is the image's own non-root user.
  expect(read(DEPLOY, 'Dockerfile')).toMatch(new RegExp(`^USER ${spec.securityContext.runAsUser}(:\\d+)?$`, 'm'));
  // The example's namespace enforces that level.
  expect(one(overlay, 'Namespace').metadata.labels).toMatchObject({ 'pod-security.kubernetes.io/enforce': 'restricted' });
});

test('the NetworkPolicy leaves the public port open and lets only the monitoring namespace reach the admin port', () => {
  const policy = one(overlay, 'NetworkPolicy');
  expect(selects(policy.spec.podSelector.matchLabels, deployment().spec.template.metadata.labels)).toBe(true);
  expect(policy.spec.policyTypes).toEqual(['Ingress']);
  const https = containerPort('https');
  const admin = containerPort('admin');
  expect([https, admin]).toEqual([8443, 9464]);
  const rulesFor = (port: number) => policy.spec.ingress.filter((rule: K8sObject) => (rule.ports ?? []).some((p: { port: number }) => p.port === port));
  // 8443: one rule, from anywhere.
  expect(rulesFor(https)).toEqual([{ ports: [{ port: https, protocol: 'TCP' }] }]);
  // 9464: one rule, from the monitoring namespace only (any pod there; no ipBlock).
  expect(rulesFor(admin)).toEqual([{ from: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } } }], ports: [{ port: admin, protocol: 'TCP' }] }]);
  // No rule without ports, which would open every port.
  for (const rule of policy.spec.ingress) expect(rule.ports?.length).toBeGreaterThan(0);
});

test('no Secret is shipped, and every Secret the pods need is documented', () => {
  for (const objects of [base, monitoring, overlay]) expect(objects.filter((o) => o.kind === 'Secret')).toEqual([]);
  // Not even in a manifest no kustomization lists.
  const files = (dir: string): string[] => readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(path.join(dir, e.name)) : [path.join(dir, e.name)]));
  for (const file of files(KUBERNETES).filter((f) => /\.ya?ml$/.test(f))) {
    for (const doc of YAML.parseAllDocuments(read(file)).map((d) => d.toJS())) {
      expect({ file: path.relative(ROOT, file), kind: doc?.kind }).not.toEqual({ file: path.relative(ROOT, file), kind: 'Secret' });
    }
  }
  const spec = podSpec();
  const needed = new Map<string, Set<string>>();
  const need = (name: string, key: string) => needed.set(name, (needed.get(name) ?? new Set()).add(key));
  for (const c of containers()) for (const variable of c.env ?? []) if (variable.valueFrom?.secretKeyRef) need(variable.valueFrom.secretKeyRef.name, variable.valueFrom.secretKeyRef.key);
  for (const volume of spec.volumes) if (volume.secret) for (const key of ['tls.crt', 'tls.key']) need(volume.secret.secretName, key);
  expect(Object.fromEntries([...needed].map(([name, keys]) => [name, [...keys].sort()]))).toEqual({
    chatgate: ['admin-token', 'keystore-url', 'redis-url'],
    'chatgate-tls': ['tls.crt', 'tls.key'],
  });
  const readme = read(KUBERNETES, 'README.md');
  expect(readme).toContain('create secret generic chatgate ');
  expect(readme).toContain('create secret tls chatgate-tls ');
  for (const key of needed.get('chatgate')!) expect(readme).toContain(`--from-literal=${key}=`);
  // The environment variables are the ones the gateway reads.
  expect(podSpec().containers[0].env.map((v: { name: string }) => v.name).sort()).toEqual(['CHATGATE_ADMIN_TOKEN', 'CHATGATE_KEYSTORE_URL', 'CHATGATE_REDIS_URL']);
});

test('a rollout drains: preStop pause, then the drain, within the termination grace period', () => {
  const c = podSpec().containers[0];
  const [command, seconds, ...rest] = c.lifecycle.preStop.exec.command;
  expect([command, rest]).toEqual(['sleep', []]);
  const pause = Number(seconds);
  expect(pause).toBeGreaterThanOrEqual(5);
  for (const objects of [base, overlay]) {
    const drain = gatewayConfig(objects).shutdown.drainTimeoutMs / 1000;
    expect(drain).toBeGreaterThanOrEqual(30);
    expect(podSpec().terminationGracePeriodSeconds).toBeGreaterThan(pause + drain);
  }
  expect(deployment().spec.strategy).toEqual({ type: 'RollingUpdate', rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } });
});

test('readiness is /readyz (degraded, not unready, while the key store is away), liveness /healthz, both on the admin port', () => {
  const c = podSpec().containers[0];
  expect(c.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'admin' });
  expect(c.livenessProbe.httpGet).toEqual({ path: '/healthz', port: 'admin' });
  expect(c.startupProbe.httpGet).toEqual({ path: '/healthz', port: 'admin' });
  // /readyz answers within 1.5 s whatever its dependencies do; the probe waits longer than that.
  expect(c.readinessProbe.timeoutSeconds).toBeGreaterThanOrEqual(2);
});

test('the replicas spread over zones and nodes, scale on CPU, and are disrupted one at a time', () => {
  const d = deployment();
  const podLabels = d.spec.template.metadata.labels;
  const spread = podSpec().topologySpreadConstraints as K8sObject[];
  expect(spread.map((c) => c.topologyKey).sort()).toEqual(['kubernetes.io/hostname', 'topology.kubernetes.io/zone']);
  for (const constraint of spread) {
    expect(constraint.maxSkew).toBe(1);
    expect(selects(constraint.labelSelector.matchLabels, podLabels)).toBe(true);
  }
  const hpa = one(overlay, 'HorizontalPodAutoscaler');
  expect(hpa.spec.scaleTargetRef).toEqual({ apiVersion: 'apps/v1', kind: 'Deployment', name: d.metadata.name });
  expect(hpa.spec.metrics).toEqual([{ type: 'Resource', resource: { name: 'cpu', target: { type: 'Utilization', averageUtilization: expect.any(Number) } } }]);
  expect(hpa.spec.minReplicas).toBeGreaterThanOrEqual(2);
  expect(hpa.spec.maxReplicas).toBeGreaterThan(hpa.spec.minReplicas);
  expect(d.spec.replicas).toBeUndefined(); // the HPA's to set: an apply must not undo its scaling
  expect(podSpec().containers[0].resources.requests.cpu).toBeDefined(); // utilisation is relative to it
  const pdb = one(overlay, 'PodDisruptionBudget');
  expect(selects(pdb.spec.selector.matchLabels, podLabels)).toBe(true);
  expect(pdb.spec).toMatchObject({ maxUnavailable: 1 });
});

test('the image is pulled from a registry at a pinned release', () => {
  const version = JSON.parse(read(ROOT, 'package.json')).version;
  for (const objects of [base, overlay]) {
    const images = objects.filter((o) => o.kind === 'Deployment').flatMap((d) => d.spec.template.spec.containers.map((c: { image: string }) => c.image));
    expect(images).toEqual([`ghcr.io/chatgate/chatgate:${version}`]);
  }
});

test('the ServiceMonitor scrapes the pods by IP on the admin port, as job "chatgate", and the alerts come with it', () => {
  const monitor = one(overlay, 'ServiceMonitor');
  const services = overlay.filter((o) => o.kind === 'Service' && selects(monitor.spec.selector.matchLabels, o.metadata.labels));
  expect(services.map((s) => s.metadata.name)).toEqual(['chatgate-metrics']);
  const service = services[0]!;
  expect(service.spec.clusterIP).toBe('None'); // headless: endpoints (pod IPs) only
  const [endpoint, ...more] = monitor.spec.endpoints;
  expect(more).toEqual([]);
  expect(endpoint).toMatchObject({ port: 'admin', path: '/metrics', scheme: 'http' });
  expect(service.spec.ports.find((p: { name: string }) => p.name === endpoint.port)).toMatchObject({ targetPort: 'admin' });
  // Prometheus' job label comes from the Service's label named by jobLabel: what up{job="chatgate"} expects.
  expect(service.metadata.labels?.[monitor.spec.jobLabel]).toBe('chatgate');
  expect(read(DEPLOY, 'prometheus', 'rules.yml')).toContain('up{job="chatgate"}');
  // The example labels both for kube-prometheus-stack's selectors.
  for (const kind of ['ServiceMonitor', 'PrometheusRule']) expect(one(overlay, kind).metadata.labels).toHaveProperty('release');
});
