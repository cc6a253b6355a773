/**
 * Out of the box, a worker takes what a model server takes: with the default upstream settings,
 * 1,000 concurrent streams through one mock worker all arrive whole (the earlier defaults, 256
 * connections and a queue of 100, refused 644 of them with 503 upstream_overloaded).
 */
import https from 'node:https';
import { DEFAULT_FORWARD_HEADERS, parseConfig } from '../../src/config';
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { bearer, chatBody } from '../helpers/http';
import { startWorker, type WorkerProcess } from '../helpers/processes';

const STREAMS = 1000;
const TOKENS = 10;

let worker: WorkerProcess;
let gw: TestGateway;
let key: string;

beforeAll(async () => {
  worker = await startWorker({ tokensPerSecond: 10 }); // each stream lasts about a second: all are open at once
  gw = await startTestGateway({ providers: { mock: { workers: [worker.url] } } });
  key = (await gw.issueKey()).key;
});
afterAll(async () => {
  await gw?.stop();
  await worker?.stop();
});

test('the defaults admit at least what Envoy admits per cluster: 1,024 connections and 1,024 waiting', () => {
  const { upstream } = parseConfig({ providers: { a: { workers: ['http://x:1'] } } });
  expect(upstream.maxSocketsPerWorker).toBeGreaterThanOrEqual(1024);
  expect(upstream.queue.size).toBeGreaterThanOrEqual(1024);
  expect(upstream.forwardHeaders).toEqual(DEFAULT_FORWARD_HEADERS);
});

test(`${STREAMS} concurrent streams through one worker, default upstream settings: every one intact`, async () => {
  const agent = new https.Agent({ keepAlive: false, maxSockets: STREAMS, ca: gw.ca });
  const stream = () =>
    new Promise<string>((resolve) => {
      const req = https.request(`${gw.url}/v1/chat/completions`, { method: 'POST', agent, servername: 'localhost', headers: { ...bearer(key), 'x-mock-tokens': String(TOKENS) } }, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => {
          const chunks = text.split('\n\n').filter((event) => event.startsWith('data: {')).length;
          resolve(res.statusCode === 200 && text.endsWith('data: [DONE]\n\n') && chunks >= TOKENS ? 'intact' : `${res.statusCode}: ${text.slice(0, 120)}`);
        });
        res.on('error', (err) => resolve(err.message));
      });
      req.on('error', (err) => resolve(err.message));
      req.end(chatBody({ stream: true }));
    });
  const outcomes = await Promise.all(Array.from({ length: STREAMS }, stream));
  agent.destroy();
  const counts: Record<string, number> = {};
  for (const outcome of outcomes) counts[outcome] = (counts[outcome] ?? 0) + 1;
  expect(counts).toEqual({ intact: STREAMS });
}, 60_000);
