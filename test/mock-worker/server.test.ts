/** The mock worker speaks enough of the OpenAI API for SDKs, demos and benchmarks: tested as a process. */
import { createMockWorker } from '../../src/mock-worker/server';
import { listenOnLoopback } from '../helpers/net';
import { startWorker, type WorkerProcess } from '../helpers/processes';

let worker: WorkerProcess;

beforeAll(async () => {
  worker = await startWorker({ tokensPerSecond: 1000 });
});
afterAll(() => worker?.stop());

const post = (body: unknown, headers: Record<string, string> = {}, url = worker.url) =>
  fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });

test('/health and /v1/models answer in the OpenAI shapes', async () => {
  expect(await (await fetch(`${worker.url}/health`)).json()).toEqual({ status: 'ok' });
  const models = (await (await fetch(`${worker.url}/v1/models`)).json()) as { object: string; data: Array<{ id: string; object: string }> };
  expect(models.object).toBe('list');
  expect(models.data.map((m) => m.id)).toContain('echo');
  expect(models.data.every((m) => m.object === 'model')).toBe(true);
});

test('a JSON completion echoes the last user message, with usage and finish_reason', async () => {
  const answer = (await (await post({ model: 'echo', messages: [{ role: 'system', content: 'be brief' }, { role: 'user', content: 'one two' }] })).json()) as {
    choices: Array<{ message: { content: string }; finish_reason: string }>;
    usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
  };
  expect(answer.choices[0]!.message.content).toMatch(/^echo: one two/);
  expect(answer.choices[0]!.finish_reason).toBe('stop');
  expect(answer.usage.completion_tokens).toBe(16);
  expect(answer.usage.total_tokens).toBe(answer.usage.prompt_tokens + answer.usage.completion_tokens);
  const short = (await (await post({ model: 'echo', max_tokens: 3, messages: [{ role: 'user', content: 'a b c d e' }] })).json()) as typeof answer;
  expect(short.usage.completion_tokens).toBe(3);
  expect(short.choices[0]!.finish_reason).toBe('length');
});

test('a stream sends role, content and finish chunks, a usage chunk only when asked, then [DONE]', async () => {
  const events = async (body: object) =>
    (await (await post(body, { 'x-mock-tokens': '4' })).text())
      .split('\n\n')
      .filter(Boolean)
      .map((event) => event.replace(/^data: /, ''));
  const withUsage = await events({ model: 'echo', stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'hi' }] });
  expect(withUsage.at(-1)).toBe('[DONE]');
  const chunks = withUsage.slice(0, -1).map((e) => JSON.parse(e));
  expect(chunks[0].choices[0].delta.role).toBe('assistant');
  expect(chunks.filter((c) => c.choices[0]?.delta?.content).length).toBe(4);
  expect(chunks.at(-2).choices[0].finish_reason).toBe('stop');
  expect(chunks.at(-1)).toEqual(expect.objectContaining({ choices: [], usage: expect.objectContaining({ completion_tokens: 4 }) }));

  const withoutUsage = await events({ model: 'echo', stream: true, messages: [{ role: 'user', content: 'hi' }] });
  expect(withoutUsage.some((e) => e.includes('"usage"'))).toBe(false);
});

test('a held stream streams until its group is released, then finishes with the usage it sent; other groups go on', async () => {
  const body = { model: 'echo', stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'hi' }] };
  const pacing = { 'x-mock-tokens': '10000', 'x-mock-tokens-per-second': '50' };
  const held = await post(body, { ...pacing, 'x-mock-hold': 'group-a' });
  const other = await post(body, { ...pacing, 'x-mock-hold': 'group-b' });
  const reader = held.body!.getReader();
  const decoder = new TextDecoder();
  const readUntil = async (stream: ReadableStreamDefaultReader<Uint8Array>, seen: string, tokens: number) => {
    while ((seen.match(/"content":"[^"]+"/g) ?? []).length < tokens) {
      const part = await stream.read();
      if (part.done) break;
      seen += decoder.decode(part.value, { stream: true });
    }
    return seen;
  };
  let text = await readUntil(reader, '', 3);

  const released = await fetch(`${worker.url}/_mock/release?group=group-a`, { method: 'POST' });
  expect(await released.json()).toEqual({ released: 'group-a' });
  for (let part = await reader.read(); !part.done; part = await reader.read()) text += decoder.decode(part.value, { stream: true });
  const events = text.split('\n\n').filter(Boolean).map((event) => event.replace(/^data: /, ''));
  expect(events.at(-1)).toBe('[DONE]');
  const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
  const sent = chunks.filter((c) => c.choices[0]?.delta?.content).length;
  expect(sent).toBeGreaterThanOrEqual(3);
  expect(sent).toBeLessThan(10000);
  expect(chunks.at(-2).choices[0].finish_reason).toBe('stop');
  expect(chunks.at(-1).usage).toEqual(expect.objectContaining({ completion_tokens: sent }));

  // group-b was not released: it streams on past the point where group-a stopped.
  const otherReader = other.body!.getReader();
  const otherText = await readUntil(otherReader, '', sent + 3);
  expect(otherText).not.toContain('"finish_reason":"stop"');
  expect(otherText).not.toContain('[DONE]');
  await otherReader.cancel();
});

test('a release without a group is refused', async () => {
  const answer = await fetch(`${worker.url}/_mock/release`, { method: 'POST' });
  expect(answer.status).toBe(400);
  expect(((await answer.json()) as { error: { param: string } }).error.param).toBe('group');
});

test('it records what it received, and a failure mode answers 500 on request', async () => {
  await worker.clear();
  expect((await post({ model: 'echo', messages: [] }, { 'x-mock-fail': 'status-500' })).status).toBe(500);
  const [seen] = await worker.requests();
  expect(seen).toEqual(expect.objectContaining({ method: 'POST', url: '/v1/chat/completions', outcome: 'completed' }));
  expect(JSON.parse(seen!.body)).toEqual({ model: 'echo', messages: [] });
});

describe('pacing, with the global setTimeout under a fake clock', () => {
  // Only setTimeout is faked: Node's sockets use their own timers, so the request itself flows as usual.
  const realSetTimeout = setTimeout;
  const realClearTimeout = clearTimeout;
  beforeEach(() => jest.useFakeTimers({ doNotFake: ['nextTick', 'setImmediate', 'queueMicrotask', 'setInterval', 'clearInterval', 'Date', 'hrtime', 'performance'] }));
  afterEach(() => jest.useRealTimers());

  const statusWithin = (url: string, latencyMs: string, ms: number) => {
    const answer = post({ model: 'echo', messages: [{ role: 'user', content: 'hi' }] }, { 'x-mock-latency-ms': latencyMs }, url).then((r) => r.status);
    let timer: NodeJS.Timeout | undefined;
    const pending = new Promise<'pending'>((resolve) => (timer = realSetTimeout(() => resolve('pending'), ms)));
    return { answer, orPending: Promise.race([answer, pending]).finally(() => realClearTimeout(timer)) };
  };

  test('a zero-latency worker answers at once, without the 1 ms a timer would add; a latency is waited out', async () => {
    const server = createMockWorker({ latencyMs: 0, tokensPerSecond: 1_000_000 });
    const url = await listenOnLoopback(server);
    try {
      // The same window twice: long enough for an answer with no latency (the control), too short
      // for one whose latency timer has not run (the clock stands still).
      expect(await statusWithin(url, '0', 1000).orPending).toBe(200);
      const delayed = statusWithin(url, '5', 1000);
      expect(await delayed.orPending).toBe('pending');
      jest.advanceTimersByTime(5);
      expect(await delayed.answer).toBe(200);
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });
});

test('embeddings: a unit vector per input, the same for the same text; base64 float32 when asked; prompt tokens only', async () => {
  const embed = async (body: object) => (await fetch(`${worker.url}/v1/embeddings`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })).json() as Promise<{ data: Array<{ embedding: number[] | string; index: number }>; usage: Record<string, number> }>;
  const floats = await embed({ model: 'echo', input: ['one two', 'three', 'one two'] });
  expect(floats.data.map((d) => d.index)).toEqual([0, 1, 2]);
  const first = floats.data[0]!.embedding as number[];
  expect(Math.hypot(...first)).toBeCloseTo(1, 5);
  expect(floats.data[2]!.embedding).toEqual(first);
  expect(floats.data[1]!.embedding).not.toEqual(first);
  expect(floats.usage).toEqual({ prompt_tokens: 5, total_tokens: 5 });
  const encoded = await embed({ model: 'echo', input: 'one two', encoding_format: 'base64' });
  const bytes = Buffer.from(encoded.data[0]!.embedding as string, 'base64');
  const decoded = Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4));
  decoded.forEach((value, i) => {
    expect(value).toBeCloseTo(first[i]!, 5);
  });
});
