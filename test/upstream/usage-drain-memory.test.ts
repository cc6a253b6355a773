/**
 * Streams whose clients left are read on for their usage, and then let go: once the drain's deadline
 * passed, the worker's connections are closed, the worker is no longer counted busy, and the gateway
 * holds none of their relays. Real gateway process and mock worker, heap snapshots after a full collection.
 */
import https from 'node:https';
import type { IncomingMessage } from 'node:http';
import { bearer, chatBody } from '../helpers/http';
import { startMeasuredGateway, type MeasuredGateway } from '../helpers/live-memory';
import { sample, scrape } from '../helpers/metrics';
import { startWorker, type WorkerProcess } from '../helpers/processes';
import { eventually } from '../helpers/time';

const STREAMS = 40;
const DRAIN_MS = 3000;

let worker: WorkerProcess;
let gateway: MeasuredGateway;

beforeAll(async () => {
  worker = await startWorker({ tokensPerSecond: 20 });
  gateway = await startMeasuredGateway('drain-memory', worker.url, { log: { access: false }, usage: { drainAfterDisconnectMs: DRAIN_MS } });
}, 30_000);
afterAll(async () => {
  await gateway?.stop();
  await worker?.stop();
});

/** A stream far longer than the drain (held, 100,000 tokens at 20 a second): resolves at its first data. */
function openStream(): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = https.request(
      `${gateway.process.url}/v1/chat/completions`,
      { method: 'POST', ca: gateway.process.ca, agent: false, headers: { ...bearer(gateway.key), 'x-mock-tokens': '100000', 'x-mock-hold': 'never' } },
      (response) => response.once('data', () => resolve(response)),
    );
    req.on('error', reject);
    req.end(chatBody({ stream: true, messages: [{ role: 'user', content: 'x'.repeat(64 * 1024) }] }));
  });
}

const meters = async () => (await gateway.heapGraph()).nodes('object', 'SseUsageMeter').length;
const outstanding = async () =>
  (await scrape(gateway.process.adminUrl))
    .split('\n')
    .filter((line) => line.startsWith('chatgate_worker_outstanding_requests{'))
    .reduce((sum, line) => sum + Number(line.slice(line.lastIndexOf(' ') + 1)), 0);
const completionTokens = async () => sample(await scrape(gateway.process.adminUrl), 'chatgate_tokens_total{endpoint="chat",provider="mock",model="echo",alias="none",kind="completion"}');

test(`${STREAMS} streams whose clients left: drained, then their worker connections closed and their relays let go`, async () => {
  const streams = await Promise.all(Array.from({ length: STREAMS }, openStream));
  for (const stream of streams) stream.destroy();
  const left = Date.now();
  // While they drain, the worker still serves them, and their relays are alive (the probe sees them).
  // The worker is asked first: the heap snapshot takes seconds on a busy host, and once past the
  // drain's deadline the worker's requests are rightly cut (a CI run saw none pending after it).
  expect((await worker.requests()).filter((r) => r.outcome === 'pending').length).toBeGreaterThan(0);
  expect(await meters()).toBeGreaterThanOrEqual(STREAMS / 2);

  // Then every worker request is cut (its connection closed), no earlier than the deadline.
  const requests = await eventually(async () => {
    const all = await worker.requests();
    return all.length === STREAMS && all.every((r) => r.outcome === 'aborted') ? all : undefined;
  }, 20_000);
  expect(requests).toHaveLength(STREAMS);
  expect(Date.now() - left).toBeGreaterThanOrEqual(DRAIN_MS - 100);
  expect(await eventually(async () => ((await outstanding()) === 0 ? 0 : undefined))).toBe(0);
  // Each was charged (the estimate: no usage came): at least the events read, one token each.
  expect(await completionTokens()).toBeGreaterThanOrEqual(STREAMS);
  expect(await meters()).toBe(0);
}, 60_000);
