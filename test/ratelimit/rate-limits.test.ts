/**
 * Per-key limits over real sockets: request and token limits with counts from real worker answers
 * (streaming and not), concurrency caps, the headers, usage accounting; the memory and Redis stores
 * behaving alike; one combined limit across two gateway processes; Redis going away and coming back.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import type { IncomingMessage } from 'node:http';
import { issueKey } from '../../src/auth/issue';
import { SqliteKeyStore } from '../../src/store/sqlite/store';
import { MemoryRateLimitStore } from '../../src/ratelimit/memory';
import { RedisRateLimitStore } from '../../src/ratelimit/redis';
import type { RateLimitStore } from '../../src/ratelimit/store';
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { bearer, chatBody, openaiClient, type RawResponse, request } from '../helpers/http';
import { sample, scrape } from '../helpers/metrics';
import { startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';
import { sharedRedisUrl, ThrowawayRedis } from '../helpers/redis';
import Redis from 'ioredis';
import { eventually, sleep } from '../helpers/time';

const TOKEN = 'rate-limit-admin-token-0123456789';
let worker: WorkerProcess;

beforeAll(async () => {
  worker = await startWorker();
});
afterAll(() => worker?.stop());

const send = (gw: { url: string; ca: string }, key: string, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}) =>
  request(gw.url, { ca: gw.ca, headers: { ...bearer(key), ...headers }, body: chatBody(extra) });

describe('one gateway, limits in memory', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startTestGateway({
      providers: { mock: { workers: [worker.url] } },
      admin: { host: '127.0.0.1', port: 0, token: TOKEN },
      auth: { createFirstKey: false, lastUsedFlushMs: 100 },
    });
  });
  afterAll(() => gw?.stop());

  test('10 requests a minute: exactly 10 through, the 11th gets 429 with a correct Retry-After and the headers', async () => {
    const { key } = await gw.issueKey({ rateLimit: { requestsPerMinute: 10 } });
    const statuses: number[] = [];
    let last: RawResponse | undefined;
    for (let i = 0; i < 11; i++) {
      last = await send(gw, key);
      statuses.push(last.status);
      if (i === 0) {
        expect(last.headers['x-ratelimit-limit-requests']).toBe('10');
        expect(last.headers['x-ratelimit-remaining-requests']).toBe('9');
        expect(last.headers['x-ratelimit-reset-requests']).toBe('6s');
      }
    }
    expect(statuses).toEqual([...Array(10).fill(200), 429]);
    expect(last!.json().error).toMatchObject({ type: 'rate_limit_error', code: 'rate_limit_exceeded' });
    expect(last!.headers['retry-after']).toBe('6'); // one request per 6 s refills
    expect(Number(last!.headers['retry-after-ms'])).toBeGreaterThan(5000);
    expect(last!.headers['x-ratelimit-remaining-requests']).toBe('0');
    expect(sample(await scrape(gw.adminUrl), 'chatgate_rate_limited_total{reason="requests"}')).toBeGreaterThanOrEqual(1);
  });

  test.each([false, true])('tokens a minute, counted from the worker answers (stream: %p)', async (stream) => {
    // Each mock answer: 16 completion tokens plus a few prompt tokens, about 21 in all.
    const { key } = await gw.issueKey({ rateLimit: { tokensPerMinute: 50 } });
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) statuses.push((await send(gw, key, { stream })).status);
    expect(statuses).toEqual([200, 200, 200, 429]); // 50 -> 29 -> 8 -> below zero: refused
  });

  test('the usage chunk the gateway asked for reaches only a client that asked for it too', async () => {
    const { key } = await gw.issueKey();
    const plain = await send(gw, key, { stream: true });
    expect(plain.body).not.toContain('"usage"');
    expect(plain.body.trimEnd().endsWith('data: [DONE]')).toBe(true);
    const asked = await send(gw, key, { stream: true, stream_options: { include_usage: true } });
    expect(asked.body).toMatch(/"choices":\[\],"usage":\{"prompt_tokens":\d+,"completion_tokens":16/);
    const [seen] = (await worker.requests()).slice(-2);
    expect(JSON.parse(seen!.body).stream_options).toEqual({ include_usage: true });
  });

  test('tokens are counted in the metric (by provider, listed model, kind) and per key in the admin API', async () => {
    const created = await request(gw.adminUrl, {
      method: 'POST',
      path: '/admin/api/keys',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'metered', rateLimit: { requestsPerMinute: 100 } }),
    });
    const { key, id } = created.json<{ key: string; id: string }>();
    const before = await scrape(gw.adminUrl);
    await send(gw, key);
    const client = openaiClient(gw.url, key, gw.ca);
    for await (const chunk of await client.chat.completions.create({ model: 'mock/echo', stream: true, messages: [{ role: 'user', content: 'count me' }] })) void chunk;
    const after = await scrape(gw.adminUrl);
    const completion = 'chatgate_tokens_total{endpoint="chat",provider="mock",model="echo",alias="none",kind="completion"}';
    expect(sample(after, completion) - sample(before, completion)).toBe(32);
    const usage = await eventually(async () => {
      const view = (await request(gw.adminUrl, { method: 'GET', path: `/admin/api/keys/${id}`, headers: { authorization: `Bearer ${TOKEN}` } })).json<{ usage: { requests: number; completionTokens: number } }>();
      return view.usage.completionTokens === 32 ? view.usage : undefined;
    });
    expect(usage.requests).toBe(2);
    // A model name the worker does not list is counted as "other": labels stay bounded.
    await send(gw, key, { model: 'mock/some-unlisted-name' });
    expect(sample(await scrape(gw.adminUrl), 'chatgate_tokens_total{endpoint="chat",provider="mock",model="other",alias="none",kind="completion"}')).toBe(16);
  });

  test('at most N requests at once per key: the next gets 429 (concurrency) until one finishes', async () => {
    const { key } = await gw.issueKey({ rateLimit: { maxConcurrent: 1 } });
    const slow = new Promise<IncomingMessage>((resolve) => {
      https
        .request(`${gw.url}/v1/chat/completions`, { method: 'POST', ca: gw.ca, agent: false, headers: { ...bearer(key), 'x-mock-latency-ms': '400' } }, resolve)
        .end(chatBody());
    });
    await sleep(100);
    const second = await send(gw, key);
    expect(second.status).toBe(429);
    expect(second.json().error.message).toContain('concurrent');
    (await slow).resume();
    await new Promise((resolve) => (slow as Promise<IncomingMessage>).then((r) => r.on('end', resolve)));
    expect((await send(gw, key)).status).toBe(200);
  });
});

describe.each([
  ['memory', async () => ({ store: new MemoryRateLimitStore() as RateLimitStore })],
  [
    'redis',
    async () => {
      const redis = new RedisRateLimitStore(await sharedRedisUrl(), 500, { connection: () => undefined });
      await redis.connected();
      return { store: redis as RateLimitStore };
    },
  ],
])('the %s store', (_name, make) => {
  let store: RateLimitStore;
  beforeAll(async () => {
    ({ store } = await make());
  });
  afterAll(() => store.close());
  const id = () => `key_${Math.random().toString(36).slice(2)}`;

  test('admits the limit, then refuses with the refill time', async () => {
    const key = id();
    const decisions = [];
    for (let i = 0; i < 6; i++) decisions.push(await store.admit(key, { requestsPerMinute: 5 }, `r${i}`));
    expect(decisions.map((d) => d.allowed)).toEqual([true, true, true, true, true, false]);
    expect(decisions[0]!.quota.requests).toMatchObject({ limit: 5, remaining: 4 });
    expect(decisions[5]!.reason).toBe('requests');
    expect(decisions[5]!.retryAfterMs).toBeGreaterThan(11_000);
    expect(decisions[5]!.retryAfterMs).toBeLessThanOrEqual(12_000);
  });

  test('debits tokens after the fact', async () => {
    const key = id();
    expect((await store.admit(key, { tokensPerMinute: 100 }, 'a')).allowed).toBe(true);
    await store.debitTokens(key, 100, 150);
    const refused = await store.admit(key, { tokensPerMinute: 100 }, 'b');
    expect(refused).toMatchObject({ allowed: false, reason: 'tokens' });
    expect(refused.retryAfterMs).toBeGreaterThan(30_000);
  });

  test('holds concurrency slots until released', async () => {
    const key = id();
    expect((await store.admit(key, { maxConcurrent: 2 }, 'a')).allowed).toBe(true);
    expect((await store.admit(key, { maxConcurrent: 2 }, 'b')).allowed).toBe(true);
    expect(await store.admit(key, { maxConcurrent: 2 }, 'c')).toMatchObject({ allowed: false, reason: 'concurrency' });
    await store.release(key, 'a');
    expect((await store.admit(key, { maxConcurrent: 2 }, 'c')).allowed).toBe(true);
  });
});

describe('two gateway processes sharing Redis', () => {
  let dir: string;
  let replicas: GatewayProcess[];
  let key: string;

  beforeAll(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-rl-'));
    const storeFile = path.join(dir, 'chatgate.db');
    ({ key } = await issueKey(new SqliteKeyStore(storeFile), { name: 'shared', rateLimit: { requestsPerMinute: 10 } }));
    const settings = { keyStore: { type: 'sqlite', path: storeFile }, providers: { mock: { workers: [worker.url] } } };
    const redisUrl = await sharedRedisUrl();
    replicas = await Promise.all(['a', 'b'].map((name) => startGatewayProcess(dir, name, settings, { CHATGATE_REDIS_URL: redisUrl })));
  });
  afterAll(async () => {
    await Promise.all((replicas ?? []).map((r) => stopProcess(r.child)));
    rmSync(dir, { recursive: true, force: true });
  });

  test('enforce one combined limit: 10 a minute in all, whichever replica takes them', async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 14; i++) statuses.push((await send(replicas[i % 2]!, key)).status);
    expect(statuses.filter((s) => s === 200)).toHaveLength(10);
    expect(statuses.slice(10)).toEqual([429, 429, 429, 429]);
  });
});

describe('Redis going away and coming back', () => {
  let redis: ThrowawayRedis;
  let open: TestGateway;
  let closed: TestGateway;

  beforeAll(async () => {
    redis = await ThrowawayRedis.start();
    const settings = (failOpen: boolean) => ({
      providers: { mock: { workers: [worker.url] } },
      rateLimit: { store: 'redis', url: redis.url, failOpen, timeoutMs: 200 },
    });
    [open, closed] = await Promise.all([startTestGateway(settings(true)), startTestGateway(settings(false))]);
  });
  afterAll(async () => {
    await Promise.all([open?.stop(), closed?.stop()]);
    await redis?.stop();
  });

  test('fail open admits, fail closed refuses with 503; nothing hangs; limits resume when it is back', async () => {
    const { key: openKey } = await open.issueKey({ rateLimit: { requestsPerMinute: 3 } });
    const { key: closedKey } = await closed.issueKey({ rateLimit: { requestsPerMinute: 3 } });
    for (let i = 0; i < 3; i++) expect((await send(open, openKey)).status).toBe(200);
    expect((await send(open, openKey)).status).toBe(429);

    await redis.stop();
    const started = performance.now();
    const duringOutage = [];
    for (let i = 0; i < 5; i++) duringOutage.push((await send(open, openKey)).status);
    const refused = await send(closed, closedKey);
    const elapsed = performance.now() - started;
    expect(duringOutage).toEqual([200, 200, 200, 200, 200]);
    expect(refused.status).toBe(503);
    expect(refused.json().error.code).toBe('rate_limiter_unavailable');
    expect(elapsed).toBeLessThan(5000); // six requests, each answered within the store timeout, not hung
    expect(sample(await scrape(open.adminUrl), 'chatgate_rate_limit_store_errors_total')).toBeGreaterThanOrEqual(5);

    await redis.resume();
    // The client reconnects by itself and limits are enforced again: a round of 4 reaches a 429 (eventually throws otherwise).
    await eventually(async () => {
      const round = [];
      for (let i = 0; i < 4; i++) round.push((await send(open, openKey)).status);
      return round.includes(429) ? round : undefined;
    }, 10_000);
    // The fail-closed gateway reconnects by itself too (each on its own schedule: not the moment the
    // other did), and then serves again.
    await eventually(async () => ((await send(closed, closedKey)).status === 200 ? true : undefined), 10_000);
  });
});

describe('Redis lost while a request holds a concurrency slot, and back with its data', () => {
  let dir: string;
  let redis: ThrowawayRedis;
  let gw: TestGateway;
  let inspect: Redis;

  beforeAll(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-rl-aof-'));
    redis = await ThrowawayRedis.start({ dataDir: dir });
    gw = await startTestGateway({ providers: { mock: { workers: [worker.url] } }, rateLimit: { store: 'redis', url: redis.url, failOpen: true, timeoutMs: 200 } });
    inspect = new Redis(redis.url, { maxRetriesPerRequest: 1 });
    inspect.on('error', () => undefined);
  });
  afterAll(async () => {
    inspect?.disconnect();
    await gw?.stop();
    await redis?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test('the release Redis could not take is owed and paid when it is back: the key is not locked out until the slot goes stale', async () => {
    const { key, id } = await gw.issueKey({ rateLimit: { maxConcurrent: 1 } });
    const slots = `chatgate:rl:{${id}}:slots`;
    const answer = new Promise<IncomingMessage>((resolve) => {
      https
        .request(`${gw.url}/v1/chat/completions`, { method: 'POST', ca: gw.ca, agent: false, headers: { ...bearer(key), 'x-mock-latency-ms': '2000' } }, resolve)
        .end(chatBody());
    });
    await eventually(async () => ((await inspect.zcard(slots)) === 1 ? true : undefined));
    await redis.stop(); // the slot is on disk; the gateway's connection is gone
    const response = await answer;
    response.resume();
    await new Promise((resolve) => response.on('end', resolve));
    expect(response.statusCode).toBe(200);
    const errorsAfterRelease = await eventually(async () => {
      const errors = sample(await scrape(gw.adminUrl), 'chatgate_rate_limit_store_errors_total');
      return errors >= 1 ? errors : undefined;
    });
    expect(errorsAfterRelease).toBeGreaterThanOrEqual(1);

    // The slot is on disk and comes back with Redis; only the gateway's owed release lets it go (a
    // release merely counted as failed left it held for STALE_SLOT_MS, 15 minutes).
    await redis.resume();
    await eventually(async () => ((await inspect.zcard(slots).catch(() => undefined)) === 0 ? true : undefined), 10_000);
    expect((await send(gw, key)).status).toBe(200);
  });
});

describe('Redis frozen (SIGSTOP) while requests are admitted, then resumed', () => {
  let redis: ThrowawayRedis;
  let gw: TestGateway;
  let inspect: Redis;

  beforeAll(async () => {
    redis = await ThrowawayRedis.start();
    gw = await startTestGateway({ providers: { mock: { workers: [worker.url] } }, rateLimit: { store: 'redis', url: redis.url, failOpen: true, timeoutMs: 200 } });
    inspect = new Redis(redis.url, { maxRetriesPerRequest: 1 });
    inspect.on('error', () => undefined);
  });
  afterAll(async () => {
    inspect?.disconnect();
    await gw?.stop();
    redis?.child?.kill('SIGCONT');
    await redis?.stop();
  });

  // A frozen Redis runs the admission scripts it had read once it wakes, long after the gateway gave
  // up on them: each takes a concurrency slot that no request will release.
  test('admissions that timed out and ran when Redis woke leave no slot held: released within a second or so of Redis answering', async () => {
    const { key, id } = await gw.issueKey({ rateLimit: { maxConcurrent: 2 } });
    const slots = `chatgate:rl:{${id}}:slots`;
    redis.child!.kill('SIGSTOP');
    let statuses: number[];
    try {
      statuses = await Promise.all(Array.from({ length: 6 }, async () => (await send(gw, key)).status));
    } finally {
      redis.child!.kill('SIGCONT');
    }
    expect(statuses).toEqual(Array(6).fill(200)); // fail open: admitted, unlimited, while Redis could not answer
    const resumed = performance.now();
    await eventually(async () => ((await inspect.zcard(slots).catch(() => undefined)) === 0 ? true : undefined), 10_000);
    expect(performance.now() - resumed).toBeLessThan(3000); // the owed releases are retried every second
    const both = await Promise.all([send(gw, key), send(gw, key)]);
    expect(both.map((response) => response.status)).toEqual([200, 200]); // not locked out
  });
});
