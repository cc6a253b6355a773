/**
 * A worker's Keep-Alive: timeout=N tells the gateway's agent to retire an idle connection before the
 * worker closes it; otherwise a request sent on it at that moment meets a closed socket (a reset).
 */
import http from 'node:http';
import type { Socket } from 'node:net';
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { bearer, chatBody, request } from '../helpers/http';
import { listenOnLoopback } from '../helpers/net';
import { sleep } from '../helpers/time';

const WORKER_KEEP_ALIVE_MS = 3000;

let worker: http.Server;
let gw: TestGateway;
const closedBy: Array<'gateway' | 'worker'> = [];
/** Set by a test: the next request that arrives on a kept-alive connection is answered by a reset. */
let resetNextReusedConnection = false;
let answered = 0;

beforeAll(async () => {
  const proxied = new WeakSet<Socket>();
  worker = http.createServer((req, res) => {
    if (req.method === 'POST') {
      if (resetNextReusedConnection && proxied.has(req.socket)) {
        resetNextReusedConnection = false;
        req.socket.resetAndDestroy();
        return;
      }
      proxied.add(req.socket); // the health round's GET /v1/models has its own connection
      answered++;
    }
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ id: 'c', object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }], usage: { prompt_tokens: 1, completion_tokens: 1 } }));
  });
  worker.keepAliveTimeout = WORKER_KEEP_ALIVE_MS; // Node sends "Keep-Alive: timeout=3"
  worker.on('connection', (socket: Socket) => {
    let gatewayClosed = false;
    socket.on('end', () => (gatewayClosed = true));
    socket.on('close', () => proxied.has(socket) && closedBy.push(gatewayClosed ? 'gateway' : 'worker'));
  });
  const workerUrl = await listenOnLoopback(worker);
  gw = await startTestGateway({ providers: { plain: { workers: [workerUrl], upstream: { health: { enabled: false } } } } });
});
afterAll(async () => {
  await gw?.stop();
  await new Promise((resolve) => worker.close(resolve));
});

test("the gateway retires an idle worker connection before the worker's keep-alive timeout ends it", async () => {
  const { key } = await gw.issueKey();
  const response = await request(gw.url, { ca: gw.ca, headers: bearer(key), body: chatBody({ model: 'plain/m' }) });
  expect(response.status).toBe(200);
  await sleep(WORKER_KEEP_ALIVE_MS + 500);
  expect(closedBy).toEqual(['gateway']);
});

test('a pooled connection the worker resets as it is reused is retried on a fresh one, and the client never sees it', async () => {
  const { key } = await gw.issueKey();
  const answeredBefore = answered;
  const first = await request(gw.url, { ca: gw.ca, headers: bearer(key), body: chatBody({ model: 'plain/m' }) });
  expect(first.status).toBe(200);
  resetNextReusedConnection = true;
  const second = await request(gw.url, { ca: gw.ca, headers: bearer(key), body: chatBody({ model: 'plain/m' }) });
  expect(resetNextReusedConnection).toBe(false); // the worker did reset the pooled connection
  expect(second.status).toBe(200);
  expect(answered - answeredBefore).toBe(2);
});
