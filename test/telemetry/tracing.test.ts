/**
 * OpenTelemetry export: with tracing.otlpEndpoint set, each request becomes one span received by a
 * local OTLP/HTTP endpoint, with the ids the worker saw in traceparent and the client's span as parent.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { issueKey } from '../../src/auth/issue';
import { SqliteKeyStore } from '../../src/store/sqlite/store';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { bearer, chatBody, request } from '../helpers/http';
import { listenOnLoopback } from '../helpers/net';
import { startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';
import { eventually } from '../helpers/time';

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  attributes: Array<{ key: string; value: Record<string, unknown> }>;
}

let receiver: http.Server;
const bodies: string[] = [];
let worker: WorkerProcess;
let gw: GatewayProcess;
let dir: string;
let storeFile: string;

beforeAll(async () => {
  receiver = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      if (req.url === '/v1/traces') bodies.push(body);
      res.setHeader('content-type', 'application/json');
      res.end('{}');
    });
  });
  const receiverUrl = await listenOnLoopback(receiver);
  worker = await startWorker();
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-tracing-'));
  storeFile = path.join(dir, 'chatgate.db');
  // Its own process: the OTLP exporter loads node:http with import(), which jest's module sandbox refuses.
  gw = await startGatewayProcess(dir, 'tracing', {
    keyStore: { type: 'sqlite', path: storeFile },
    providers: { mock: { workers: [worker.url] } },
    tracing: { otlpEndpoint: `${receiverUrl}/v1/traces`, serviceName: 'chatgate-test' },
  });
}, 30_000);
afterAll(async () => {
  if (gw) await stopProcess(gw.child);
  await worker?.stop();
  await new Promise((resolve) => receiver.close(resolve));
  rmSync(dir, { recursive: true, force: true });
});

const spans = (): OtlpSpan[] =>
  bodies.flatMap((body) => (JSON.parse(body) as { resourceSpans: Array<{ scopeSpans: Array<{ spans: OtlpSpan[] }> }> }).resourceSpans.flatMap((r) => r.scopeSpans.flatMap((s) => s.spans)));
const attribute = (span: OtlpSpan, key: string) => Object.values(span.attributes.find((a) => a.key === key)?.value ?? {})[0];

test("each request is one span: the client's trace continued, the worker's parent, what happened as attributes, no key", async () => {
  const { key, record } = await issueKey(new SqliteKeyStore(storeFile), { name: 'traced' });
  const clientTrace = '4bf92f3577b34da6a3ce929d0e0e4736';
  const clientSpan = '00f067aa0ba902b7';
  const answered = await request(gw.url, { ca: gw.ca, headers: { ...bearer(key), traceparent: `00-${clientTrace}-${clientSpan}-01` }, body: chatBody() });
  expect(answered.status).toBe(200);
  const refused = await request(gw.url, { ca: gw.ca, headers: bearer('cg_wrong'), body: chatBody() });
  expect(refused.status).toBe(401);

  const [seen] = await worker.requests();
  const [, traceId, workerParent] = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(String(seen!.headers.traceparent))!;
  const exported = await eventually(() => (spans().length >= 2 ? spans() : undefined), 10_000);

  const served = exported.find((span) => span.traceId === clientTrace)!;
  expect(served).toMatchObject({ traceId, spanId: workerParent, parentSpanId: clientSpan, name: 'POST /v1/chat/completions', kind: 2 /* SERVER */ });
  expect(attribute(served, 'http.response.status_code')).toBe(200);
  expect(attribute(served, 'gen_ai.request.model')).toBe('mock/echo');
  expect(attribute(served, 'chatgate.key_id')).toBe(record.id);
  expect(Number(attribute(served, 'gen_ai.usage.output_tokens'))).toBeGreaterThan(0);

  const root = exported.find((span) => span.traceId !== clientTrace)!;
  expect(root.parentSpanId ?? '').toBe('');
  expect(attribute(root, 'http.response.status_code')).toBe(401);
  expect(attribute(root, 'error.type')).toBe('invalid_api_key');
  expect(bodies.join('')).toContain('chatgate-test');
  expect(bodies.join('')).not.toContain(key);
});
