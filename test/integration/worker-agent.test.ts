/**
 * A worker's agent keeps no request fields with a pooled connection (src/upstream/worker-agent.ts),
 * and still pools, reuses and replaces connections by what it keeps, over HTTP and over TLS. Real
 * servers on loopback; the options sent are those http-proxy builds (undefined TLS fields included).
 */
import http, { type IncomingMessage, type OutgoingHttpHeaders } from 'node:http';
import https from 'node:https';
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo, Socket } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { loadOrCreateDevCertificate, type Certificate } from '../../src/dev-certificate';
import { workerAgent } from '../../src/upstream/worker-agent';

const REQUEST_HEADERS: OutgoingHttpHeaders = { authorization: 'Bearer upstream-credential', 'x-request-id': 'req-1', 'content-type': 'application/json' };

let dir: string;
let certificate: Certificate;

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-worker-agent-'));
  certificate = await loadOrCreateDevCertificate(path.join(dir, 'tls'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Worker {
  port: number;
  connections: number;
  close(): Promise<void>;
}

/** Answers each request with its x-request-id; `?close=true` asks it to close the connection after answering. */
async function startWorker(protocol: 'http:' | 'https:'): Promise<Worker> {
  const handler = (req: IncomingMessage, res: http.ServerResponse) => {
    if (req.url?.includes('close=true')) res.setHeader('connection', 'close');
    res.end(String(req.headers['x-request-id']));
  };
  const server = protocol === 'https:' ? https.createServer({ cert: certificate.cert, key: certificate.key }, handler) : http.createServer(handler);
  const worker = { port: 0, connections: 0, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
  server.on(protocol === 'https:' ? 'secureConnection' : 'connection', () => worker.connections++);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  worker.port = (server.address() as AddressInfo).port;
  return worker;
}

/** A request as http-proxy's setupOutgoing makes it: every TLS field present, most undefined. */
function send(protocol: string, agent: http.Agent, port: number, requestId: string, query = ''): Promise<{ body: string; reused: boolean }> {
  const tls = protocol === 'https:' ? { rejectUnauthorized: true } : {};
  const options = { protocol, host: '127.0.0.1', hostname: '127.0.0.1', port, socketPath: undefined, pfx: undefined, key: undefined, passphrase: undefined, cert: undefined, ca: undefined, ciphers: undefined, secureProtocol: undefined, ...tls, localAddress: undefined, method: 'POST', path: `/v1/chat/completions${query}`, agent, headers: { ...REQUEST_HEADERS, 'x-request-id': requestId } };
  const transport = protocol === 'https:' ? https : http;
  return new Promise((resolve, reject) => {
    const req = transport.request(options, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ body, reused: req.reusedSocket }));
    });
    req.on('error', reject);
    req.end('{}');
  });
}

describe.each(['http:', 'https:'] as const)('a worker agent over %s', (protocol) => {
  let worker: Worker;
  let agent: http.Agent;
  /** What the agent keeps with each connection it pools: node's agent hands it to its 'free' event. */
  const kept: Array<Record<string, unknown>> = [];

  beforeEach(async () => {
    worker = await startWorker(protocol);
    agent = workerAgent(protocol, { keepAlive: true, maxSockets: 1, scheduling: 'lifo', ...(protocol === 'https:' ? { ca: certificate.cert } : {}) });
    kept.length = 0;
    agent.on('free', (_socket: Socket, options: Record<string, unknown>) => kept.push(options));
  });
  afterEach(async () => {
    agent.destroy();
    await worker.close();
  });

  test('keeps no request headers and no undefined fields with a pooled connection, and reuses it', async () => {
    expect(await send(protocol, agent, worker.port, 'first')).toEqual({ body: 'first', reused: false });
    expect(await send(protocol, agent, worker.port, 'second')).toEqual({ body: 'second', reused: true });
    expect(worker.connections).toBe(1);
    expect(kept).toHaveLength(2);
    for (const options of kept) {
      expect(options).not.toHaveProperty('headers');
      expect(Object.entries(options).filter(([, value]) => value === undefined)).toEqual([]);
      expect(options).toMatchObject({ host: '127.0.0.1', port: worker.port });
    }
    expect(JSON.stringify(kept, (key, value: unknown) => (key === 'agent' || key === 'ca' ? undefined : value))).not.toContain('upstream-credential');
  });

  test('opens the replacement of a closed connection for a queued request from what it kept', async () => {
    // One socket: the second request waits in the agent's queue until the worker closes the first
    // connection, and the agent then connects it with the options it kept of the first.
    const [first, second] = await Promise.all([send(protocol, agent, worker.port, 'first', '?close=true'), send(protocol, agent, worker.port, 'second')]);
    expect(first.body).toBe('first');
    expect(second).toEqual({ body: 'second', reused: false });
    expect(worker.connections).toBe(2);
  });
});
