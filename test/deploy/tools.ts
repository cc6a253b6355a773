/** What the deploy tests share: the repository's paths, and the command-line tools they run (promtool, docker-compose, kubectl). */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';

export const ROOT = path.join(__dirname, '..', '..');
export const DEPLOY = path.join(ROOT, 'deploy');
export const read = (...parts: string[]) => readFileSync(path.join(...parts), 'utf8');

export function run(command: string, args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv } = {}) {
  const result = spawnSync(command, args, { encoding: 'utf8', cwd: options.cwd, env: { ...process.env, ...options.env }, timeout: 60_000 });
  expect(result.error).toBeUndefined(); // the tool is installed (.ci/run installs it)
  return { status: result.status, stdout: result.stdout, stderr: result.stderr, output: result.stdout + result.stderr };
}

/** A Kubernetes object as rendered: only the fields every object has are typed. */
export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  // biome-ignore lint/suspicious/noExplicitAny: the tests walk every kind's own fields (spec, data, ...) freely; typing each Kubernetes kind is out of scope
  [field: string]: any;
}

let kustomizeChecked = false;

/** `kubectl kustomize DIR` (offline), parsed. Fails with a clear message on a kubectl whose kustomize predates v4. */
export function kustomize(dir: string): K8sObject[] {
  if (!kustomizeChecked) {
    const version = JSON.parse(run('kubectl', ['version', '--client', '-o', 'json']).stdout) as {
      clientVersion?: { minor?: string; gitVersion?: string };
      kustomizeVersion?: string; // reported from kubectl 1.24 on
    };
    const recent = version.kustomizeVersion ? /^v([4-9]|\d\d)\./.test(version.kustomizeVersion) : Number.parseInt(version.clientVersion?.minor ?? '0', 10) >= 21;
    if (!recent) {
      const kubectl = version.clientVersion?.gitVersion ?? 'unknown';
      throw new Error(`kubectl ${kubectl} embeds kustomize ${version.kustomizeVersion ?? 'v2 or v3'}: deploy/kubernetes needs kustomize v4 or later (kubectl 1.21+) for directory resources and patches`);
    }
    kustomizeChecked = true;
  }
  const rendered = run('kubectl', ['kustomize', dir]);
  if (rendered.status !== 0) throw new Error(`kubectl kustomize ${dir} failed:\n${rendered.stderr}`);
  return YAML.parseAllDocuments(rendered.stdout).map((doc) => doc.toJS() as K8sObject);
}

/** Whether every label a selector asks for (matchLabels, or a Service's selector) holds in these labels; an empty selector selects nothing here. */
export function selects(wanted: Record<string, string> | undefined, labels: Record<string, string> | undefined): boolean {
  return wanted !== undefined && Object.keys(wanted).length > 0 && Object.entries(wanted).every(([key, value]) => labels?.[key] === value);
}
