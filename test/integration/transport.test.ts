/**
 * The transport edge: trusted proxies, slow clients, TLS versions, and headers that could smuggle
 * credentials upstream.
 */
import tls from 'node:tls';
import { gatewayWithWorker } from '../helpers/fixture';
import { bearer, chatBody, request } from '../helpers/http';

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
