/**
 * The admin listener: Prometheus metrics that move with traffic and pass promtool's checks,
 * liveness and readiness.
 */
import { spawnSync } from 'node:child_process';
import { gatewayWithWorker } from '../helpers/fixture';
import { startTestGateway } from '../helpers/gateway';
import { bearer, chatBody, request } from '../helpers/http';
import { sample, scrape } from '../helpers/metrics';
import { cuttableStore } from '../helpers/postgres';
import { issueKey } from '../../src/auth/issue';
import { PostgresKeyStore } from '../../src/store/postgres/store';
import { eventually } from '../helpers/time';

const f = gatewayWithWorker();

const scrapeGateway = () => scrape(f.gw.adminUrl);

test('/metrics is the Prometheus text format', async () => {
  const response = await fetch(`${f.gw.adminUrl}/metrics`);
  expect(response.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
});

test('request, auth and cache metrics count what happened', async () => {
  // Warm: the key is cached, and the file store's notice of the write that made it (its watcher
  // says "anything may have changed", and may come late on a loaded machine) has come and gone.
  await eventually(async () => {
    const hits = sample(await scrapeGateway(), 'chatgate_key_cache_hits_total');
    expect((await request(f.gw.url, { ca: f.gw.ca, headers: bearer(f.key), body: chatBody() })).status).toBe(200);
    return sample(await scrapeGateway(), 'chatgate_key_cache_hits_total') > hits ? true : undefined;
  }, 5000);
  const before = await scrapeGateway();
  for (let i = 0; i < 3; i++) expect((await request(f.gw.url, { ca: f.gw.ca, headers: bearer(f.key), body: chatBody() })).status).toBe(200);
  expect((await request(f.gw.url, { ca: f.gw.ca, body: chatBody() })).status).toBe(401);
  expect((await request(f.gw.url, { ca: f.gw.ca, headers: bearer(`cgk_${'B'.repeat(43)}`), body: chatBody() })).status).toBe(401);
  const after = await scrapeGateway();

  const delta = (series: string) => sample(after, series) - sample(before, series);
  expect(delta('chatgate_requests_total{endpoint="chat",provider="mock",status="200"}')).toBe(3);
  expect(delta('chatgate_requests_total{endpoint="chat",provider="none",status="401"}')).toBe(2);
  expect(delta('chatgate_auth_failures_total{reason="missing"}')).toBe(1);
  expect(delta('chatgate_auth_failures_total{reason="unknown"}')).toBe(1);
  expect(delta('chatgate_errors_total{code="invalid_api_key"}')).toBe(1);
  expect(delta('chatgate_key_cache_hits_total') + delta('chatgate_key_cache_misses_total')).toBe(4);
  expect(delta('chatgate_key_cache_hits_total')).toBeGreaterThanOrEqual(2);
  expect(delta('chatgate_upstream_time_to_first_byte_seconds_count{provider="mock"}')).toBe(3);
  expect(delta('chatgate_gateway_overhead_seconds_count{provider="mock"}')).toBe(3);
  expect(delta('chatgate_request_duration_seconds_count{endpoint="chat",provider="mock"}')).toBe(3);
  expect(sample(after, 'chatgate_requests_in_flight')).toBe(0);
  expect(after).toMatch(/^process_cpu_seconds_total /m);
  expect(after).not.toContain(f.key);
});

test('a stream is measured chunk by chunk: time to its first token, and between tokens', async () => {
  const before = await scrapeGateway();
  const tokens = 6;
  const streamed = await request(f.gw.url, { ca: f.gw.ca, headers: { ...bearer(f.key), 'x-mock-tokens': String(tokens), 'x-mock-tokens-per-second': '50' }, body: chatBody({ stream: true }) });
  expect(streamed.status).toBe(200);
  const after = await scrapeGateway();
  const delta = (series: string) => sample(after, series) - sample(before, series);
  expect(delta('chatgate_stream_time_to_first_token_seconds_count{provider="mock"}')).toBe(1);
  // The worker paces one token per 20 ms: the gaps between chunks are seen as such, not as ~0.
  const gaps = delta('chatgate_stream_inter_token_seconds_count{provider="mock"}');
  expect(gaps).toBeGreaterThanOrEqual(tokens - 1);
  expect(after).toContain('chatgate_stream_inter_token_seconds_bucket{le="0.01",provider="mock"} ');
  expect(delta('chatgate_stream_inter_token_seconds_bucket{le="0.01",provider="mock"}')).toBeLessThan(gaps);
  const nonStream = await request(f.gw.url, { ca: f.gw.ca, headers: bearer(f.key), body: chatBody() });
  expect(nonStream.status).toBe(200);
  expect(sample(await scrapeGateway(), 'chatgate_stream_time_to_first_token_seconds_count{provider="mock"}')).toBe(sample(after, 'chatgate_stream_time_to_first_token_seconds_count{provider="mock"}'));
});

test('the exposition passes promtool check metrics (lint included)', async () => {
  const text = await scrapeGateway();
  const result = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  expect(result.error).toBeUndefined(); // promtool is installed (.ci/run installs Debian's prometheus)
  expect({ status: result.status, output: result.stdout + result.stderr }).toEqual({ status: 0, output: '' });
});

test('/healthz says alive; /readyz says ready, and degraded (still 200) when the key store cannot be reached while known keys serve', async () => {
  const store = await cuttableStore();
  // The key is made before the gateway starts: made after, its insert's notification can come in
  // after its first use has cached it (CI, loaded, on Node 24), and drop it from the cache.
  const maker = await PostgresKeyStore.open(store.keyStore.url);
  const { key } = await issueKey(maker, { name: 'known before the cut' });
  await maker.close();
  const gw = await startTestGateway({ providers: { mock: { workers: [f.worker.url] } }, keyStore: store.keyStore });
  try {
    expect(await (await fetch(`${gw.adminUrl}/healthz`)).json()).toEqual({ status: 'ok' });
    expect((await request(gw.url, { ca: gw.ca, headers: bearer(key), body: chatBody() })).status).toBe(200);
    const ready = await fetch(`${gw.adminUrl}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({ status: 'ready', checks: { accepting: true, keyStore: 'up', cachedKeys: 1, providers: { mock: true } } });
    expect(sample(await scrape(gw.adminUrl), 'chatgate_dependency_up{dependency="key_store"}')).toBe(1);

    store.cut();
    const broken = await fetch(`${gw.adminUrl}/readyz`);
    expect(broken.status).toBe(200);
    expect(await broken.json()).toEqual({ status: 'degraded', checks: { accepting: true, keyStore: 'degraded', cachedKeys: 1, providers: { mock: true } } });
    // The key that worked a moment ago still does; a key the store never confirmed gets a 503 in the OpenAI shape.
    expect((await request(gw.url, { ca: gw.ca, headers: bearer(key), body: chatBody() })).status).toBe(200);
    const refused = await request(gw.url, { ca: gw.ca, headers: bearer(`cgk_${'C'.repeat(43)}`), body: chatBody() });
    expect(refused.status).toBe(503);
    expect(refused.json().error.code).toBe('key_store_unavailable');
    expect(sample(await scrape(gw.adminUrl), 'chatgate_dependency_up{dependency="key_store"}')).toBe(0);
  } finally {
    await gw.stop();
    await store.drop();
  }
});
