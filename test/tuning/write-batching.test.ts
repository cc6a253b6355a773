/**
 * Writes held to the end of the event loop's iteration (src/tuning/write-batching.ts), on real loopback
 * sockets: nothing leaves before the check phase, everything leaves then, and no socket stays
 * corked, whatever else corks and uncorks it meanwhile. The last test holds the proxy stage's upstream
 * request the way upstream/proxy/index.ts does, from http-proxy's `proxyReq`, and checks the request's bytes are
 * among those held (http-proxy 1.18 emits it on the request's `socket` event, before Node flushes
 * the request it buffered), and the one before it watches the gateway itself do so.
 */
import diagnostics from 'node:diagnostics_channel';
import http from 'node:http';
import net from 'node:net';
import httpProxy from 'http-proxy';
import { startTestGateway } from '../helpers/gateway';
import { bearer, chatBody, request } from '../helpers/http';
import { listenOnLoopback } from '../helpers/net';
import { holdWritesToEndOfIteration } from '../../src/tuning/write-batching';
import { sleep } from '../helpers/time';

const endOfIteration = () => new Promise((resolve) => setImmediate(resolve));

/** A loopback server that collects what each connection sends, and clients connected to it. */
let server: net.Server;
let received: string[];
const clients: net.Socket[] = [];

beforeEach(async () => {
  received = [];
  server = net.createServer((socket) => {
    const at = received.push('') - 1;
    socket.setEncoding('utf8');
    socket.on('data', (text: string) => (received[at] += text));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
});

afterEach(async () => {
  for (const client of clients.splice(0)) client.destroy();
  await new Promise((resolve) => server.close(resolve));
});

async function connect(): Promise<net.Socket> {
  const { port } = server.address() as net.AddressInfo;
  const socket = net.connect(port, '127.0.0.1');
  clients.push(socket);
  await new Promise((resolve) => socket.once('connect', resolve));
  return socket;
}

async function receivedAll(expected: string[]): Promise<void> {
  const deadline = Date.now() + 5000;
  while ([...received].sort().join('|') !== [...expected].sort().join('|')) {
    if (Date.now() > deadline) throw new Error(`received ${JSON.stringify(received)}, expected ${JSON.stringify(expected)}`);
    await sleep(5);
  }
}

test('what is written to a held socket stays in it until the check phase, then all of it goes out', async () => {
  const socket = await connect();
  holdWritesToEndOfIteration(socket);
  socket.write('first ');
  socket.write('second');
  expect(socket.writableCorked).toBe(1);
  expect(socket.writableLength).toBe('first second'.length);

  await endOfIteration();
  expect(socket.writableCorked).toBe(0);
  await receivedAll(['first second']);
});

test('the sockets held in one iteration go out together; one held twice is released as often', async () => {
  const [a, b] = [await connect(), await connect()];
  holdWritesToEndOfIteration(a);
  holdWritesToEndOfIteration(b);
  holdWritesToEndOfIteration(a);
  a.write('to a');
  b.write('to b');
  expect([a.writableCorked, b.writableCorked]).toEqual([2, 1]);

  await endOfIteration();
  expect([a.writableCorked, b.writableCorked]).toEqual([0, 0]);
  await receivedAll(['to a', 'to b']);
});

test('a socket destroyed while held is passed over, and the others still go out', async () => {
  const [gone, live] = [await connect(), await connect()];
  holdWritesToEndOfIteration(gone);
  holdWritesToEndOfIteration(live);
  live.write('still sent');
  gone.destroy();

  await endOfIteration();
  expect(live.writableCorked).toBe(0);
  await receivedAll(['', 'still sent']);
});

test('a socket whose release throws does not keep the ones after it corked', async () => {
  const live = await connect();
  const failing = { destroyed: false, cork: () => undefined, uncork: () => { throw new Error('write failed'); } } as unknown as net.Socket;
  holdWritesToEndOfIteration(failing);
  holdWritesToEndOfIteration(live);
  live.write('after the failure');

  await endOfIteration();
  expect(live.writableCorked).toBe(0);
  await receivedAll(['after the failure']);
});

test('a hold made in the check phase goes out in the next iteration', async () => {
  const socket = await connect();
  await new Promise<void>((resolve) =>
    setImmediate(() => {
      holdWritesToEndOfIteration(socket);
      socket.write('late');
      expect(socket.writableCorked).toBe(1);
      resolve();
    }),
  );
  await endOfIteration();
  expect(socket.writableCorked).toBe(0);
  await receivedAll(['late']);
});

test('a writer that releases every level meanwhile (as OutgoingMessage.end does) sends at once, and the socket is not left corked', async () => {
  const socket = await connect();
  holdWritesToEndOfIteration(socket);
  socket.write('held ');
  socket.uncork(); // what end() does to a socket it already had: every level released
  socket.write('then straight on');
  expect(socket.writableCorked).toBe(0);
  await receivedAll(['held then straight on']);

  await endOfIteration();
  expect(socket.writableCorked).toBe(0);
  socket.write(' and later');
  await receivedAll(['held then straight on and later']);
});

test('the gateway holds each request to a worker until the end of its iteration, on a new connection and on a kept-alive one', async () => {
  const worker = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"choices":[]}'));
  });
  const workerUrl = await listenOnLoopback(worker);
  const gw = await startTestGateway({ providers: { local: { workers: [workerUrl] } } });
  const seen: Array<{ reused: boolean; corked: number; bytes: number }> = [];
  const watch = ({ request: upstream }: { request: http.ClientRequest }) => {
    const socket = upstream.socket as net.Socket | null;
    if (!socket || upstream.method !== 'POST' || upstream.getHeader('host') !== new URL(workerUrl).host) return; // not a chat request to the worker
    process.nextTick(() => seen.push({ reused: upstream.reusedSocket, corked: socket.writableCorked, bytes: socket.writableLength })); // after the proxy stage's proxyReq and Node's flush
  };
  diagnostics.subscribe('http.client.request.start', watch as (message: unknown) => void);
  try {
    const { key } = await gw.issueKey();
    for (let i = 0; i < 2; i++) {
      const answer = await request(gw.url, { headers: bearer(key), body: chatBody({ model: 'local/any' }), ca: gw.ca });
      expect(answer.status).toBe(200);
    }
    expect(seen.map(({ reused }) => reused)).toEqual([false, true]);
    for (const { corked, bytes } of seen) {
      expect(corked).toBe(1);
      expect(bytes).toBeGreaterThan(chatBody({ model: 'any' }).length);
    }
  } finally {
    diagnostics.unsubscribe('http.client.request.start', watch as (message: unknown) => void);
    await gw.stop();
    worker.closeAllConnections();
    await new Promise((resolve) => worker.close(resolve));
  }
});

test("held from http-proxy's proxyReq, the upstream request's bytes are among the held writes", async () => {
  const worker = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => res.end('answered'));
  });
  const workerUrl = await listenOnLoopback(worker);
  const agent = new http.Agent({ keepAlive: true });
  const proxy = httpProxy.createProxyServer({ target: `${workerUrl}/v1/chat/completions`, agent, ignorePath: true, selfHandleResponse: true });
  const held: Array<{ corked: number; bytes: number }> = [];
  proxy.on('proxyReq', (upstreamRequest) => {
    const socket = upstreamRequest.socket as net.Socket;
    holdWritesToEndOfIteration(socket);
    // after Node flushed what the request buffered (a connecting socket would keep the bytes anyway: the level tells)
    process.nextTick(() => held.push({ corked: socket.writableCorked, bytes: socket.writableLength }));
  });
  proxy.on('proxyRes', (answer, _req, res) => answer.pipe(res));
  const front = http.createServer((req, res) => {
    const body = Buffer.from('{"model":"echo"}');
    req.headers['content-length'] = String(body.length); // the body sent is ours, as in the proxy stage
    proxy.web(req, res, { buffer: { pipe: (upstream: http.ClientRequest) => upstream.end(body) } as never });
  });
  const frontUrl = await listenOnLoopback(front);
  try {
    for (let i = 0; i < 2; i++) {
      // the first on a new connection to the worker, the second on that connection, kept alive
      const answer = await fetch(frontUrl, { method: 'POST', body: 'ignored' }).then((r) => r.text());
      expect(answer).toBe('answered');
    }
    expect(held).toHaveLength(2);
    for (const { corked, bytes } of held) {
      expect(corked).toBe(1);
      expect(bytes).toBeGreaterThan('{"model":"echo"}'.length);
    }
  } finally {
    agent.destroy();
    proxy.close();
    await Promise.all([worker, front].map((s) => new Promise((resolve) => s.close(resolve))));
  }
});
