/**
 * Reservations against bursts, through a real gateway process (the embedded SQLite store) and a mock
 * worker slow enough that a burst's requests are all in flight at once: 40 concurrent requests
 * against a 300-token daily quota serve at most 10 % over it, later requests still reach at least
 * 90 % of it, and the hostile client's output bounds (negative, fractional, a string, two fields
 * that disagree) buy no smaller reservation.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { bearer, chatBody, request } from '../helpers/http';
import { startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';

const TOKEN = 'quota-reserve-admin-token-0123456789';
const QUOTA = 300;
let worker: WorkerProcess;
let gateway: GatewayProcess;
let dir: string;

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-quota-reserve-'));
  // 40 tokens a second: a 20-token answer takes half a second, so a burst is in flight together.
  worker = await startWorker({ tokensPerSecond: 40 });
  gateway = await startGatewayProcess(dir, 'reserve', {
    admin: { host: '127.0.0.1', port: 0, token: TOKEN },
    providers: { mock: { workers: [worker.url] } },
    quota: { syncMs: 200 },
  });
});
afterAll(async () => {
  if (gateway) await stopProcess(gateway.child);
  await worker?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const admin = (method: string, apiPath: string, body?: unknown) =>
  request(gateway.adminUrl, { method, path: `/admin/api${apiPath}`, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
const chat = (key: string, extra: Record<string, unknown>) => request(gateway.url, { ca: gateway.ca, headers: bearer(key), body: chatBody(extra) });
type Answer = { usage?: { total_tokens: number }; error?: { code: string; type: string; param: string | null; message: string } };

async function meteredKey(name: string): Promise<string> {
  const created = await admin('POST', '/keys', { name, quota: { tokensPerDay: QUOTA } });
  expect(created.status).toBe(201);
  return created.json<{ key: string }>().key;
}

test('40 concurrent requests against a 300-token quota serve at most 10 % over it; later requests still reach 90 % of it', async () => {
  const key = await meteredKey('burst');
  const burst = await Promise.all(Array.from({ length: 40 }, () => chat(key, { max_tokens: 20 })));
  const served = burst.filter((answer) => answer.status === 200);
  const refused = burst.filter((answer) => answer.status === 429);
  expect(served.length + refused.length).toBe(40);
  for (const answer of refused) {
    expect(answer.json<Answer>().error).toMatchObject({ type: 'insufficient_quota', code: 'insufficient_quota' });
    expect(Number(answer.headers['retry-after'])).toBeGreaterThan(0);
  }
  const burstTokens = served.reduce((sum, answer) => sum + answer.json<Answer>().usage!.total_tokens, 0);
  expect(burstTokens).toBeGreaterThan(0);
  expect(burstTokens).toBeLessThanOrEqual(QUOTA * 1.1);
  // Then one at a time, small answers, until refused: the quota is spent to at least 90 %, never past 110 %.
  let total = burstTokens;
  for (let i = 0; i < 100; i++) {
    const answer = await chat(key, { max_tokens: 2 });
    if (answer.status === 429) break;
    expect(answer.status).toBe(200);
    total += answer.json<Answer>().usage!.total_tokens;
  }
  expect(total).toBeGreaterThanOrEqual(QUOTA * 0.9);
  expect(total).toBeLessThanOrEqual(QUOTA * 1.1);
  expect((await chat(key, { max_tokens: 1 })).status).toBe(429);
});

test('an output bound that would buy a smaller reservation is refused (400, naming it); of two, the larger is reserved', async () => {
  const key = await meteredKey('hostile');
  for (const [field, value] of [
    ['max_tokens', -1000],
    ['max_tokens', 0],
    ['max_tokens', 2.5],
    ['max_tokens', '20'],
    ['max_completion_tokens', -1],
    ['max_tokens', 1e12],
  ] as const) {
    const answer = await chat(key, { [field]: value });
    expect({ field, value, status: answer.status }).toEqual({ field, value, status: 400 });
    expect(answer.json<Answer>().error).toMatchObject({ type: 'invalid_request_error', param: field });
  }
  // max_tokens 1 with max_completion_tokens 400: 400 does not fit a 300 quota, whichever the worker reads.
  const both = await chat(key, { max_tokens: 1, max_completion_tokens: 400 });
  expect(both.status).toBe(429);
  expect(both.json<Answer>().error?.code).toBe('insufficient_quota');
  // Without a bound, quota.defaultReserveTokens (1024) does not fit a 300 quota either; with one, it is served.
  expect((await chat(key, {})).status).toBe(429);
  expect((await chat(key, { max_tokens: 5 })).status).toBe(200);
});

test('a key without a quota reserves nothing: a request with no output bound and a huge one is served', async () => {
  const created = await admin('POST', '/keys', { name: 'free' });
  const key = created.json<{ key: string }>().key;
  expect((await chat(key, { max_tokens: 5 })).status).toBe(200);
  expect((await chat(key, { max_tokens: 50_000_000 })).status).toBe(200);
});

test('n multiplies the reservation: 64 answers of 5 tokens do not fit 300, one does', async () => {
  const key = await meteredKey('many answers');
  const many = await chat(key, { max_tokens: 5, n: 64 });
  expect(many.status).toBe(429);
  expect(many.json<Answer>().error?.code).toBe('insufficient_quota');
  expect((await chat(key, { max_tokens: 5, n: 1 })).status).toBe(200);
});

test('a request under a quota that sets no bound gets the one it reserved in its worker body; one that sets its own keeps it', async () => {
  const created = await admin('POST', '/keys', { name: 'roomy', quota: { tokensPerDay: 100_000 } });
  const key = created.json<{ key: string }>().key;
  await worker.clear();
  expect((await chat(key, {})).status).toBe(200);
  expect((await chat(key, { max_tokens: 7 })).status).toBe(200);
  const bodies = (await worker.requests()).map((recorded) => JSON.parse(recorded.body) as { max_tokens?: number });
  expect(bodies.map((body) => body.max_tokens)).toEqual([1024, 7]);
  // A key without a quota: its body goes as the client sent it.
  const free = (await admin('POST', '/keys', { name: 'free body' })).json<{ key: string }>().key;
  await worker.clear();
  expect((await chat(free, {})).status).toBe(200);
  expect((JSON.parse((await worker.requests())[0]!.body) as { max_tokens?: number }).max_tokens).toBeUndefined();
});

test('a request refused after it reserved (a model the key may not use) gives its room back at once', async () => {
  const created = await admin('POST', '/keys', { name: 'other models only', models: ['other/*'], quota: { tokensPerDay: QUOTA } });
  const key = created.json<{ key: string }>().key;
  for (let i = 0; i < 5; i++) {
    const refused = await chat(key, { max_tokens: 250 });
    expect({ i, status: refused.status, code: refused.json<Answer>().error?.code }).toEqual({ i, status: 403, code: 'model_not_allowed' });
  }
});

test('prompts written to tokenize densely ("a a a …") buy no smaller reservation: a burst of 20 against 3,000 tokens serves at most 10 % over', async () => {
  const quota = 3000;
  const created = await admin('POST', '/keys', { name: 'dense', quota: { tokensPerDay: quota } });
  const key = created.json<{ key: string }>().key;
  // 300 one-letter words: about 300 tokens (the worker counts words), 600 bytes (150 tokens by the byte rule alone).
  const messages = [{ role: 'user', content: 'a '.repeat(300) }];
  const burst = await Promise.all(Array.from({ length: 20 }, () => chat(key, { max_tokens: 5, messages })));
  expect(burst.every((answer) => answer.status === 200 || answer.status === 429)).toBe(true);
  const served = burst.filter((answer) => answer.status === 200);
  const used = served.reduce((sum, answer) => sum + answer.json<Answer>().usage!.total_tokens, 0);
  expect(served[0]!.json<Answer>().usage!.total_tokens).toBeGreaterThan(300); // the worker did count them densely
  expect(used).toBeLessThanOrEqual(quota * 1.1);
});
