/**
 * Completions, embeddings and responses end to end, as chat completions are: the official openai
 * client -> gateway (real TLS listener) -> a real mock-worker process answering in OpenAI's shapes.
 * Each endpoint's own usage shape is counted (metrics, the key's usage) and charged to its quota;
 * a key may be limited to some endpoints, a provider may serve only some.
 */
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { bearer, openaiClient, request } from '../helpers/http';
import { sample, scrape } from '../helpers/metrics';
import { startWorker, type WorkerProcess } from '../helpers/processes';
import { eventually } from '../helpers/time';

let worker: WorkerProcess;
let gw: TestGateway;
let key: string;

beforeAll(async () => {
  worker = await startWorker();
  gw = await startTestGateway({
    providers: { mock: { workers: [worker.url] }, chatonly: { workers: [worker.url], endpoints: ['chat'] } },
    auth: { createFirstKey: false, lastUsedFlushMs: 100 },
  });
  ({ key } = await gw.issueKey());
});
afterAll(async () => {
  await gw?.stop();
  await worker?.stop();
});
beforeEach(() => worker.clear());

const lastBody = async () => JSON.parse((await worker.requests()).at(-1)!.body) as Record<string, unknown>;
const tokens = async (endpoint: string, kind: string) => sample(await scrape(gw.adminUrl), `chatgate_tokens_total{endpoint="${endpoint}",provider="mock",model="echo",alias="none",kind="${kind}"}`);

test('embeddings: the openai client gets a vector per input; prompt tokens are counted, no completion tokens', async () => {
  const before = await tokens('embeddings', 'prompt');
  const client = openaiClient(gw.url, key, gw.ca);
  const result = await client.embeddings.create({ model: 'mock/echo', input: ['one two three', 'four five'] });
  expect(result.data).toHaveLength(2);
  expect(result.data[0]!.embedding).toHaveLength(8); // decoded from the base64 the SDK asked for
  expect(result.usage).toEqual({ prompt_tokens: 5, total_tokens: 5 });
  expect(await lastBody()).toMatchObject({ model: 'echo', input: ['one two three', 'four five'] });
  expect((await worker.requests()).at(-1)!.url).toBe('/v1/embeddings');
  expect((await tokens('embeddings', 'prompt')) - before).toBe(5);
  expect(await tokens('embeddings', 'completion')).toBe(0);
});

test('completions: JSON and a stream (usage asked by the gateway, hidden from the client)', async () => {
  const client = openaiClient(gw.url, key, gw.ca);
  const completion = await client.completions.create({ model: 'mock/echo', prompt: 'Say this is a test', max_tokens: 6 });
  expect(completion.object).toBe('text_completion');
  expect(completion.choices[0]!.text).toMatch(/^echo: Say this/);
  expect(completion.usage?.completion_tokens).toBe(6);

  const before = await tokens('completions', 'completion');
  const stream = await client.completions.create({ model: 'mock/echo', prompt: 'stream this', max_tokens: 5, stream: true });
  const texts: string[] = [];
  let sawUsage = false;
  for await (const chunk of stream) {
    if (chunk.choices[0]?.text) texts.push(chunk.choices[0].text);
    if (chunk.usage) sawUsage = true;
  }
  expect(texts).toHaveLength(5);
  expect(sawUsage).toBe(false); // the client did not ask for it
  expect(await lastBody()).toMatchObject({ model: 'echo', stream: true, stream_options: { include_usage: true } });
  expect(await eventually(async () => ((await tokens('completions', 'completion')) - before === 5 ? true : undefined))).toBe(true);
});

test('responses: JSON and a stream of typed events; input and output tokens are counted', async () => {
  const client = openaiClient(gw.url, key, gw.ca);
  const response = await client.responses.create({ model: 'mock/echo', input: 'Tell me a story', max_output_tokens: 7 });
  expect(response.object).toBe('response');
  expect(response.output_text).toMatch(/^echo: Tell me/);
  expect(response.usage).toMatchObject({ input_tokens: 7, output_tokens: 7 }); // the mock counts words, and 3 for the framing

  const [promptBefore, completionBefore] = [await tokens('responses', 'prompt'), await tokens('responses', 'completion')];
  const stream = await client.responses.create({ model: 'mock/echo', input: [{ role: 'user', content: 'stream a story' }], max_output_tokens: 4, stream: true });
  const types: string[] = [];
  let deltas = '';
  for await (const event of stream) {
    types.push(event.type);
    if (event.type === 'response.output_text.delta') deltas += event.delta;
  }
  expect(types[0]).toBe('response.created');
  expect(types.at(-1)).toBe('response.completed'); // relayed, usage and all: nothing is dropped from a responses stream
  expect(deltas).toMatch(/^echo: stream/);
  expect(await lastBody()).not.toHaveProperty('stream_options');
  await eventually(async () => ((await tokens('responses', 'completion')) - completionBefore === 4 ? true : undefined));
  expect((await tokens('responses', 'prompt')) - promptBefore).toBe(6);
});

test("each endpoint's tokens are charged to the key: its usage, and its quota refuses the next request", async () => {
  const store = gw.store;
  const calls: Array<[string, Record<string, unknown>]> = [
    ['/v1/embeddings', { model: 'mock/echo', input: 'one two three' }],
    ['/v1/completions', { model: 'mock/echo', prompt: 'one two three', max_tokens: 3 }],
    ['/v1/responses', { model: 'mock/echo', input: 'one two three', max_output_tokens: 3 }],
    ['/v1/responses', { model: 'mock/echo', input: 'one two three', max_output_tokens: 3, stream: true }],
  ];
  for (const [path, body] of calls) {
    // 25 tokens: the first request's reservation (its body at 4 bytes a token, plus its output bound) fits; once charged, soon one does not.
    const limited = await gw.issueKey({ name: `quota ${path}`, quota: { tokensPerDay: 25 } });
    const first = await request(gw.url, { ca: gw.ca, path, headers: bearer(limited.key), body: JSON.stringify(body) });
    expect({ path, status: first.status }).toEqual({ path, status: 200 });
    let served = 1;
    const refused = await eventually(async () => {
      const next = await request(gw.url, { ca: gw.ca, path, headers: bearer(limited.key), body: JSON.stringify(body) });
      if (next.status === 200) served++;
      return next.status === 429 ? next : undefined;
    });
    expect(refused.json().error.code).toBe('insufficient_quota');
    const usage = await eventually(async () => {
      const record = await store.get(limited.id);
      // the mock counts words, and 3 for a prompt's framing
      return record && record.usage.promptTokens === served * (path === '/v1/embeddings' ? 3 : 6) ? record.usage : undefined;
    });
    expect(usage.completionTokens).toBe(served * (path === '/v1/embeddings' ? 0 : 3));
  }
});

test('a key limited to chat gets 403 endpoint_not_allowed on the others, and chat still works', async () => {
  const chatOnly = await gw.issueKey({ name: 'chat only', endpoints: ['chat'] });
  const client = openaiClient(gw.url, chatOnly.key, gw.ca);
  await expect(client.embeddings.create({ model: 'mock/echo', input: 'x' })).rejects.toMatchObject({ status: 403, code: 'endpoint_not_allowed', type: 'permission_error' });
  await expect(client.completions.create({ model: 'mock/echo', prompt: 'x' })).rejects.toMatchObject({ status: 403, code: 'endpoint_not_allowed' });
  await expect(client.responses.create({ model: 'mock/echo', input: 'x' })).rejects.toMatchObject({ status: 403, code: 'endpoint_not_allowed' });
  const chat = await client.chat.completions.create({ model: 'mock/echo', messages: [{ role: 'user', content: 'hi' }] });
  expect(chat.choices[0]!.message.content).toMatch(/^echo: hi/);
  expect(await worker.requests()).toHaveLength(1);
});

test("a provider that serves only chat: 404 model_not_found naming the endpoint, and the worker never asked", async () => {
  const refused = await request(gw.url, { ca: gw.ca, path: '/v1/embeddings', headers: bearer(key), body: JSON.stringify({ model: 'chatonly/echo', input: 'x' }) });
  expect(refused.status).toBe(404);
  expect(refused.json().error).toMatchObject({ type: 'invalid_request_error', code: 'model_not_found', param: 'model' });
  expect(refused.json().error.message).toContain('/v1/embeddings');
  const chat = await request(gw.url, { ca: gw.ca, headers: bearer(key), body: JSON.stringify({ model: 'chatonly/echo', messages: [{ role: 'user', content: 'hi' }] }) });
  expect(chat.status).toBe(200);
  expect(await worker.requests()).toHaveLength(1);
});

test('each endpoint checks what it requires and names the field; GET is 405 with Allow: POST', async () => {
  const cases: Array<[string, Record<string, unknown>, string]> = [
    ['/v1/embeddings', { model: 'mock/echo' }, 'input'],
    ['/v1/embeddings', { model: 'mock/echo', input: [] }, 'input'],
    ['/v1/completions', { model: 'mock/echo', input: 'x' }, 'prompt'],
    ['/v1/responses', { model: 'mock/echo', input: 42 }, 'input'],
    ['/v1/responses', { input: 'x' }, 'model'],
    ['/v1/completions', { model: 'mock/echo', prompt: 'x', stream: 'yes' }, 'stream'],
  ];
  for (const [path, body, param] of cases) {
    const response = await request(gw.url, { ca: gw.ca, path, headers: bearer(key), body: JSON.stringify(body) });
    expect({ path, status: response.status, param: response.json().error.param }).toEqual({ path, status: 400, param });
  }
  for (const path of ['/v1/embeddings', '/v1/completions', '/v1/responses']) {
    const response = await request(gw.url, { ca: gw.ca, method: 'GET', path, headers: bearer(key) });
    expect(response.status).toBe(405);
    expect(response.headers.allow).toBe('POST');
    expect((await request(gw.url, { ca: gw.ca, path, body: '{}' })).status).toBe(401); // no key: 401 before anything is read
  }
  expect(await worker.requests()).toHaveLength(0);
});

test('requests are counted with an endpoint label', async () => {
  await request(gw.url, { ca: gw.ca, path: '/v1/embeddings', headers: bearer(key), body: JSON.stringify({ model: 'mock/echo', input: 'x' }) });
  const text = await scrape(gw.adminUrl);
  expect(sample(text, 'chatgate_requests_total{endpoint="embeddings",provider="mock",status="200"}')).toBeGreaterThan(0);
  expect(sample(text, 'chatgate_requests_total{endpoint="embeddings",provider="none",status="405"}')).toBeGreaterThan(0);
});
