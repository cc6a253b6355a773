/**
 * The transport edge: trusted proxies, slow clients, TLS versions, and headers that could smuggle
 * credentials upstream.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { gatewayWithWorker } from '../helpers/fixture';
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { bearer, chatBody, rawExchange, request } from '../helpers/http';
import { sample, scrape } from '../helpers/metrics';
import { sleep } from '../helpers/time';

const f = gatewayWithWorker({
  plainHttp: { host: '127.0.0.1', port: 0 },
  trustedProxies: ['127.0.0.1'],
  limits: { headersTimeoutMs: 500 },
});

test('behind a trusted TLS-terminating proxy, plain HTTP with X-Forwarded-Proto: https is served', async () => {
  const response = await request(f.gw.plainUrl!, {
    headers: { ...bearer(f.key), 'x-forwarded-proto': 'https', 'x-forwarded-for': '198.51.100.7' },
    body: chatBody(),
  });
  expect(response.status).toBe(200);
  const [seen] = await f.worker.requests();
  expect(seen!.headers['x-forwarded-for']).toBe('198.51.100.7, 127.0.0.1');
});

test('the trusted proxy saying the client used plain HTTP is still refused', async () => {
  const response = await request(f.gw.plainUrl!, { headers: { ...bearer(f.key), 'x-forwarded-proto': 'http' }, body: chatBody() });
  expect(response.status).toBe(403);
  expect(response.json().error.code).toBe('https_required');
  expect(await f.worker.requests()).toEqual([]);
});

test('Expect: 100-continue does not let client credentials through to the worker', async () => {
  const response = await request(f.gw.url, { ca: f.gw.ca, headers: { ...bearer(f.key), expect: '100-continue' }, body: chatBody() });
  expect(response.status).toBe(200);
  const [seen] = await f.worker.requests();
  expect(seen!.headers.authorization).toBeUndefined();
  expect(seen!.headers.expect).toBeUndefined();
});

test('a client that never finishes its headers gets 408 after headersTimeout, and others are served meanwhile', async () => {
  const port = Number(new URL(f.gw.url).port);
  const slow = tls.connect({ port, host: '127.0.0.1', ca: f.gw.ca, servername: 'localhost' });
  await new Promise((resolve) => slow.once('secureConnect', resolve));
  slow.write('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n');
  let answer = '';
  slow.on('data', (chunk) => (answer += chunk.toString('utf8')));
  expect((await request(f.gw.url, { ca: f.gw.ca, headers: bearer(f.key), body: chatBody() })).status).toBe(200);
  await new Promise((resolve) => slow.once('close', resolve));
  expect(answer).toMatch(/^HTTP\/1\.1 408 /);
  expect(errorOf(answer).code).toBe('request_timeout');
});

test('slowloris: 500 connections trickling their headers are all cut, and normal requests are served meanwhile', async () => {
  const port = Number(new URL(f.gw.url).port);
  const slow = Array.from({ length: 500 }, () => {
    let trickle: NodeJS.Timeout | undefined;
    const socket = tls.connect({ port, host: '127.0.0.1', ca: f.gw.ca, servername: 'localhost' }, () => {
      socket.write('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ');
      trickle = setInterval(() => socket.writable && socket.write('a'), 100); // a byte at a time, never finishing
    });
    socket.on('error', () => undefined);
    let answer = '';
    socket.on('data', (chunk) => (answer += chunk.toString('utf8')));
    return { socket, closed: new Promise<string>((resolve) => socket.once('close', () => resolve(answer))).finally(() => clearInterval(trickle)) };
  });
  await sleep(200); // they are connected and trickling
  const stillOpen = slow.filter(({ socket }) => !socket.destroyed).length;
  const served: number[] = [];
  for (let i = 0; i < 20; i++) served.push((await request(f.gw.url, { ca: f.gw.ca, headers: bearer(f.key), body: chatBody() })).status);
  const answers = await Promise.all(slow.map(({ closed }) => closed));
  expect(stillOpen).toBeGreaterThan(400); // the requests above were sent while the slow connections were open
  expect(served).toEqual(Array(20).fill(200));
  // Each was closed by the gateway: awaiting `answers` would time out otherwise.
  expect(answers.filter((answer) => answer.startsWith('HTTP/1.1 408 ')).length).toBeGreaterThan(450); // a few may be cut in their TLS handshake, which has the same deadline
}, 60_000);

test('more request headers than limits.maxHeaders (100) are refused with 431, not silently trimmed', async () => {
  const extra = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`x-extra-${i}`, String(i)]));
  const many = await request(f.gw.url, { ca: f.gw.ca, headers: { ...bearer(f.key), ...extra(150) }, body: chatBody() });
  expect(many.status).toBe(431);
  expect(many.json().error.code).toBe('request_headers_too_large');
  expect((await request(f.gw.url, { ca: f.gw.ca, headers: { ...bearer(f.key), ...extra(90) }, body: chatBody() })).status).toBe(200);
  expect(await f.worker.requests()).toHaveLength(1);
});

/** The OpenAI error body of a raw HTTP answer. */
function errorOf(answer: string): { message: string; type: string; param: string | null; code: string } {
  return (JSON.parse(answer.slice(answer.indexOf('\r\n\r\n') + 4)) as { error: { message: string; type: string; param: string | null; code: string } }).error;
}

describe('requests the HTTP parser refuses get the OpenAI error body, the connection is closed, and nothing is proxied', () => {
  const body = chatBody();
  const head = (key: string) => `POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\n`;
  const cases: Array<[string, (key: string) => string, number, string]> = [
    ['Content-Length together with Transfer-Encoding (smuggling)', (key) => `${head(key)}Content-Length: ${body.length}\r\nTransfer-Encoding: chunked\r\n\r\n${body.length.toString(16)}\r\n${body}\r\n0\r\n\r\n`, 400, 'malformed_request'],
    ['two different Content-Lengths', (key) => `${head(key)}Content-Length: ${body.length}\r\nContent-Length: 5\r\n\r\n${body}`, 400, 'malformed_request'],
    ['a header line without a colon', (key) => `${head(key)}this is not a header\r\nContent-Length: ${body.length}\r\n\r\n${body}`, 400, 'malformed_request'],
    ['a broken chunked body', (key) => `${head(key)}Transfer-Encoding: chunked\r\n\r\nzz\r\n${body}\r\n0\r\n\r\n`, 400, 'malformed_request'],
    ['headers over 16 KiB', (key) => `${head(key)}X-Padding: ${'a'.repeat(20_000)}\r\nContent-Length: ${body.length}\r\n\r\n${body}`, 431, 'request_headers_too_large'],
  ];
  test.each(cases)('%s', async (_name, payload, status, code) => {
    const counted = async () => sample(await scrape(f.gw.adminUrl), `chatgate_errors_total{code="${code}"}`);
    const countedBefore = await counted();
    const { head: answer, closed } = await rawExchange(f.gw, payload(f.key));
    expect((await counted()) - countedBefore).toBe(1);
    expect(answer.slice(0, 12)).toBe(`HTTP/1.1 ${status}`);
    expect(errorOf(answer)).toMatchObject({ type: 'invalid_request_error', code, param: null });
    expect(answer).not.toContain(f.key);
    expect(closed).toBe(true);
    expect(await f.worker.requests()).toEqual([]);
  });
});

test('TLS below 1.2 is refused', async () => {
  const port = Number(new URL(f.gw.url).port);
  const outcome = await new Promise<string>((resolve) => {
    const socket = tls.connect({ port, host: '127.0.0.1', ca: f.gw.ca, servername: 'localhost', minVersion: 'TLSv1', maxVersion: 'TLSv1.1' }, () => {
      socket.destroy();
      resolve('connected');
    });
    socket.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? 'error'));
  });
  expect(outcome).not.toBe('connected');
  const modern = await new Promise<string | null>((resolve) => {
    const socket = tls.connect({ port, host: '127.0.0.1', ca: f.gw.ca, servername: 'localhost', minVersion: 'TLSv1.2', maxVersion: 'TLSv1.2' }, () => {
      resolve(socket.getProtocol());
      socket.destroy();
    });
    socket.on('error', () => resolve(null));
  });
  expect(modern).toBe('TLSv1.2');
});

/** The suite a TLS 1.2 client offering only `ciphers` gets, or the error it meets. */
function negotiate(url: string, ca: string, ciphers: string): Promise<string> {
  const port = Number(new URL(url).port);
  return new Promise((resolve) => {
    const socket = tls.connect({ port, host: '127.0.0.1', ca, servername: 'localhost', minVersion: 'TLSv1.2', maxVersion: 'TLSv1.2', ciphers }, () => {
      resolve(socket.getCipher().standardName);
      socket.destroy();
    });
    socket.on('error', (err: NodeJS.ErrnoException) => resolve(`refused: ${err.code ?? err.message}`));
  });
}

describe('TLS 1.2 suites: Mozilla "intermediate" only (forward secrecy, AEAD)', () => {
  // Operators' certificates are RSA as often as ECDSA; the development certificate is ECDSA.
  let rsa: TestGateway;
  let dir: string;
  beforeAll(async () => {
    dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-rsa-'));
    const { default: selfsigned } = await import('selfsigned');
    const pems = await selfsigned.generate([{ name: 'commonName', value: 'localhost' }], {
      keyType: 'rsa',
      keySize: 2048,
      algorithm: 'sha256',
      extensions: [{ name: 'subjectAltName', altNames: [{ type: 2, value: 'localhost' }] }],
    });
    writeFileSync(path.join(dir, 'cert.pem'), pems.cert);
    writeFileSync(path.join(dir, 'key.pem'), pems.private);
    rsa = await startTestGateway({ tls: { cert: path.join(dir, 'cert.pem'), key: path.join(dir, 'key.pem') }, providers: { mock: { workers: [f.worker.url] } } });
  });
  afterAll(async () => {
    await rsa?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test.each(['AES128-SHA', 'AES256-SHA', 'AES128-GCM-SHA256', 'AES256-GCM-SHA384', 'ECDHE-RSA-AES128-SHA', 'ECDHE-RSA-AES256-SHA384'])(
    'RSA certificate: %s (no forward secrecy, or CBC) is refused',
    async (suite) => {
      expect(await negotiate(rsa.url, readFileSync(path.join(dir, 'cert.pem'), 'utf8'), suite)).toMatch(/^refused/);
    },
  );

  test.each([
    ['ECDHE-RSA-AES128-GCM-SHA256', 'TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256'],
    ['ECDHE-RSA-CHACHA20-POLY1305', 'TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256'],
  ])('RSA certificate: %s is served', async (suite, standardName) => {
    expect(await negotiate(rsa.url, readFileSync(path.join(dir, 'cert.pem'), 'utf8'), suite)).toBe(standardName);
  });

  test.each(['ECDHE-ECDSA-AES128-SHA', 'ECDHE-ECDSA-AES256-SHA384'])('ECDSA certificate: %s (CBC) is refused', async (suite) => {
    expect(await negotiate(f.gw.url, f.gw.ca, suite)).toMatch(/^refused/);
  });

  test.each([
    ['ECDHE-ECDSA-AES128-GCM-SHA256', 'TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256'],
    ['ECDHE-ECDSA-AES256-GCM-SHA384', 'TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384'],
    ['ECDHE-ECDSA-CHACHA20-POLY1305', 'TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256'],
  ])('ECDSA certificate: %s is served', async (suite, standardName) => {
    expect(await negotiate(f.gw.url, f.gw.ca, suite)).toBe(standardName);
  });
});
