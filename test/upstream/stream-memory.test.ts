/**
 * An open stream holds its relay state, not its request: once a worker answers, the prompt (as text
 * and as the bytes sent) is let go. Real gateway process, its live memory read after a full collection.
 */
import https from 'node:https';
import type { IncomingMessage } from 'node:http';
import { bearer, chatBody } from '../helpers/http';
import { startMeasuredGateway, type MeasuredGateway } from '../helpers/live-memory';
import { startWorker, type WorkerProcess } from '../helpers/processes';

const STREAMS = 16;
const PROMPT_BYTES = 2 ** 20;
/** Half of what holding each prompt once (as text or as bytes) would add, 16 MiB; the streams' own state is a few KiB each. */
const BOUND_MIB = (STREAMS * PROMPT_BYTES) / 2 ** 20 / 2;

let worker: WorkerProcess;
let gateway: MeasuredGateway;

beforeAll(async () => {
  worker = await startWorker({ tokensPerSecond: 2 });
  gateway = await startMeasuredGateway('stream-memory', worker.url, { log: { access: false } });
}, 30_000);
afterAll(async () => {
  await gateway?.stop();
  await worker?.stop();
});

/** Live JS heap plus memory outside it (Buffers), in MiB. */
const liveMiB = () => gateway.liveMiB(true);

function openStream(body: string): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = https.request(`${gateway.process.url}/v1/chat/completions`, { method: 'POST', ca: gateway.process.ca, agent: false, headers: { ...bearer(gateway.key), 'x-mock-tokens': '100' } }, (response) =>
      response.once('data', () => resolve(response)),
    );
    req.on('error', reject);
    req.end(body);
  });
}

test(`${STREAMS} open streams with 1 MiB prompts: the gateway holds none of the prompts`, async () => {
  const warmUp = await openStream(chatBody({ stream: true, messages: [{ role: 'user', content: 'x'.repeat(PROMPT_BYTES) }] }));
  warmUp.destroy();
  const before = await liveMiB();
  const streams = await Promise.all(Array.from({ length: STREAMS }, (_, i) => openStream(chatBody({ stream: true, messages: [{ role: 'user', content: String.fromCharCode(97 + i).repeat(PROMPT_BYTES) }] }))));
  const growth = (await liveMiB()) - before;
  for (const stream of streams) stream.destroy();
  expect(growth).toBeLessThan(BOUND_MIB);
}, 60_000);

test('an open stream holds its answer head as one string, and its connection to the worker no request headers', async () => {
  const streams = await Promise.all(Array.from({ length: 4 }, () => openStream(chatBody({ stream: true }))));
  const graph = await gateway.heapGraph();
  for (const stream of streams) stream.destroy();

  // Node builds the head by concatenation, a tree of some fifty strings; flattened, it is the tree's
  // root holding the whole text and an empty half.
  const heads = graph.nodes('object', 'ExpressResponse').flatMap((res) => graph.edges(res).get('_header') ?? []);
  const headPieces = heads.filter((head) => graph.type(head).endsWith('string')).map((head) => graph.stringPieces(head));
  expect(headPieces.length).toBeGreaterThanOrEqual(streams.length);
  expect(headPieces.filter((pieces) => pieces > 3)).toEqual([]);

  // What node's agent keeps with each pooled connection (src/upstream/worker-agent.ts).
  const connectionOptions = graph.nodes('closure', 'onFree').flatMap((onFree) => graph.edges(graph.edges(onFree).get('context')!).get('options') ?? []);
  expect(connectionOptions.length).toBeGreaterThanOrEqual(streams.length);
  expect(connectionOptions.filter((options) => graph.edges(options).has('headers'))).toEqual([]);
  expect(connectionOptions.every((options) => graph.edges(options).has('port'))).toBe(true);
}, 60_000);
