/**
 * Every row of DESIGN.md's error table that the request path covers, sent over real sockets. Each
 * answer is the OpenAI error shape with the documented status and code, never echoes the key, and
 * nothing that failed reaches a worker.
 */
import tls from 'node:tls';
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { basic, bearer, chatBody, rawExchange, request, type RawResponse } from '../helpers/http';
import { scrape, sample } from '../helpers/metrics';
import { freePort } from '../helpers/net';
import { startWorker, type WorkerProcess } from '../helpers/processes';
import { eventually } from '../helpers/time';

let worker: WorkerProcess;
let gw: TestGateway;
let key: string;
let restrictedKey: string;
let refusedPort: number;

beforeAll(async () => {
  worker = await startWorker();
  refusedPort = await freePort();
  gw = await startTestGateway({
    plainHttp: { host: '127.0.0.1', port: 0 },
    limits: { maxBodyBytes: 64 * 1024 },
    providers: {
      mock: { workers: [worker.url] },
      down: { workers: [`http://127.0.0.1:${refusedPort}`] },
      slow: { workers: [worker.url], upstream: { firstByteTimeoutMs: 300 } },
    },
  });
  ({ key } = await gw.issueKey());
  ({ key: restrictedKey } = await gw.issueKey({ name: 'restricted', models: ['mock/*'] }));
});

afterAll(async () => {
  await gw?.stop();
  await worker?.stop();
});

beforeEach(() => worker.clear());

function expectError(response: RawResponse, status: number, code: string, param: string | null = null) {
  expect({ status: response.status, code: response.json().error.code, param: response.json().error.param }).toEqual({ status, code, param });
  const { error } = response.json();
  expect(Object.keys(error).sort()).toEqual(['code', 'message', 'param', 'type']);
  expect(error.message.length).toBeGreaterThan(10);
  expect(response.body).not.toContain(key);
  expect(response.body).not.toMatch(/at .*\.(ts|js):\d+/); // no stack trace
}

async function expectNothingProxied() {
  expect(await worker.requests()).toEqual([]);
}

describe('transport', () => {
  test('plain HTTP to the HTTPS port: 403 https_required in plain HTTP, never proxied', async () => {
    const response = await request(gw.url.replace('https:', 'http:'), { headers: bearer(key), body: chatBody() });
    expectError(response, 403, 'https_required');
    expect(response.headers.connection).toBe('close');
    await expectNothingProxied();
  });

  test('the plain-HTTP port refuses every request with 403 https_required, a valid key or not', async () => {
    for (const headers of [bearer(key), {}]) {
      expectError(await request(gw.plainUrl!, { headers, body: chatBody() }), 403, 'https_required');
    }
    expectError(await request(gw.plainUrl!, { method: 'GET', path: '/anything' }), 403, 'https_required');
    await expectNothingProxied();
  });

  test('X-Forwarded-Proto: https from an untrusted address does not make plain HTTP secure', async () => {
    const response = await request(gw.plainUrl!, { headers: { ...bearer(key), 'x-forwarded-proto': 'https' }, body: chatBody() });
    expectError(response, 403, 'https_required');
    await expectNothingProxied();
  });
});

describe('authentication', () => {
  const cases: Array<[string, Record<string, string>, string]> = [
    ['no Authorization header', {}, 'missing_api_key'],
    ['an empty Authorization header', { authorization: '' }, 'missing_api_key'],
    ['an unknown scheme', { authorization: 'Token abc' }, 'invalid_authorization_header'],
    ['Bearer with an empty key', { authorization: 'Bearer ' }, 'invalid_authorization_header'],
    ['Basic with bad base64', { authorization: 'Basic %%%notbase64' }, 'invalid_authorization_header'],
    ['Basic without a colon', { authorization: `Basic ${Buffer.from('justakey').toString('base64')}` }, 'invalid_authorization_header'],
    ['Basic with a non-empty password', { authorization: `Basic ${Buffer.from('user:password').toString('base64')}` }, 'invalid_authorization_header'],
    ['an unknown key', bearer(`cgk_${'A'.repeat(43)}`), 'invalid_api_key'],
    ['a string that is no key at all', bearer('sk-not-ours'), 'invalid_api_key'],
  ];
  test.each(cases)('%s: 401 with WWW-Authenticate naming both schemes', async (_name, headers, code) => {
    const response = await request(gw.url, { ca: gw.ca, headers, body: chatBody() });
    expectError(response, 401, code);
    expect(response.headers['www-authenticate']).toMatch(/Bearer realm="chatgate".*Basic realm="chatgate"/);
    await expectNothingProxied();
  });

  test('a revoked key: 401 invalid_api_key, by either scheme', async () => {
    const { key: doomed, id } = await gw.issueKey({ name: 'doomed' });
    await gw.revokeKey(id);
    for (const headers of [bearer(doomed), basic(doomed)]) {
      const response = await request(gw.url, { ca: gw.ca, headers, body: chatBody() });
      expectError(response, 401, 'invalid_api_key');
      expect(response.body).not.toContain(doomed);
    }
    await expectNothingProxied();
  });

  test('an expired key: 401 invalid_api_key', async () => {
    const { key: old } = await gw.issueKey({ name: 'old', expiresAt: new Date(Date.now() - 1000) });
    const response = await request(gw.url, { ca: gw.ca, headers: bearer(old), body: chatBody() });
    expectError(response, 401, 'invalid_api_key');
    expect(response.body).not.toContain(old);
  });

  test('a key not allowed the model: 403 model_not_allowed; allowed models still work', async () => {
    expectError(await request(gw.url, { ca: gw.ca, headers: bearer(restrictedKey), body: chatBody({ model: 'slow/echo' }) }), 403, 'model_not_allowed', 'model');
    // The key's globs are checked before the provider, so a restricted key learns nothing about other providers.
    expectError(await request(gw.url, { ca: gw.ca, headers: bearer(restrictedKey), body: chatBody({ model: 'nope/x' }) }), 403, 'model_not_allowed', 'model');
    await expectNothingProxied();
    expect((await request(gw.url, { ca: gw.ca, headers: bearer(restrictedKey), body: chatBody() })).status).toBe(200);
  });
});

describe('body', () => {
  const send = (body: string | Buffer, headers: Record<string, string> = {}) => request(gw.url, { ca: gw.ca, headers: { ...bearer(key), ...headers }, body });

  test.each([
    ['not JSON', '{"model": "mock/echo",'],
    ['empty', ''],
    ['not UTF-8', Buffer.from([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x7d])],
  ])('%s: 400 invalid_json', async (_name, body) => {
    expectError(await send(body), 400, 'invalid_json');
    await expectNothingProxied();
  });

  test('a JSON error does not quote the body (which may hold a key)', async () => {
    const response = await send(`${key} is not json`);
    expectError(response, 400, 'invalid_json');
  });

  test.each([
    ['not an object', '[1,2]', null],
    ['model missing', JSON.stringify({ messages: [{ role: 'user', content: 'x' }] }), 'model'],
    ['model with an empty provider', chatBody({ model: '/echo' }), 'model'],
    ['model without provider, and no alias of that name', chatBody({ model: 'gpt-4o' }), 'model'],
    ['messages empty', chatBody({ messages: [] }), 'messages'],
    ['a bad role', chatBody({ messages: [{ role: 'user', content: 'a' }, { role: 'user', content: 'b' }, { role: 'wizard', content: 'c' }] }), 'messages[2].role'],
    ['content missing', chatBody({ messages: [{ role: 'user' }] }), 'messages[0].content'],
    ['stream not boolean', chatBody({ stream: 'yes' }), 'stream'],
  ])('%s: 400 invalid_body naming the field', async (_name, body, param) => {
    expectError(await send(body), 400, 'invalid_body', param);
    await expectNothingProxied();
  });

  test('unknown provider: 404 model_not_found', async () => {
    expectError(await send(chatBody({ model: 'nosuch/model' })), 404, 'model_not_found', 'model');
    await expectNothingProxied();
  });

  test('a compressed body: 415 unsupported_content_encoding', async () => {
    expectError(await send(chatBody(), { 'content-encoding': 'gzip' }), 415, 'unsupported_content_encoding');
  });

  test('a body over the limit: 413 request_too_large', async () => {
    const big = chatBody({ messages: [{ role: 'user', content: 'x'.repeat(70 * 1024) }] });
    expectError(await send(big), 413, 'request_too_large');
    await expectNothingProxied();
  });

  test('a chunked body (no declared length) that grows past the limit: 413 request_too_large, nothing proxied', async () => {
    const piece = 'x'.repeat(16 * 1024);
    const chunks = Array.from({ length: 5 }, () => `${piece.length.toString(16)}\r\n${piece}\r\n`).join('');
    const { head } = await rawExchange(
      gw,
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n${chunks}0\r\n\r\n`,
    );
    expect(head).toMatch(/^HTTP\/1\.1 413 /);
    expect(head).toMatch(/request_too_large/);
    await expectNothingProxied();
  });

  test('a declared Content-Length over the limit is refused before the body is sent, and the connection closed', async () => {
    const { head, closed } = await rawExchange(
      gw,
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: 1073741824\r\n\r\n`,
    );
    expect(head).toMatch(/^HTTP\/1\.1 413 /);
    expect(head).toMatch(/request_too_large/);
    expect(closed).toBe(true);
    await expectNothingProxied();
  });

  test('a client that stops sending halfway through its body: counted as invalid_request, nothing proxied, serving goes on', async () => {
    const counted = async () => sample(await scrape(gw.adminUrl), 'chatgate_errors_total{code="invalid_request"}');
    const before = await counted();
    const body = chatBody();
    await new Promise<void>((resolve) => {
      const socket = tls.connect({ port: Number(new URL(gw.url).port), host: '127.0.0.1', ca: gw.ca, servername: 'localhost' }, () => {
        socket.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${body.length + 100}\r\n\r\n${body.slice(0, 20)}`);
        setTimeout(() => socket.end(), 100); // the rest never comes
      });
      socket.resume();
      socket.on('close', () => resolve());
      socket.on('error', () => undefined); // the gateway may reset the half-closed connection
    });
    expect(await eventually(async () => ((await counted()) === before + 1 ? true : undefined))).toBe(true);
    await expectNothingProxied();
    expect((await request(gw.url, { ca: gw.ca, headers: bearer(key), body })).status).toBe(200);
  });

  test('a refusal before the body is read closes the connection instead of reading what the client still sends', async () => {
    const { head, closed } = await rawExchange(
      gw,
      'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 10485760\r\n\r\n{"model":',
    );
    expect(head).toMatch(/^HTTP\/1\.1 401 /);
    expect(head).toMatch(/connection: close/i);
    expect(closed).toBe(true);
  });
});

describe('routing', () => {
  test('unknown path: 404 not_found; wrong method: 405 with Allow', async () => {
    expectError(await request(gw.url, { ca: gw.ca, method: 'GET', path: '/v1/nothing' }), 404, 'not_found');
    const wrongMethod = await request(gw.url, { ca: gw.ca, method: 'GET', headers: bearer(key) });
    expectError(wrongMethod, 405, 'method_not_allowed');
    expect(wrongMethod.headers.allow).toBe('POST');
  });
});

describe('upstream', () => {
  test('a worker that refuses the connection: 502 upstream_unavailable', async () => {
    expectError(await request(gw.url, { ca: gw.ca, headers: bearer(key), body: chatBody({ model: 'down/echo' }) }), 502, 'upstream_unavailable');
  });

  test('a worker silent past the provider timeout: 504 upstream_timeout, and the worker sees the request abandoned', async () => {
    const response = await request(gw.url, { ca: gw.ca, headers: { ...bearer(key), 'x-mock-fail': 'stall' }, body: chatBody({ model: 'slow/echo' }) });
    expectError(response, 504, 'upstream_timeout');
    const outcome = await eventually(async () => {
      const [seen] = await worker.requests();
      return seen?.outcome === 'pending' ? undefined : seen?.outcome;
    });
    expect(outcome).toBe('aborted');
  });

  test('after upstream failures the gateway keeps serving', async () => {
    expect((await request(gw.url, { ca: gw.ca, headers: bearer(key), body: chatBody() })).status).toBe(200);
  });
});
