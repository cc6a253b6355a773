/**
 * A client that leaves after its request reached a worker and before the answer began still pays.
 * A JSON answer begins only once the worker has generated it all, so a client that hung up a moment
 * before it came used to get the work for nothing. Through a real gateway and a worker on a real
 * socket that holds its answers until the test releases them (or never answers):
 * - the answer that comes within usage.drainAfterDisconnectMs is read for its real usage (JSON and
 *   stream), and the worker's request is not cancelled meanwhile;
 * - no answer within it: the worker's connection is closed and the request is charged what it may
 *   have cost: its prompt estimate and its output bound for each answer (its own `max_tokens`, or the
 *   quota's default reserve written into the worker's body);
 * - the attack: a burst of such requests against a token quota spends the quota (a request after it
 *   is refused 429), where it used to spend nothing;
 * - a client that leaves while still queued for a worker (its request reached none) pays nothing.
 * What is charged is read where operators read it: the key's usage in the store.
 */
import http from 'node:http';
import https from 'node:https';
import type { KeyUsage } from '../../src/store/types';
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { bearer, request } from '../helpers/http';
import { sample, scrape } from '../helpers/metrics';
import { listenOnLoopback } from '../helpers/net';
import { eventually } from '../helpers/time';

const DRAIN_MS = 1000;
const DEFAULT_RESERVE = 64;
const REAL = { prompt: 11, completion: 5 };

/** What the worker got, by the X-Request-Id the gateway sent. */
interface Seen {
  bodyBytes: number;
  body: { max_tokens?: number; n?: number };
  closedAt?: number;
  answered: boolean;
  release: () => void;
}

let worker: http.Server;
let gw: TestGateway;
const seen = new Map<string, Seen>();
const arrived: Array<(id: string) => void> = [];

/** Modes (x-test-mode): `hold-json` and `hold-stream` answer (with usage) once released; `never` never answers. */
function workerHandler(req: http.IncomingMessage, res: http.ServerResponse): void {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    const raw = Buffer.concat(chunks);
    const id = String(req.headers['x-request-id']);
    const entry: Seen = { bodyBytes: raw.length, body: JSON.parse(raw.toString('utf8')) as Seen['body'], answered: false, release: () => undefined };
    seen.set(id, entry);
    res.on('close', () => {
      if (!res.writableFinished) entry.closedAt = Date.now();
    });
    const usage = { prompt_tokens: REAL.prompt, completion_tokens: REAL.completion, total_tokens: REAL.prompt + REAL.completion };
    const mode = String(req.headers['x-test-mode']);
    if (mode === 'hold-json') {
      entry.release = () => {
        entry.answered = true;
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ id: 'c', object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }], usage }));
      };
    } else if (mode === 'hang-up') {
      entry.release = () => res.destroy(); // the worker dies before answering
    } else if (mode === 'hold-stream') {
      entry.release = () => {
        entry.answered = true;
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        const chunk = (payload: object) => `data: ${JSON.stringify(payload)}\n\n`;
        res.end(`${chunk({ object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: 'hi' }, finish_reason: 'stop' }] }) + chunk({ object: 'chat.completion.chunk', choices: [], usage })}data: [DONE]\n\n`);
      };
    }
    for (const waiter of arrived.splice(0)) waiter(id);
  });
}

beforeAll(async () => {
  worker = http.createServer(workerHandler);
  const url = await listenOnLoopback(worker);
  gw = await startTestGateway({
    providers: {
      early: { workers: [url], models: ['m'], upstream: { health: { enabled: false }, firstByteTimeoutMs: 30_000 } },
      queued: { workers: [{ url, maxConcurrent: 1 }], models: ['m'], upstream: { health: { enabled: false }, firstByteTimeoutMs: 30_000, queue: { size: 5, timeoutMs: 10_000 } } },
    },
    auth: { createFirstKey: false, lastUsedFlushMs: 50 },
    usage: { drainAfterDisconnectMs: DRAIN_MS },
    quota: { defaultReserveTokens: DEFAULT_RESERVE },
  });
});
afterAll(async () => {
  await gw?.stop();
  worker.closeAllConnections();
  await new Promise((resolve) => worker.close(resolve));
});

const nextArrival = () => new Promise<string>((resolve) => arrived.push(resolve));

/**
 * Sends a chat request and destroys the connection once the worker has it (before any answer):
 * resolves with the worker's record of it and when the client left.
 */
async function sendAndLeave(key: string, mode: string, extra: Record<string, unknown>, model = 'early/m'): Promise<{ entry: Seen; leftAt: number }> {
  const reached = nextArrival();
  const req = https.request(`${gw.url}/v1/chat/completions`, { method: 'POST', ca: gw.ca, agent: false, headers: { ...bearer(key), 'content-type': 'application/json', 'x-test-mode': mode } });
  req.on('response', () => {
    throw new Error('the client was not to get an answer before it left');
  });
  req.on('error', () => undefined);
  req.end(JSON.stringify({ model, messages: [{ role: 'user', content: 'Tell me a long story, please.' }], ...extra }));
  const id = await reached;
  req.destroy();
  return { entry: seen.get(id)!, leftAt: Date.now() };
}

/** The key's usage in the store once `settled` holds (the recorder writes every 50 ms). */
async function usageOf(id: string, settled: (usage: KeyUsage) => boolean): Promise<KeyUsage> {
  return eventually(async () => {
    const usage = (await gw.store.get(id))?.usage;
    return usage && settled(usage) ? usage : undefined;
  });
}

const promptEstimate = (entry: Seen) => Math.ceil(entry.bodyBytes / 4);

for (const mode of ['hold-json', 'hold-stream'] as const) {
  test(`${mode}: the answer that comes after the client left is read for its real usage; the worker's request is not cancelled`, async () => {
    const { key, id } = await gw.issueKey({ name: `left before ${mode}` });
    const { entry } = await sendAndLeave(key, mode, { max_tokens: 500, ...(mode === 'hold-stream' ? { stream: true } : {}) });
    await eventually(async () => (sample(await scrape(gw.adminUrl), 'chatgate_requests_in_flight') === 0 ? true : undefined)); // the gateway saw the client go
    expect(entry.closedAt).toBeUndefined(); // and kept the worker's request
    entry.release();
    const usage = await usageOf(id, (u) => u.promptTokens > 0);
    expect(usage).toEqual({ requests: 1, promptTokens: REAL.prompt, completionTokens: REAL.completion });
    expect(entry.closedAt).toBeUndefined(); // the worker finished its answer
  });
}

test('no answer within the drain: the worker connection is closed after drainAfterDisconnectMs and the request pays its prompt estimate and its max_tokens for each of its n answers', async () => {
  const { key, id } = await gw.issueKey({ name: 'left, never answered' });
  const { entry, leftAt } = await sendAndLeave(key, 'never', { max_tokens: 40, n: 2 });
  await eventually(() => entry.closedAt, 5000);
  expect(entry.closedAt! - leftAt).toBeGreaterThanOrEqual(DRAIN_MS - 50);
  const usage = await usageOf(id, (u) => u.promptTokens > 0);
  expect(usage).toEqual({ requests: 1, promptTokens: promptEstimate(entry), completionTokens: 80 });
});

test('a request that set no bound, under a quota, pays the default reserve the quota wrote into its worker body', async () => {
  const { key, id } = await gw.issueKey({ name: 'no bound', quota: { tokensPerDay: 100_000, tokensPerMonth: null } });
  const { entry } = await sendAndLeave(key, 'never', {});
  expect(entry.body.max_tokens).toBe(DEFAULT_RESERVE);
  const usage = await usageOf(id, (u) => u.promptTokens > 0);
  expect(usage).toEqual({ requests: 1, promptTokens: promptEstimate(entry), completionTokens: DEFAULT_RESERVE });
});

test('the attack: requests that leave before their answers spend a token quota, and the next request is refused', async () => {
  const QUOTA = 300;
  const { key, id } = await gw.issueKey({ name: 'leaver', quota: { tokensPerDay: QUOTA, tokensPerMonth: null } });
  const left: Seen[] = [];
  // One after another, each leaving as soon as the worker has it: every reservation fits when it is made.
  for (let i = 0; i < 3; i++) left.push((await sendAndLeave(key, 'never', { max_tokens: 60 })).entry);
  const charged = left.reduce((sum, entry) => sum + promptEstimate(entry) + 60, 0);
  const usage = await usageOf(id, (u) => u.promptTokens + u.completionTokens >= charged);
  expect(usage.promptTokens + usage.completionTokens).toBe(charged);
  expect(charged + promptEstimate(left[0]!) + 60).toBeGreaterThan(QUOTA); // so one more does not fit
  const next = await request(gw.url, {
    ca: gw.ca,
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json', 'x-test-mode': 'hold-json' },
    body: JSON.stringify({ model: 'early/m', messages: [{ role: 'user', content: 'Tell me a long story, please.' }], max_tokens: 60 }),
  });
  expect({ status: next.status, code: next.json<{ error?: { code?: string } }>().error?.code }).toEqual({ status: 429, code: 'insufficient_quota' });
});

test('a client that leaves while its request waits for a worker (it reached none) pays nothing', async () => {
  const holder = await gw.issueKey({ name: 'holds the worker' });
  const { entry: held } = await sendAndLeave(holder.key, 'hold-json', { max_tokens: 10 }, 'queued/m'); // the one place is taken until released
  const { key, id } = await gw.issueKey({ name: 'queued leaver' });
  const req = https.request(`${gw.url}/v1/chat/completions`, { method: 'POST', ca: gw.ca, agent: false, headers: { ...bearer(key), 'content-type': 'application/json', 'x-test-mode': 'hold-json' } });
  req.on('error', () => undefined);
  req.end(JSON.stringify({ model: 'queued/m', messages: [{ role: 'user', content: 'hi' }], max_tokens: 500 }));
  await eventually(async () => (sample(await scrape(gw.adminUrl), 'chatgate_upstream_queued_requests{provider="queued"}') === 1 ? true : undefined));
  const before = seen.size;
  req.destroy();
  await eventually(async () => (sample(await scrape(gw.adminUrl), 'chatgate_upstream_queued_requests{provider="queued"}') === 0 ? true : undefined));
  held.release();
  // Then a request of the same key that is answered: once its usage is in the store, anything the
  // leaver was charged (at its close, before) would be too.
  const reached = nextArrival();
  const answered = request(gw.url, {
    ca: gw.ca,
    method: 'POST',
    headers: { ...bearer(key), 'content-type': 'application/json', 'x-test-mode': 'hold-json' },
    body: JSON.stringify({ model: 'early/m', messages: [{ role: 'user', content: 'hi' }], max_tokens: 10 }),
  });
  seen.get(await reached)!.release();
  expect((await answered).status).toBe(200);
  expect(seen.size).toBe(before + 1); // the queued request never reached the worker
  const usage = await usageOf(id, (u) => u.promptTokens > 0);
  expect({ promptTokens: usage.promptTokens, completionTokens: usage.completionTokens }).toEqual({ promptTokens: REAL.prompt, completionTokens: REAL.completion });
});

test('with drainAfterDisconnectMs 0 the worker request is cancelled as the client leaves, and the request pays its prompt estimate and bound at once', async () => {
  const url = `http://127.0.0.1:${(worker.address() as { port: number }).port}`;
  const at0 = await startTestGateway({
    providers: { early: { workers: [url], models: ['m'], upstream: { health: { enabled: false } } } },
    auth: { createFirstKey: false, lastUsedFlushMs: 50 },
    usage: { drainAfterDisconnectMs: 0 },
  });
  try {
    const { key, id } = await at0.issueKey({ name: 'no drain' });
    const reached = nextArrival();
    const req = https.request(`${at0.url}/v1/chat/completions`, { method: 'POST', ca: at0.ca, agent: false, headers: { ...bearer(key), 'content-type': 'application/json', 'x-test-mode': 'never' } });
    req.on('error', () => undefined);
    req.end(JSON.stringify({ model: 'early/m', messages: [{ role: 'user', content: 'hi' }], max_tokens: 30 }));
    const entry = seen.get(await reached)!;
    const leftAt = Date.now();
    req.destroy();
    await eventually(() => entry.closedAt, 5000);
    expect(entry.closedAt! - leftAt).toBeLessThan(DRAIN_MS); // cancelled as the client left, not after a drain
    const usage = await eventually(async () => {
      const u = (await at0.store.get(id))?.usage;
      return u && u.promptTokens > 0 ? u : undefined;
    });
    expect(usage).toEqual({ requests: 1, promptTokens: promptEstimate(entry), completionTokens: 30 });
  } finally {
    await at0.stop();
  }
});

test("a key's concurrency slot stays taken while a worker still works for a client that left, and is given back once the worker is done", async () => {
  const { key } = await gw.issueKey({ name: 'one at a time', rateLimit: { maxConcurrent: 1 } });
  const { entry } = await sendAndLeave(key, 'never', { max_tokens: 10 });
  const again = () =>
    request(gw.url, {
      ca: gw.ca,
      headers: { ...bearer(key), 'content-type': 'application/json', 'x-test-mode': 'hold-json' },
      body: JSON.stringify({ model: 'early/m', messages: [{ role: 'user', content: 'hi' }], max_tokens: 10 }),
    });
  // Leaving does not free the slot: the worker still generates for it.
  const refused = await again();
  expect({ status: refused.status, code: refused.json<{ error?: { code?: string } }>().error?.code }).toEqual({ status: 429, code: 'rate_limit_exceeded' });
  await eventually(() => entry.closedAt, 5000); // the drain ended: the worker is free
  const reached = nextArrival();
  const served = again();
  seen.get(await eventually(() => reached, 5000))!.release();
  expect((await served).status).toBe(200);
});

test('a worker that hangs up without an answer after the client left: nothing is charged (the work was not done)', async () => {
  const { key, id } = await gw.issueKey({ name: 'worker died' });
  const { entry } = await sendAndLeave(key, 'hang-up', { max_tokens: 50 });
  await eventually(async () => (sample(await scrape(gw.adminUrl), 'chatgate_requests_in_flight') === 0 ? true : undefined));
  entry.release();
  // Then an answered request of the same key: once its usage is in the store, a charge for the
  // first (made when the worker hung up, before) would be too.
  const reached = nextArrival();
  const answered = request(gw.url, {
    ca: gw.ca,
    headers: { ...bearer(key), 'content-type': 'application/json', 'x-test-mode': 'hold-json' },
    body: JSON.stringify({ model: 'early/m', messages: [{ role: 'user', content: 'hi' }], max_tokens: 10 }),
  });
  seen.get(await reached)!.release();
  expect((await answered).status).toBe(200);
  const usage = await usageOf(id, (u) => u.promptTokens > 0);
  expect({ promptTokens: usage.promptTokens, completionTokens: usage.completionTokens }).toEqual({ promptTokens: REAL.prompt, completionTokens: REAL.completion });
});
