/**
 * The admin listener is no weaker than the public one: the same header and request timeouts hold a
 * slow client no longer, wrong admin tokens are logged and throttled per client address, and it
 * answers only to Host names that cannot be a DNS rebinding (IP addresses, localhost, and the names
 * in admin.allowedHosts), so a web page elsewhere cannot read /metrics or /readyz through a browser.
 */
import net from 'node:net';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { request } from '../helpers/http';
import { sample, scrape } from '../helpers/metrics';

const TOKEN = 'admin-token-for-the-listener-test';
let gw: TestGateway;
let dir: string;
let logFile: string;

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-admin-listener-'));
  logFile = path.join(dir, 'chatgate.log');
  gw = await startTestGateway({
    admin: { host: '127.0.0.1', port: 0, token: TOKEN, allowedHosts: ['chatgate-admin.monitoring.svc'] },
    limits: { headersTimeoutMs: 1000, requestTimeoutMs: 2000 },
    log: { level: 'info', destination: logFile },
    providers: { mock: { workers: ['http://127.0.0.1:9'] } },
    upstream: { health: { enabled: false } },
  });
});
afterAll(async () => {
  await gw?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const port = () => Number(new URL(gw.adminUrl).port);

/** Opens a connection, sends `text`, and reports what came back and when the server closed it. */
function slowClient(text: string): Promise<{ answer: string; closedAfterMs: number }> {
  return new Promise((resolve) => {
    const started = performance.now();
    let answer = '';
    const socket = net.connect(port(), '127.0.0.1', () => socket.write(text));
    socket.on('data', (chunk) => (answer += chunk.toString('utf8')));
    socket.on('error', () => undefined);
    socket.on('close', () => resolve({ answer, closedAfterMs: performance.now() - started }));
  });
}

test('a client that never finishes its headers is answered 408 and let go at the headers timeout', async () => {
  const { answer, closedAfterMs } = await slowClient('GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ');
  expect(answer).toMatch(/^HTTP\/1\.1 408 /);
  expect(answer).toContain('"code":"request_timeout"');
  expect(closedAfterMs).toBeGreaterThan(900);
  expect(closedAfterMs).toBeLessThan(4000); // the limit plus Node's once-a-second check, not the 88 s it took before
});

test.each([
  ['a rebinding name', 'attacker.example', 403],
  ['a rebinding name with a port', 'attacker.example:9464', 403],
  ['an IPv4 address', '127.0.0.1', 200],
  ['an IPv4 address with a port', '10.1.2.3:9464', 200],
  ['an IPv6 address', '[::1]:9464', 200],
  ['localhost', 'localhost:9464', 200],
  ['a name the operator allowed', 'chatgate-admin.monitoring.svc:9464', 200],
  ['an allowed name, written in capitals', 'CHATGATE-ADMIN.Monitoring.svc', 200],
])('Host %s (%s): %d', async (_what, host, status) => {
  for (const where of ['/metrics', '/readyz', '/healthz']) {
    const response = await request(gw.adminUrl, { method: 'GET', path: where, headers: { host } });
    expect({ where, status: response.status }).toEqual({ where, status });
    if (status === 403) expect(response.json().error.code).toBe('host_not_allowed');
  }
});

test('wrong admin tokens are logged without the token and throttled: ten, then 429 for the address, the right token included', async () => {
  const call = (token: string) => request(gw.adminUrl, { method: 'GET', path: '/admin/api/keys', headers: { authorization: `Bearer ${token}` } });
  expect((await call(TOKEN)).status).toBe(200);
  const guesses = Array.from({ length: 10 }, (_, i) => `guess-number-${i}-of-the-admin-token`);
  const statuses = [];
  for (const guess of guesses) statuses.push((await call(guess)).status);
  expect(statuses).toEqual(Array(10).fill(401));
  const throttled = await call('yet-another-guess-at-the-token');
  expect(throttled.status).toBe(429);
  expect(throttled.json().error.code).toBe('too_many_failed_attempts');
  expect(Number(throttled.headers['retry-after'])).toBeGreaterThan(50);
  expect((await call(TOKEN)).status).toBe(429); // no check at all while throttled: guessing gains nothing
  const metrics = await scrape(gw.adminUrl);
  expect(sample(metrics, 'chatgate_admin_auth_failures_total{outcome="invalid"}')).toBe(10);
  expect(sample(metrics, 'chatgate_admin_auth_failures_total{outcome="throttled"}')).toBe(2);

  await gw.stop(); // flushes the log
  const lines = readFileSync(logFile, 'utf8').split('\n').filter(Boolean).map((line) => JSON.parse(line) as Record<string, unknown>);
  expect(lines.filter((line) => line.msg === 'admin token refused')).toHaveLength(10);
  expect(lines.filter((line) => line.msg === 'admin token refused').every((line) => line.client === '127.0.0.1' && line.path === '/keys')).toBe(true);
  expect(lines.filter((line) => String(line.msg).startsWith('too many wrong admin tokens'))).toHaveLength(1);
  const log = lines.map((line) => JSON.stringify(line)).join('\n');
  for (const secret of [TOKEN, ...guesses]) expect(log).not.toContain(secret);
});
