/**
 * The wire fuzzer: 100,000 generated and mutated requests over real TLS sockets against a gateway
 * process. Each request is built to be either valid and authenticated (it must reach the worker) or
 * wrong in one known way (it must not). Every answer to a wrong request must be a well-formed 4xx with
 * the OpenAI error body; no answer is a 5xx; the worker receives exactly the valid requests (matched by
 * request id); the gateway never dies and keeps no memory from the requests it answered (its live heap
 * after a full collection grows by less than a leak of 100 bytes per request would make). A fixed seed
 * under CI, a random one otherwise; the seed is in the failure report.
 */
import { readFileSync } from 'node:fs';
import https from 'node:https';
import tls from 'node:tls';
import { startMeasuredGateway, type MeasuredGateway } from '../helpers/live-memory';
import { startWorker, type WorkerProcess } from '../helpers/processes';

const TOTAL = Number(process.env.CHATGATE_FUZZ_REQUESTS ?? 100_000); // fewer, to explore locally
const PARALLEL = 32;
const MAX_BODY_BYTES = 64 * 1024;
const SEED = process.env.CI ? 0x5eed2026 : (Math.random() * 2 ** 32) >>> 0;
const WARM_UP = Math.floor(TOTAL / 10);

let worker: WorkerProcess;
let measured: MeasuredGateway;
let gateway: MeasuredGateway['process'];
let key: string;

beforeAll(async () => {
  worker = await startWorker();
  measured = await startMeasuredGateway('fuzz', worker.url, {
    limits: { maxBodyBytes: MAX_BODY_BYTES },
    log: { access: false }, // 100,000 access lines would only fill this test's memory
  });
  ({ process: gateway, key } = measured);
}, 30_000);
afterAll(async () => {
  await measured?.stop();
  await worker?.stop();
});

// Read once: the test runs in a vm context, where Node 20 looks up each global (Math) through an
// interceptor, and the generator's millions of calls took a third of this test's CPU there.
const { imul, floor } = Math;
const ALPHABETS = ['abc xyz 019', 'héllo wörld ß', '世界你好', '👋🎉', '"\\/\b\f\n\r\t', '\u0000\u001f\u2028\u2029', '{}[]:,'].map((alphabet) => [...alphabet]);

/** mulberry32: small, seeded, good enough to pick cases. */
function generator(seed: number) {
  let state = seed;
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = imul(t ^ (t >>> 15), t | 1);
    t ^= t + imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
  const int = (min: number, max: number) => min + floor(next() * (max - min + 1));
  const pick = <T>(items: readonly T[]): T => items[int(0, items.length - 1)]!;
  const text = (max: number) => {
    let out = '';
    for (let n = int(0, max); n > 0; n--) out += pick(pick(ALPHABETS));
    return out;
  };
  const json = (depth = 0): unknown => {
    const kind = int(0, depth > 3 ? 3 : 6);
    if (kind === 0) return null;
    if (kind === 1) return pick([true, false, 0, -1, 1e308, 3.14, -0]);
    if (kind === 2 || kind === 3) return text(20);
    if (kind === 4) return Array.from({ length: int(0, 4) }, () => json(depth + 1));
    return Object.fromEntries(Array.from({ length: int(0, 4) }, () => [pick(['a', 'model', 'messages', '__proto__', 'constructor', 'prototype', text(6)]), json(depth + 1)]));
  };
  return { next, int, pick, text, json };
}

type Expect = 'proxied' | 'refused';
interface Case {
  kind: string;
  expect: Expect;
  /** Sent through Node's client on a kept-alive connection, or as raw bytes on a connection of its own. */
  request: { method: string; path: string; headers: Record<string, string>; body: Buffer } | { raw: Buffer };
}

function makeCase(g: ReturnType<typeof generator>, id: string, key: string): Case {
  const bearer = { authorization: `Bearer ${key}` };
  const basic = { authorization: `Basic ${Buffer.from(`${key}:`).toString('base64')}` };
  const validBody = () => {
    const body: Record<string, unknown> = { model: g.pick(['mock/echo', 'mock/mock-1', 'mock/some/nested/name']), messages: [{ role: 'user', content: g.text(200) }] };
    if (g.next() < 0.3) (body.messages as unknown[]).unshift({ role: g.pick(['system', 'developer']), content: [{ type: 'text', text: g.text(50) }] });
    for (let extra = g.int(0, 3); extra > 0; extra--) {
      const field = g.pick(['temperature', 'user', 'metadata', 'x_extra', g.text(5)]);
      body[field] = field === 'user' ? g.text(40) : g.json(); // an end user is a string (of at most 256 characters)
    }
    if (g.next() < 0.1) body.stream = true;
    return body;
  };
  const headersOf = (auth: Record<string, string>) => ({ 'content-type': g.pick(['application/json', 'application/json; charset=utf-8', 'text/plain', 'application/x-www-form-urlencoded']), 'x-request-id': id, ...auth });
  const post = (body: Buffer | string, auth: Record<string, string>, extra: Record<string, string> = {}) => ({
    method: 'POST',
    path: '/v1/chat/completions',
    headers: { ...headersOf(auth), ...extra },
    body: Buffer.isBuffer(body) ? body : Buffer.from(body),
  });
  const valid = () => JSON.stringify(validBody());
  const roll = g.next();

  if (roll < 0.06) return { kind: 'valid', expect: 'proxied', request: post(valid(), g.pick([bearer, basic]), g.next() < 0.3 ? { 'x-fuzz': g.text(10).replace(/[^\x20-\x7e]/g, '') } : {}) };
  if (roll < 0.26) {
    const auth = g.pick<Record<string, string>>([
      {},
      { authorization: '' },
      { authorization: g.text(30).replace(/[^\x20-\x7e]/g, 'x') },
      { authorization: `Bearer cgk_${g.text(40).replace(/[^A-Za-z0-9]/g, 'A')}` },
      { authorization: `Bearer ${key}x` },
      { authorization: `Bearer ${key} ${key}` },
      { authorization: `Basic ${Buffer.from(`${key}:password`).toString('base64')}` },
      { authorization: `Basic ${key}` },
      { authorization: `Token ${key}` },
      { authorization: `bearer  ${key.slice(0, -1)}` },
    ]);
    return { kind: 'unauthenticated', expect: 'refused', request: post(valid(), auth) };
  }
  if (roll < 0.31) return { kind: 'wrong method', expect: 'refused', request: { ...post(valid(), bearer), method: g.pick(['GET', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'TRACE']) } };
  if (roll < 0.355) return { kind: 'trailing slash', expect: 'proxied', request: { ...post(valid(), bearer), path: '/v1/chat/completions/' } }; // Express's non-strict routing
  if (roll < 0.36) {
    const path = g.pick(['/', '/v1', '/v1/chat', '/v1/chat/completions/x', '/v2/chat/completions', `/v1/${g.text(8)}`, '/%zz', '/v1/chat/completions/../../etc/passwd', `/${'a/'.repeat(g.int(1, 200))}`]);
    return { kind: 'wrong path', expect: 'refused', request: { ...post(valid(), bearer), path: encodeURI(path).replace(/%25zz/, '%zz') } };
  }
  if (roll < 0.97) {
    const mutation = g.int(0, 13);
    const body = validBody();
    switch (mutation) {
      case 0: {
        const text = JSON.stringify(body);
        return { kind: 'truncated JSON', expect: 'refused', request: post(text.slice(0, g.int(0, text.length - 1)), bearer) };
      }
      case 1: {
        const text = Buffer.from(JSON.stringify({ ...body, messages: [{ role: 'user', content: 'XX' }] }));
        const at = text.indexOf('XX');
        text[at] = 0xc3;
        text[at + 1] = 0x28; // an invalid UTF-8 sequence inside a string
        return { kind: 'invalid UTF-8', expect: 'refused', request: post(text, bearer) };
      }
      case 2:
        return { kind: 'not an object', expect: 'refused', request: post(JSON.stringify(g.pick([[], [body], 'text', 42, null, true])), bearer) };
      case 3:
        delete body.model;
        return { kind: 'no model', expect: 'refused', request: post(JSON.stringify(body), bearer) };
      case 4:
        body.model = g.pick([42, null, [], {}, 'mock', '/echo', 'mock/', '']);
        return { kind: 'bad model', expect: 'refused', request: post(JSON.stringify(body), bearer) };
      case 5:
        body.messages = g.pick([[], {}, 'hello', null, [null], [42], [{ role: 'user' }], [{ role: `${g.text(8)}x`, content: 'hi' }], [{ role: 'user', content: 42 }], [{ role: 'user', content: [] }]]);
        return { kind: 'bad messages', expect: 'refused', request: post(JSON.stringify(body), bearer) };
      case 6: {
        const depth = g.int(1_000, 100_000);
        const text = `{"model":"mock/echo","messages":${'['.repeat(depth)}${']'.repeat(depth)}}`;
        return { kind: 'deep nesting', expect: 'refused', request: post(text, bearer) };
      }
      case 7:
        return { kind: '__proto__ messages', expect: 'refused', request: post(`{"model":"mock/echo","__proto__":{"messages":[{"role":"user","content":"hi"}]},"constructor":{"prototype":{"polluted":true}}}`, bearer) };
      case 8:
        return { kind: 'compressed', expect: 'refused', request: post(valid(), bearer, { 'content-encoding': g.pick(['gzip', 'br', 'deflate']) }) };
      case 9:
        return { kind: 'too large', expect: 'refused', request: post(JSON.stringify({ ...body, padding: 'x'.repeat(MAX_BODY_BYTES) }), bearer) };
      case 10:
        return { kind: 'unknown provider', expect: 'refused', request: post(JSON.stringify({ ...body, model: `nope${g.int(0, 9)}/m` }), bearer) };
      case 11:
        return { kind: 'empty body', expect: 'refused', request: post('', bearer) };
      case 12:
        return { kind: 'giant string, no messages', expect: 'refused', request: post(JSON.stringify({ model: 'mock/echo', prompt: 'y'.repeat(g.int(1000, MAX_BODY_BYTES - 100)) }), bearer) };
      default:
        return { kind: 'random JSON object', expect: 'refused', request: post(JSON.stringify({ ...(g.json() as object), model: g.json() }), bearer) };
    }
  }
  const body = valid();
  const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${key}\r\nX-Request-Id: ${id}\r\nContent-Type: application/json\r\n`;
  const raws: Array<[string, Expect, string]> = [
    ['raw chunked, valid', 'proxied', `${head}Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n${Buffer.byteLength(body).toString(16)}\r\n${body}\r\n0\r\n\r\n`],
    ['raw CL+TE', 'refused', `${head}Content-Length: ${Buffer.byteLength(body)}\r\nTransfer-Encoding: chunked\r\n\r\n${body}`],
    ['raw two CLs', 'refused', `${head}Content-Length: ${Buffer.byteLength(body)}\r\nContent-Length: 1\r\n\r\n${body}`],
    ['raw bad chunk', 'refused', `${head}Transfer-Encoding: chunked\r\n\r\nqq\r\n${body}\r\n0\r\n\r\n`],
    ['raw header without colon', 'refused', `${head}no colon here\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`],
    ['raw control byte in a header', 'refused', `${head}X-Bad: a\x01b\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`],
    ['raw huge header', 'refused', `${head}X-Big: ${'b'.repeat(17_000)}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`],
    ['raw garbage request line', 'refused', `${g.text(20).replace(/[\r\n]/g, '')} / HTTP/9.9\r\n\r\n`],
  ];
  const [kind, expect, raw] = g.pick(raws);
  return { kind, expect, request: { raw: Buffer.from(raw) } };
}

interface Answer {
  status: number;
  body: string;
}

/** One TLS context for every connection: made from the CA's text for each, it took a tenth of this test's CPU. */
function sendOverAgent(agent: https.Agent, port: number, secureContext: tls.SecureContext, request: Extract<Case['request'], { method: string }>): Promise<Answer> {
  return new Promise((resolve) => {
    // tls.connect's secureContext, which the agent passes on (https.RequestOptions does not name it).
    const options: https.RequestOptions & Pick<tls.ConnectionOptions, 'secureContext'> = { host: '127.0.0.1', port, servername: 'localhost', secureContext, agent, method: request.method, path: request.path, headers: { ...request.headers, 'content-length': String(request.body.length) } };
    const req = https.request(options, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('close', () => resolve({ status: -1, body: 'answer cut short' })); // after 'end' this changes nothing
    });
    req.setTimeout(10_000, () => req.destroy(new Error('no answer within 10 s')));
    req.on('error', (err) => resolve({ status: -1, body: err.message }));
    req.end(request.body);
  });
}

function sendRaw(port: number, secureContext: tls.SecureContext, raw: Buffer): Promise<Answer> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    // write, not end: a half-closed connection may be dropped before its answer; the server closes it.
    const socket = tls.connect({ host: '127.0.0.1', port, secureContext, servername: 'localhost' }, () => socket.write(raw));
    socket.setTimeout(10_000, () => socket.destroy());
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', () => undefined);
    socket.on('close', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? -1);
      resolve({ status, body: text.slice(text.indexOf('\r\n\r\n') + 4) });
    });
  });
}

function problemWith(answer: Answer, expect: Expect, key: string): string | undefined {
  if (answer.body.includes(key)) return 'the answer quotes the key';
  if (answer.status >= 500 || answer.status < 0) return `status ${answer.status}: ${answer.body.slice(0, 80)}`;
  if (expect === 'proxied') return answer.status === 200 ? undefined : `status ${answer.status}, expected 200`;
  if (answer.status < 400) return `status ${answer.status}, expected a 4xx`;
  if (answer.body === '') return 'no error body';
  try {
    const { error } = JSON.parse(answer.body) as { error?: Record<string, unknown> };
    const wellFormed = error && typeof error.message === 'string' && typeof error.type === 'string' && typeof error.code === 'string' && (error.param === null || typeof error.param === 'string');
    return wellFormed ? undefined : `not an OpenAI error body: ${answer.body.slice(0, 120)}`;
  } catch {
    return `not JSON: ${answer.body.slice(0, 120)}`;
  }
}

const rssMiB = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1]) / 1024;

const liveHeapMiB = () => measured.liveMiB();

test(`${TOTAL.toLocaleString('en')} fuzzed requests: only valid ones reach the worker, every refusal is a well-formed 4xx, the gateway holds`, async () => {
  const g = generator(SEED);
  const port = gateway.port;
  const agent = new https.Agent({ keepAlive: true, maxSockets: PARALLEL });
  const secureContext = tls.createSecureContext({ ca: gateway.ca });
  const expectedProxied = new Set<string>();
  const problems: Array<{ n: number; kind: string; problem: string }> = [];
  const kinds = new Map<string, number>();
  let sent = 0;

  const sendUpTo = (count: number) =>
    Promise.all(
      Array.from({ length: PARALLEL }, async () => {
        while (sent < count) {
          const n = sent++;
          const id = `fz-${SEED}-${n}`;
          const testCase = makeCase(g, id, key);
          kinds.set(testCase.kind, (kinds.get(testCase.kind) ?? 0) + 1);
          if (testCase.expect === 'proxied') expectedProxied.add(id);
          const answer = 'raw' in testCase.request ? await sendRaw(port, secureContext, testCase.request.raw) : await sendOverAgent(agent, port, secureContext, testCase.request);
          const problem = problemWith(answer, testCase.expect, key);
          if (problem && problems.length < 20) problems.push({ n, kind: testCase.kind, problem });
        }
      }),
    );
  await sendUpTo(WARM_UP);
  const [heapAfterWarmUp, rssAfterWarmUp] = [await liveHeapMiB(), rssMiB(gateway.child.pid!)];
  await sendUpTo(TOTAL);
  agent.destroy();

  expect({ seed: SEED, problems }).toEqual({ seed: SEED, problems: [] });
  expect(gateway.child.exitCode).toBeNull(); // never crashed
  const received = new Set(await worker.reported(expectedProxied.size, 10_000));
  expect({ seed: SEED, unexpected: [...received].filter((id) => !expectedProxied.has(id)).slice(0, 5), missing: [...expectedProxied].filter((id) => !received.has(id)).slice(0, 5) }).toEqual({ seed: SEED, unexpected: [], missing: [] });
  expect(worker.received).toHaveLength(expectedProxied.size); // none twice
  const heapGrowthMiB = (await liveHeapMiB()) - heapAfterWarmUp;
  const rssGrowthMiB = rssMiB(gateway.child.pid!) - rssAfterWarmUp;
  console.log(
    `fuzz seed ${SEED}: ${TOTAL} requests, ${expectedProxied.size} valid; after warm-up, live heap grew ${heapGrowthMiB.toFixed(2)} MiB (from ${heapAfterWarmUp.toFixed(1)}), RSS ${rssGrowthMiB.toFixed(1)} MiB; by kind ${JSON.stringify(Object.fromEntries(kinds))}`,
  );
  expect(heapGrowthMiB).toBeLessThan(((TOTAL - WARM_UP) * 100) / 2 ** 20);
}, 600_000);
