/**
 * Streams flow through unbuffered, and the worker hears about a client that leaves: real worker
 * processes pacing tokens, real TLS clients.
 */
import https from 'node:https';
import type { IncomingMessage } from 'node:http';
import { gatewayWithWorker } from '../helpers/fixture';
import { bearer, chatBody, request } from '../helpers/http';
import { eventually } from '../helpers/time';

const f = gatewayWithWorker({ usage: { drainAfterDisconnectMs: 300 } });

function openStream(headers: Record<string, string>): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = https.request(`${f.gw.url}/v1/chat/completions`, { method: 'POST', ca: f.gw.ca, agent: false, headers: { ...bearer(f.key), ...headers } }, resolve);
    req.on('error', reject);
    req.end(chatBody({ stream: true }));
  });
}

function firstChunk(response: IncomingMessage): Promise<string> {
  return new Promise((resolve) => response.once('data', (chunk: Buffer) => resolve(chunk.toString('utf8'))));
}

test('the client holds the first chunk while the worker is still generating the rest', async () => {
  // 20 tokens at 10 per second: the worker needs about 2 s for the whole answer.
  const response = await openStream({ 'x-mock-tokens': '20', 'x-mock-tokens-per-second': '10' });
  expect(response.statusCode).toBe(200);
  expect(response.headers['content-type']).toMatch(/^text\/event-stream/);
  expect(response.headers['cache-control']).toBe('no-cache');
  expect(response.headers['x-accel-buffering']).toBe('no');

  const first = await firstChunk(response);
  expect(first).toMatch(/^data: \{.*"chat\.completion\.chunk"/);
  const [seen] = await f.worker.requests();
  expect(seen!.outcome).toBe('pending'); // the worker has not finished its answer yet

  let rest = '';
  response.on('data', (chunk: Buffer) => (rest += chunk.toString('utf8')));
  await new Promise((resolve) => response.on('end', resolve));
  expect(rest.trimEnd().endsWith('data: [DONE]')).toBe(true);
  expect((await f.worker.requests())[0]!.outcome).toBe('completed');
});

test("the stream's head reaches the client as soon as the worker sends its own, not with the first token", async () => {
  // The worker sends its head at once and its first token a minute later.
  const req = https.request(`${f.gw.url}/v1/chat/completions`, { method: 'POST', ca: f.gw.ca, agent: false, headers: { ...bearer(f.key), 'x-mock-latency-ms': '60000' } });
  req.on('error', () => undefined);
  try {
    const response = await new Promise<IncomingMessage>((resolve, reject) => {
      req.on('response', resolve);
      setTimeout(() => reject(new Error('no head within 10 s')), 10_000).unref();
      req.end(chatBody({ stream: true }));
    });
    expect(response.statusCode).toBe(200);
    expect(response.headers['content-type']).toMatch(/^text\/event-stream/);
    expect(response.headers['x-accel-buffering']).toBe('no');
    expect((await f.worker.requests())[0]!.outcome).toBe('pending');
  } finally {
    req.destroy();
  }
  expect(await eventually(async () => ((await f.worker.requests())[0]?.outcome === 'aborted' ? true : undefined))).toBe(true);
});

test('a client that disconnects mid-stream: the upstream request is read on for its usage, then aborted at usage.drainAfterDisconnectMs', async () => {
  const response = await openStream({ 'x-mock-tokens': '200', 'x-mock-tokens-per-second': '20' });
  await firstChunk(response);
  response.destroy();
  const outcome = await eventually(async () => {
    const [seen] = await f.worker.requests();
    return seen?.outcome === 'pending' ? undefined : seen?.outcome;
  });
  expect(outcome).toBe('aborted');
});

test('a worker that dies mid-stream: the client gets a final SSE error event and a properly ended response', async () => {
  const response = await openStream({ 'x-mock-tokens': '50', 'x-mock-tokens-per-second': '20', 'x-mock-fail': 'die-mid-stream' });
  let text = '';
  response.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
  await new Promise((resolve) => response.on('end', resolve));
  expect(response.complete).toBe(true);
  const events = text.split('\n\n').filter(Boolean);
  expect(events[0]).toMatch(/^data: \{/);
  const last = events.at(-1)!;
  expect(last.startsWith('event: error\ndata: ')).toBe(true);
  expect(JSON.parse(last.slice('event: error\ndata: '.length))).toEqual({
    error: { message: expect.any(String), type: 'api_error', param: null, code: 'upstream_unavailable' },
  });
  expect((await request(f.gw.url, { ca: f.gw.ca, headers: bearer(f.key), body: chatBody() })).status).toBe(200);
});
