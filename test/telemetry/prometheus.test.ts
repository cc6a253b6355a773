/**
 * The real Prometheus (Debian's package) scrapes a running gateway: after known traffic, its HTTP API
 * reports the request counts sent, and a latency median no faster than the worker that equals the one
 * computed from the gateway's own buckets.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { bearer, chatBody, request } from '../helpers/http';
import { scrape } from '../helpers/metrics';
import { freePort } from '../helpers/net';
import { startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';
import { eventually } from '../helpers/time';

const WORKER_LATENCY_MS = 150; // no answer is faster
const SENT_OK = 30;
const SENT_UNAUTHENTICATED = 7;

let worker: WorkerProcess;
let gw: TestGateway;
let prometheus: ChildProcess;
let prometheusUrl: string;
let dir: string;

beforeAll(async () => {
  worker = await startWorker({ latencyMs: WORKER_LATENCY_MS });
  gw = await startTestGateway({ providers: { mock: { workers: [worker.url] } } });
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-prometheus-'));
  writeFileSync(
    path.join(dir, 'prometheus.yml'),
    `global: { scrape_interval: 1s }\nscrape_configs:\n  - job_name: chatgate\n    static_configs: [{ targets: ['${new URL(gw.adminUrl).host}'] }]\n`,
  );
  const port = await freePort();
  prometheusUrl = `http://127.0.0.1:${port}`;
  prometheus = spawn('prometheus', [`--config.file=${path.join(dir, 'prometheus.yml')}`, `--storage.tsdb.path=${path.join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${port}`], { stdio: 'ignore' });
}, 30_000);
afterAll(async () => {
  if (prometheus) await stopProcess(prometheus);
  await gw?.stop();
  await worker?.stop();
  rmSync(dir, { recursive: true, force: true });
});

async function query(promql: string): Promise<Array<{ metric: Record<string, string>; value: [number, string] }>> {
  const response = await fetch(`${prometheusUrl}/api/v1/query?query=${encodeURIComponent(promql)}`).catch(() => undefined);
  if (!response?.ok) return [];
  return ((await response.json()) as { data: { result: Array<{ metric: Record<string, string>; value: [number, string] }> } }).data.result;
}

test('Prometheus scrapes the gateway: request counts match the traffic sent, and the latency quantile its latency', async () => {
  const { key } = await gw.issueKey();
  await Promise.all(Array.from({ length: SENT_OK }, () => request(gw.url, { ca: gw.ca, headers: bearer(key), body: chatBody() })));
  await Promise.all(Array.from({ length: SENT_UNAUTHENTICATED }, () => request(gw.url, { ca: gw.ca, headers: bearer('cg_not_a_key'), body: chatBody() })));

  const byStatus = await eventually(async () => {
    const result = await query('sum by (status) (chatgate_requests_total)');
    const counts = Object.fromEntries(result.map((r) => [r.metric.status, Number(r.value[1])]));
    return counts['200'] === SENT_OK && counts['401'] === SENT_UNAUTHENTICATED ? counts : undefined;
  }, 20_000);
  expect(byStatus).toEqual({ '200': SENT_OK, '401': SENT_UNAUTHENTICATED });

  const [median] = await query('histogram_quantile(0.5, sum by (le) (chatgate_request_duration_seconds_bucket{provider="mock"}))');
  const seconds = Number(median!.value[1]);
  expect(seconds).toBeGreaterThan(WORKER_LATENCY_MS / 1000); // no answer can be faster than the worker
  // And it is the median of what the gateway itself exposes (no traffic since), by Prometheus's own interpolation.
  expect(seconds).toBeCloseTo(medianOfBuckets(await scrape(gw.adminUrl), 'chatgate_request_duration_seconds_bucket{le="', ',endpoint="chat",provider="mock"}'), 6);
}, 40_000);

/** histogram_quantile(0.5, ...) over one series' cumulative buckets: linear within the bucket holding the rank. */
function medianOfBuckets(exposition: string, prefix: string, suffix: string): number {
  const buckets = exposition
    .split('\n')
    .filter((line) => line.startsWith(prefix) && line.includes(`"${suffix} `) && !line.startsWith(`${prefix}+Inf`))
    .map((line) => ({ le: Number(line.slice(prefix.length, line.indexOf('"', prefix.length))), count: Number(line.split(' ').pop()) }));
  const rank = buckets[buckets.length - 1]!.count / 2;
  const at = buckets.findIndex((bucket) => bucket.count >= rank);
  const [lower, below] = at === 0 ? [0, 0] : [buckets[at - 1]!.le, buckets[at - 1]!.count];
  return lower + ((buckets[at]!.le - lower) * (rank - below)) / (buckets[at]!.count - below);
}
