/**
 * A worker's agent keeps no request fields with a pooled connection (src/upstream/worker-agent.ts),
 * and still pools, reuses and replaces connections by what it keeps, over HTTP and over TLS; it
 * retires idle connections by their deadline, the worker's Keep-Alive announcement included. Real
 * servers on loopback; the options sent are those http-proxy builds (undefined TLS fields included).
 */
import http, { type IncomingMessage, type OutgoingHttpHeaders } from 'node:http';
import https from 'node:https';
import { mkdtempSync, rmSync } from 'node:fs';
import type { AddressInfo, Socket } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { loadOrCreateDevCertificate, type Certificate } from '../../src/process/dev-certificate';
import { IDLE_SWEEP_MS, workerAgent } from '../../src/upstream/worker-agent';
import { eventually, sleep } from '../helpers/time';

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
  /** Who ended each connection that has closed, in order. */
  closedBy: Array<'agent' | 'worker'>;
  close(): Promise<void>;
}

/** Answers each request with its x-request-id; `?close=true` asks it to close the connection after answering. */
async function startWorker(protocol: 'http:' | 'https:', keepAliveTimeoutMs = 5000): Promise<Worker> {
  const handler = (req: IncomingMessage, res: http.ServerResponse) => {
    if (req.url?.includes('close=true')) res.setHeader('connection', 'close');
    res.end(String(req.headers['x-request-id']));
  };
  const server = protocol === 'https:' ? https.createServer({ cert: certificate.cert, key: certificate.key }, handler) : http.createServer(handler);
  server.keepAliveTimeout = keepAliveTimeoutMs; // announced as "Keep-Alive: timeout=<whole seconds>"
  const worker: Worker = { port: 0, connections: 0, closedBy: [], close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
  server.on(protocol === 'https:' ? 'secureConnection' : 'connection', (socket: Socket) => {
    worker.connections++;
    let agentEnded = false;
    socket.on('end', () => (agentEnded = true));
    socket.on('close', () => worker.closedBy.push(agentEnded ? 'agent' : 'worker'));
  });
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
    agent = workerAgent(protocol, { keepAlive: true, maxSockets: 1, scheduling: 'lifo', idleTimeoutMs: 30_000, ...(protocol === 'https:' ? { ca: certificate.cert } : {}) });
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

describe('idle connections of a worker agent', () => {
  let worker: Worker | undefined;
  let agent: http.Agent | undefined;
  afterEach(async () => {
    agent?.destroy();
    await worker?.close();
    jest.restoreAllMocks();
  });

  test('an idle connection is reused within idleTimeoutMs, then closed by the agent', async () => {
    worker = await startWorker('http:', 60_000);
    agent = workerAgent('http:', { keepAlive: true, maxSockets: 4, idleTimeoutMs: 1000 });
    expect(await send('http:', agent, worker.port, 'first')).toEqual({ body: 'first', reused: false });
    await sleep(600);
    expect(await send('http:', agent, worker.port, 'second')).toEqual({ body: 'second', reused: true });
    await sleep(500); // idle for 500 ms of its 1000 (less one sweep, its deadline may come early), counted from the second answer
    expect(worker.closedBy).toEqual([]);
    await sleep(500 + IDLE_SWEEP_MS + 200);
    expect(worker.closedBy).toEqual(['agent']);
    expect(worker.connections).toBe(1);
  });

  test("a worker's shorter keep-alive timeout retires the connection before the worker closes it", async () => {
    worker = await startWorker('http:', 2000); // "Keep-Alive: timeout=2": kept a second less at most
    agent = workerAgent('http:', { keepAlive: true, maxSockets: 4, idleTimeoutMs: 30_000 });
    await send('http:', agent, worker.port, 'first');
    await sleep(1000 + IDLE_SWEEP_MS + 250); // its second and the sweep after it are past, the worker's 2 s are not
    expect(worker.closedBy).toEqual(['agent']);
  });

  test('a connection whose worker announces too short a keep-alive timeout to use is not pooled', async () => {
    worker = await startWorker('http:', 1000); // "Keep-Alive: timeout=1": nothing left once the margin is taken
    agent = workerAgent('http:', { keepAlive: true, maxSockets: 4, idleTimeoutMs: 30_000 });
    expect(await send('http:', agent, worker.port, 'first')).toEqual({ body: 'first', reused: false });
    expect(await send('http:', agent, worker.port, 'second')).toEqual({ body: 'second', reused: false });
    expect(worker.connections).toBe(2);
  });

  test('the sweep runs only while a connection is idle, and starts again when one is', async () => {
    const started = jest.spyOn(global, 'setInterval');
    const stopped = jest.spyOn(global, 'clearInterval');
    worker = await startWorker('http:', 60_000);
    agent = workerAgent('http:', { keepAlive: true, maxSockets: 4, idleTimeoutMs: 300 });
    await Promise.all([send('http:', agent, worker.port, 'a'), send('http:', agent, worker.port, 'b')]);
    await send('http:', agent, worker.port, 'c');
    const sweeps = () => started.mock.results.filter((_, i) => started.mock.calls[i]![1] === IDLE_SWEEP_MS).map((result) => result.value as NodeJS.Timeout);
    expect(sweeps()).toHaveLength(1); // one sweep for the agent, however many connections go idle
    // Waited for, not slept on: a loaded CI machine once saw the third close after a fixed wait.
    await eventually(() => (worker!.closedBy.length >= 2 ? true : undefined), 10_000);
    expect(worker.closedBy).toEqual(['agent', 'agent']);
    expect(stopped).toHaveBeenCalledWith(sweeps()[0]);

    await send('http:', agent, worker.port, 'd');
    expect(sweeps()).toHaveLength(2);
    await eventually(() => (worker!.closedBy.length >= 3 ? true : undefined), 10_000);
    expect(worker.closedBy).toEqual(['agent', 'agent', 'agent']);
    expect(stopped).toHaveBeenCalledWith(sweeps()[1]);
  });
});
