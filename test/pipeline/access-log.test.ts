/**
 * The access log, captured from a real gateway's log file: exactly one line per request with the
 * documented fields, trace context carried to the worker, and no key (nor its digest) in any line.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import tls from 'node:tls';
import os from 'node:os';
import path from 'node:path';
import { digestKey } from '../../src/auth/keys';
import { startTestGateway } from '../helpers/gateway';
import { basic, bearer, chatBody, request, type RawResponse } from '../helpers/http';
import { scrape, sample } from '../helpers/metrics';
import { startWorker, type WorkerProcess } from '../helpers/processes';
import { eventually } from '../helpers/time';

let worker: WorkerProcess;
let dir: string;

beforeAll(async () => {
  worker = await startWorker();
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-log-'));
});
afterAll(async () => {
  await worker?.stop();
  rmSync(dir, { recursive: true, force: true });
});

test('one access line per request, with its fields, and never a key', async () => {
  const logFile = path.join(dir, 'chatgate.log');
  const started = await startTestGateway({ providers: { mock: { workers: [worker.url] } }, log: { level: 'info', destination: logFile } });
  const { key, id } = await started.issueKey({ name: 'logged', rateLimit: { requestsPerMinute: 3 } });
  const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
  const sent: Array<[RawResponse, number, string | null]> = [];
  const send = async (expected: number, code: string | null, headers: Record<string, string>, body = chatBody()) => {
    const response = await request(started.url, { ca: started.ca, headers, body });
    expect(response.status).toBe(expected);
    sent.push([response, expected, code]);
  };
  await send(200, null, { ...bearer(key), traceparent: `00-${traceId}-00f067aa0ba902b7-01`, tracestate: 'vendor=1' });
  await send(200, null, basic(key), chatBody({ stream: true }));
  await send(401, 'missing_api_key', {});
  await send(401, 'invalid_api_key', bearer(`cgk_${'Z'.repeat(43)}`));
  await send(400, 'invalid_body', { ...bearer(key), 'x-forwarded-for': '203.0.113.9' }, chatBody({ messages: [] })); // no trusted proxy: the claim is not the client
  await send(429, 'rate_limit_exceeded', bearer(key));
  const plain = await request(started.url.replace('https:', 'http:'), { headers: bearer(key), body: chatBody() });
  expect(plain.status).toBe(403);
  await started.stop(); // flushes the log

  const lines = readFileSync(logFile, 'utf8').trim().split('\n');
  for (const line of lines) {
    expect(line).not.toContain(key);
    expect(line).not.toContain(digestKey(key));
  }
  const access = lines.map((line) => JSON.parse(line)).filter((entry) => entry.log === 'access' && entry.msg === 'request');
  expect(access).toHaveLength(sent.length);
  const refused = lines.map((line) => JSON.parse(line)).filter((entry) => entry.log === 'access' && entry.msg === 'plain HTTP refused on the HTTPS port');
  expect(refused).toEqual([expect.objectContaining({ level: 30, service: 'chatgate', client: '127.0.0.1', status: 403, code: 'https_required', tls: false })]);
  for (const [response, status, code] of sent) {
    const matching = access.filter((entry) => entry.requestId === response.headers['x-request-id']);
    expect(matching).toHaveLength(1);
    expect(matching[0]).toMatchObject({ status, method: 'POST', path: '/v1/chat/completions', client: '127.0.0.1' });
    expect(matching[0].code).toBe(code ?? undefined);
    expect(typeof matching[0].durationMs).toBe('number');
    expect(matching[0].traceId).toMatch(/^[0-9a-f]{32}$/);
  }
  const [first, streamed] = access;
  expect(first).toMatchObject({ keyId: id, keyName: 'logged', provider: 'mock', model: 'mock/echo', stream: false, completionTokens: 16, traceId, completed: true });
  expect(first.promptTokens).toBeGreaterThan(0);
  expect(first.worker).toBe(`127.0.0.1:${worker.port}`);
  expect(first.upstreamFirstByteMs).toBeGreaterThanOrEqual(0);
  expect(streamed).toMatchObject({ stream: true, completionTokens: 16 });

  // The worker got the same trace, with the gateway's span as parent, and the client's tracestate.
  const seen = (await worker.requests()).find((r) => r.headers['x-request-id'] === sent[0]![0].headers['x-request-id'])!;
  expect(seen.headers.traceparent).toMatch(new RegExp(`^00-${traceId}-[0-9a-f]{16}-01$`));
  expect(seen.headers.traceparent).not.toContain('00f067aa0ba902b7');
  expect(seen.headers.tracestate).toBe('vendor=1');
  // A request without trace context starts a new trace.
  const other = (await worker.requests()).find((r) => r.headers['x-request-id'] === sent[1]![0].headers['x-request-id'])!;
  expect(other.headers.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
  expect(other.headers.traceparent).not.toContain(traceId);
});

test("behind a trusted proxy, an access line's client is the address it forwarded for", async () => {
  const logFile = path.join(dir, 'trusted.log');
  const started = await startTestGateway({ providers: { mock: { workers: [worker.url] } }, trustedProxies: ['127.0.0.1'], log: { level: 'info', destination: logFile } });
  const { key } = await started.issueKey({ name: 'forwarded' });
  const forwarded = await request(started.url, { ca: started.ca, headers: { ...bearer(key), 'x-forwarded-for': '198.51.100.7' }, body: chatBody() });
  const direct = await request(started.url, { ca: started.ca, headers: bearer(key), body: chatBody() });
  expect([forwarded.status, direct.status]).toEqual([200, 200]);
  await started.stop();
  const access = readFileSync(logFile, 'utf8').trim().split('\n').map((line) => JSON.parse(line)).filter((entry) => entry.log === 'access');
  const clientOf = (response: RawResponse) => access.find((entry) => entry.requestId === response.headers['x-request-id'])?.client;
  expect(clientOf(forwarded)).toBe('198.51.100.7');
  expect(clientOf(direct)).toBe('127.0.0.1');
});

test("a client that leaves before its answer: the access line still names it, with 499", async () => {
  const logFile = path.join(dir, 'left.log');
  const started = await startTestGateway({ providers: { mock: { workers: [worker.url] } }, log: { level: 'info', destination: logFile } });
  const { key } = await started.issueKey({ name: 'left' });
  const body = chatBody();
  const socket = tls.connect({ port: Number(new URL(started.url).port), host: '127.0.0.1', ca: started.ca, servername: 'localhost' });
  socket.on('error', () => undefined);
  await new Promise((resolve) => socket.once('secureConnect', resolve));
  socket.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Request-Id: left-early\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 20)}`);
  // The gateway holds the request (waiting for the rest of its body) before the client goes.
  await eventually(async () => (sample(await scrape(started.adminUrl), 'chatgate_requests_in_flight') === 1 ? true : undefined));
  socket.destroy();
  await eventually(async () => (sample(await scrape(started.adminUrl), 'chatgate_requests_in_flight') === 0 ? true : undefined));
  await started.stop();
  const lines = readFileSync(logFile, 'utf8').trim().split('\n').map((line) => JSON.parse(line)).filter((entry) => entry.requestId === 'left-early');
  expect(lines).toEqual([expect.objectContaining({ log: 'access', status: 499, completed: false, client: '127.0.0.1' })]);
});
