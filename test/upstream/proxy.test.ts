/**
 * The request path end to end: the official openai client -> gateway (real TLS listener) -> real
 * mock worker processes, and what the worker actually received.
 */
import http from 'node:http';
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { basic, bearer, chatBody, openaiClient, request } from '../helpers/http';
import { listenOnLoopback } from '../helpers/net';
import { startWorker, type WorkerProcess } from '../helpers/processes';

const UPSTREAM_SECRET = 'upstream-secret-for-tests';

let workers: WorkerProcess[];
let gw: TestGateway;
let key: string;
/** A worker that answers with headers of its own, some of which must not reach the client. */
let chattyWorker: http.Server;

beforeAll(async () => {
  process.env.CHATGATE_TEST_UPSTREAM_KEY = UPSTREAM_SECRET;
  workers = await Promise.all([startWorker(), startWorker()]);
  chattyWorker = http.createServer((req, res) => {
    req.resume();
    res.writeHead(200, {
      'content-type': 'application/json',
      'x-request-id': 'worker-own-id-7',
      'proxy-authenticate': 'Basic realm="worker"',
      upgrade: 'h2c',
      trailer: 'x-checksum',
      'x-custom': 'kept',
    });
    res.end(JSON.stringify({ id: 'chatcmpl-1', object: 'chat.completion', choices: [], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } }));
  });
  const chattyUrl = await listenOnLoopback(chattyWorker);
  gw = await startTestGateway({
    providers: {
      mock: { workers: workers.map((w) => w.url), apiKeyEnv: 'CHATGATE_TEST_UPSTREAM_KEY' },
      vllm: { workers: [workers[0]!.url] },
      chatty: { workers: [chattyUrl] },
    },
  });
  ({ key } = await gw.issueKey());
});

afterAll(async () => {
  await gw?.stop();
  await Promise.all(workers.map((w) => w.stop()));
  chattyWorker?.close();
});

beforeEach(() => Promise.all(workers.map((w) => w.clear())));

const received = async () => (await Promise.all(workers.map((w) => w.requests()))).flat();

test('the openai client gets a completion, and the worker sees the model without its provider prefix', async () => {
  const client = openaiClient(gw.url, key, gw.ca);
  const completion = await client.chat.completions.create({ model: 'mock/echo', messages: [{ role: 'user', content: 'Hello gateway' }] });
  expect(completion.object).toBe('chat.completion');
  expect(completion.choices[0]!.message.content).toMatch(/^echo: Hello gateway/);
  expect(completion.usage?.completion_tokens).toBeGreaterThan(0);
  const [seen] = await received();
  expect(JSON.parse(seen!.body).model).toBe('echo');
});

test('the openai client streams a completion chunk by chunk, usage chunk included when asked', async () => {
  const client = openaiClient(gw.url, key, gw.ca);
  const stream = await client.chat.completions.create({
    model: 'mock/echo',
    messages: [{ role: 'user', content: 'stream me' }],
    stream: true,
    stream_options: { include_usage: true },
  });
  const deltas: string[] = [];
  let usage: unknown;
  for await (const chunk of stream) {
    if (chunk.choices[0]?.delta.content) deltas.push(chunk.choices[0].delta.content);
    if (chunk.usage) usage = chunk.usage;
  }
  expect(deltas.length).toBeGreaterThan(3);
  expect(deltas.join('')).toMatch(/^echo: stream me/);
  expect(usage).toEqual(expect.objectContaining({ completion_tokens: deltas.length }));
});

test('Bearer and Basic carry the same key to the same answer', async () => {
  const viaBearer = await request(gw.url, { ca: gw.ca, headers: bearer(key), body: chatBody() });
  const viaBasic = await request(gw.url, { ca: gw.ca, headers: basic(key), body: chatBody() });
  const viaLowercaseScheme = await request(gw.url, { ca: gw.ca, headers: { authorization: `bearer ${key}` }, body: chatBody() });
  for (const response of [viaBearer, viaBasic, viaLowercaseScheme]) {
    expect(response.status).toBe(200);
    expect(JSON.parse(response.body).choices[0].message.content).toMatch(/^echo: Hello there/);
  }
});

test('a model name may hold more slashes: the worker gets everything after the first', async () => {
  const response = await request(gw.url, { ca: gw.ca, headers: bearer(key), body: chatBody({ model: 'vllm/meta-llama/Llama-3.1-8B' }) });
  expect(response.status).toBe(200);
  const [seen] = await workers[0]!.requests();
  expect(JSON.parse(seen!.body).model).toBe('meta-llama/Llama-3.1-8B');
});

test('the body reaches the worker byte for byte, but for the model name', async () => {
  const body =
    '{ "seed": 12345678901234567890, "temperature": 0.70,\n  "model" : "mock/echo", "messages": [{"role":"user","content":"caf\\u00e9 \\"model\\": \\"x\\""}],' +
    ' "x_extra": {"model": "untouched"}, "max_tokens": 1e1 }';
  const response = await request(gw.url, { ca: gw.ca, headers: { ...bearer(key), 'content-type': 'application/json' }, body });
  expect(response.status).toBe(200);
  const [seen] = await received();
  expect(seen!.body).toBe(body.replace('"mock/echo"', '"echo"'));
  expect(seen!.headers['content-length']).toBe(String(Buffer.byteLength(seen!.body)));
});

test('only allow-listed client headers reach the worker: credentials, cookies, hop-by-hop and identity claims stay at the gateway; ours go upstream', async () => {
  const response = await request(gw.url, {
    ca: gw.ca,
    path: `/v1/chat/completions?api_key=${key}`,
    headers: {
      ...bearer(key),
      cookie: `session=${key}`,
      'proxy-authorization': `Basic ${key}`,
      'api-key': key,
      'x-api-key': key,
      'openai-organization': 'org-client',
      'openai-project': 'proj_client',
      connection: 'keep-alive, x-hop',
      'x-hop': 'drop me',
      'keep-alive': 'timeout=5',
      'x-forwarded-for': '203.0.113.9',
      'x-request-id': 'client-chosen-id-1',
      'x-custom': 'not on the list',
      // What an auth proxy in front of a model server may believe:
      'x-forwarded-user': 'admin',
      'x-remote-user': 'admin',
      'x-original-url': '/admin',
      'true-client-ip': '10.0.0.1',
      'x-client-ip': '10.0.0.1',
      via: '1.1 trusted-proxy',
      'x-auth-token': key,
      // The default allow-list:
      accept: 'application/json',
      'accept-language': 'de',
      'user-agent': 'OpenAI/JS 6.0.0',
      'openai-beta': 'assistants=v2',
      'x-stainless-os': 'Linux',
      'idempotency-key': 'stainless-retry-1',
      'content-type': 'text/plain',
    },
    body: chatBody(),
  });
  expect(response.status).toBe(200);
  expect(response.headers['x-request-id']).toBe('client-chosen-id-1');

  const [seen] = await received();
  const headers = seen!.headers;
  expect(headers.authorization).toBe(`Bearer ${UPSTREAM_SECRET}`);
  expect(headers.cookie).toBeUndefined();
  expect(headers['proxy-authorization']).toBeUndefined();
  for (const name of ['api-key', 'x-api-key', 'openai-organization', 'openai-project']) expect(headers[name]).toBeUndefined();
  expect(headers['x-hop']).toBeUndefined();
  expect(headers['keep-alive']).toBeUndefined();
  for (const name of ['x-custom', 'x-forwarded-user', 'x-remote-user', 'x-original-url', 'true-client-ip', 'x-client-ip', 'via', 'x-auth-token']) expect(headers[name]).toBeUndefined();
  expect(headers.accept).toBe('application/json');
  expect(headers['accept-language']).toBe('de');
  expect(headers['user-agent']).toBe('OpenAI/JS 6.0.0');
  expect(headers['openai-beta']).toBe('assistants=v2');
  expect(headers['x-stainless-os']).toBe('Linux');
  expect(headers['idempotency-key']).toBe('stainless-retry-1');
  expect(Object.keys(headers).sort()).toEqual(
    ['accept', 'accept-language', 'authorization', 'connection', 'content-length', 'content-type', 'host', 'idempotency-key', 'openai-beta', 'traceparent', 'user-agent', 'x-forwarded-for', 'x-forwarded-proto', 'x-request-id', 'x-stainless-os'].sort(),
  );
  expect(headers['x-request-id']).toBe('client-chosen-id-1');
  expect(headers['x-forwarded-proto']).toBe('https');
  // Not a trusted proxy: its X-Forwarded-For claim is not passed on as the client's address.
  expect(headers['x-forwarded-for']).toBe('127.0.0.1');
  expect(headers['content-type']).toBe('application/json');
  expect(seen!.url).toBe('/v1/chat/completions');
  expect(JSON.stringify(seen)).not.toContain(key);
});

test('a request id is made when the client sends none (or an unusable one), echoed and sent upstream', async () => {
  const none = await request(gw.url, { ca: gw.ca, headers: bearer(key), body: chatBody() });
  const unusable = await request(gw.url, { ca: gw.ca, headers: { ...bearer(key), 'x-request-id': 'has spaces and "quotes"' }, body: chatBody() });
  for (const response of [none, unusable]) expect(response.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
  const ids = (await received()).map((r) => r.headers['x-request-id']).sort();
  expect(ids).toEqual([none.headers['x-request-id'], unusable.headers['x-request-id']].sort());
});

test('requests to a provider are spread over its workers round robin', async () => {
  for (let i = 0; i < 6; i++) {
    expect((await request(gw.url, { ca: gw.ca, headers: bearer(key), body: chatBody() })).status).toBe(200);
  }
  const counts = await Promise.all(workers.map(async (w) => (await w.requests()).length));
  expect(counts).toEqual([3, 3]);
});

test('the gateway keeps its connections to a worker alive across requests', async () => {
  for (let i = 0; i < 6; i++) {
    expect((await request(gw.url, { ca: gw.ca, headers: bearer(key), body: chatBody({ model: 'vllm/x' }) })).status).toBe(200);
  }
  const ports = new Set((await workers[0]!.requests()).map((r) => r.remotePort));
  expect(ports.size).toBe(1);
});

test("security headers (helmet, an API's set: HSTS, nothing may load or frame it) are on answers and errors alike", async () => {
  const ok = await request(gw.url, { ca: gw.ca, headers: bearer(key), body: chatBody() });
  const refused = await request(gw.url, { ca: gw.ca, body: chatBody() });
  for (const response of [ok, refused]) {
    expect(response.headers['strict-transport-security']).toMatch(/max-age=\d+/);
    expect(response.headers['x-content-type-options']).toBe('nosniff');
    expect(response.headers['content-security-policy']).toBe("default-src 'none';frame-ancestors 'none'");
    expect(response.headers['x-frame-options']).toBe('DENY');
    // Headers that only mean something on an HTML page stay off a JSON answer.
    for (const name of ['x-powered-by', 'x-dns-prefetch-control', 'x-download-options', 'x-permitted-cross-domain-policies', 'origin-agent-cluster', 'x-xss-protection']) {
      expect(response.headers[name]).toBeUndefined();
    }
  }
});

test("the worker's hop-by-hop headers stay at the gateway; its request id comes back as x-upstream-request-id", async () => {
  const response = await request(gw.url, { ca: gw.ca, headers: { ...bearer(key), 'x-request-id': 'client-id-9' }, body: chatBody({ model: 'chatty/any' }) });
  expect(response.status).toBe(200);
  expect(response.headers['x-request-id']).toBe('client-id-9');
  expect(response.headers['x-upstream-request-id']).toBe('worker-own-id-7');
  expect(response.headers['x-custom']).toBe('kept');
  for (const name of ['proxy-authenticate', 'upgrade', 'trailer']) expect(response.headers[name]).toBeUndefined();
});
