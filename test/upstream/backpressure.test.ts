/**
 * An answer is relayed at the pace of the slower side: a client that stops reading holds the worker
 * back through the gateway, which buffers no more than its sockets do. A fake worker on a real socket
 * writes SSE events (or, asked with `x-answer: json`, one endless JSON answer) as fast as its
 * connection takes them and counts what it got out.
 */
import { readFileSync } from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import type { IncomingMessage } from 'node:http';
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { bearer, chatBody } from '../helpers/http';
import { listenOnLoopback } from '../helpers/net';
import { eventually, sleep } from '../helpers/time';

const EVENT = `data: ${JSON.stringify({ object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: 'x'.repeat(4000) } }] })}\n\n`;
/** What the worker would send in all: far more than the sockets between it and the client can hold. */
const ANSWER_BYTES = 512 * 2 ** 20;
/** The largest a TCP socket's buffer may grow to (autotuned), by the kernel's setting: its third figure. */
const kernelMax = (setting: string) => Number(readFileSync(`/proc/sys/net/ipv4/${setting}`, 'utf8').trim().split(/\s+/)[2]);
/**
 * Socket buffers on two loopback hops and the gateway's stream buffers stay under this: 64 MiB, or
 * what the two hops' sockets may hold by the kernel's settings and 8 MiB more, if that is larger
 * (this machine autotunes a receive buffer up to 32 MiB: two hops held 71-76 MB on Node 24).
 */
const HELD_BACK_BYTES = Math.max(64 * 2 ** 20, 2 * (kernelMax('tcp_rmem') + kernelMax('tcp_wmem')) + 8 * 2 ** 20);

let written = 0;
const firehose = http.createServer((req, res) => {
  req.resume();
  // The gateway's health checks get a worker's short answers: an endless one would fail them (and
  // after two, every request would get 503 while the test ran past ten seconds on a loaded machine).
  if (req.method === 'GET') return void res.end(req.url === '/v1/models' ? JSON.stringify({ object: 'list', data: [{ id: 'any', object: 'model' }] }) : 'ok');
  const json = req.headers['x-test-answer'] === 'json';
  res.writeHead(200, { 'content-type': json ? 'application/json' : 'text/event-stream' });
  const piece = json ? 'x'.repeat(EVENT.length) : EVENT;
  if (json) res.write('{"choices":[{"index":0,"message":{"role":"assistant","content":"');
  const pump = () => {
    while (written < ANSWER_BYTES) {
      written += piece.length;
      if (!res.write(piece)) return void res.once('drain', pump);
    }
    res.end(json ? '"}}]}' : 'data: [DONE]\n\n');
  };
  pump();
});
let gw: TestGateway;
let key: string;

beforeAll(async () => {
  // A client that leaves is drained for its usage (usage.drainAfterDisconnectMs): kept short, so that one test's
  // drain of the endless answer is over before the next test counts what the worker wrote.
  gw = await startTestGateway({ providers: { fire: { workers: [await listenOnLoopback(firehose)] } }, usage: { drainAfterDisconnectMs: 50 } });
  key = (await gw.issueKey()).key;
});
afterAll(async () => {
  await gw?.stop();
  firehose.closeAllConnections();
  firehose.close();
});

test.each(['stream', 'json'] as const)('a client that stops reading holds the worker back; reading again lets it go on (%s answer)', async (kind) => {
  written = 0;
  const response = await new Promise<IncomingMessage>((resolve, reject) => {
    const req = https.request(`${gw.url}/v1/chat/completions`, { method: 'POST', ca: gw.ca, agent: false, headers: { ...bearer(key), 'x-test-answer': kind } }, resolve);
    req.on('error', reject);
    req.end(chatBody({ model: 'fire/any', stream: kind === 'stream' }));
  });
  expect(response.statusCode).toBe(200);
  expect(response.headers['content-type']).toBe(kind === 'json' ? 'application/json' : 'text/event-stream');
  response.pause();
  // Wait until the worker is stuck: what it has written stops growing.
  let stuckAt = -1;
  await eventually(async () => {
    const now = written;
    await sleep(300);
    if (written === now && now > 0) {
      stuckAt = now;
      return now;
    }
    return undefined;
  });
  expect(stuckAt).toBeLessThan(HELD_BACK_BYTES);

  let received = 0;
  response.on('data', (chunk: Buffer) => (received += chunk.length));
  response.resume();
  // A deadline, not a timing: 64 MiB through two TLS hops took 1.1-1.5 s here, and a CI run with the
  // machine's two cores also busy elsewhere once ran past a 5 s bound.
  await eventually(async () => (written > stuckAt + HELD_BACK_BYTES ? true : undefined), 30_000);
  expect(received).toBeGreaterThan(0);
  response.destroy();
});
