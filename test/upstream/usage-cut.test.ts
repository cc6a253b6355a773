/**
 * A stream cut short still costs what it used: with usage in every chunk (vLLM's continuous usage
 * stats), the tokens seen before the cut are charged, whether the client left or the worker died.
 */
import http from 'node:http';
import https from 'node:https';
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { bearer, chatBody } from '../helpers/http';
import { sample, scrape } from '../helpers/metrics';
import { listenOnLoopback } from '../helpers/net';
import { eventually } from '../helpers/time';

let worker: http.Server;
let gw: TestGateway;

const chunk = (completionTokens: number) =>
  `data: ${JSON.stringify({ object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: 'x' } }], usage: { prompt_tokens: 5, completion_tokens: completionTokens } })}\n\n`;

beforeAll(async () => {
  // Three chunks with a growing usage total, then silence (?end=die: the connection is cut instead).
  worker = http.createServer((req, res) => {
    req.resume();
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(chunk(1) + chunk(2) + chunk(3));
    if (req.headers['x-test-end'] === 'die') setTimeout(() => req.socket.destroy(), 50);
  });
  const workerUrl = await listenOnLoopback(worker);
  // A client that leaves is drained (usage.drainAfterDisconnectMs) for the usage still to come; this worker sends none.
  gw = await startTestGateway({ providers: { cut: { workers: [workerUrl], models: ['m'], upstream: { health: { enabled: false } } } }, usage: { drainAfterDisconnectMs: 300 } });
});
afterAll(async () => {
  await gw?.stop();
  worker.closeAllConnections();
  await new Promise((resolve) => worker.close(resolve));
});

const completionTokens = async () => sample(await scrape(gw.adminUrl), 'chatgate_tokens_total{endpoint="chat",provider="cut",model="m",alias="none",kind="completion"}');

function streamUntilThirdChunk(key: string, headers: Record<string, string> = {}): Promise<http.IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = https.request(`${gw.url}/v1/chat/completions`, { method: 'POST', ca: gw.ca, servername: 'localhost', headers: { ...bearer(key), ...headers } }, (res) => {
      let text = '';
      res.on('data', (part: Buffer) => {
        text += part.toString('utf8');
        if (text.includes('"completion_tokens":3')) resolve(res);
      });
      res.on('error', () => undefined);
    });
    req.on('error', reject);
    req.end(chatBody({ model: 'cut/m', stream: true, stream_options: { include_usage: true } }));
  });
}

test('the client leaves mid-stream: the 3 tokens seen are charged, once', async () => {
  const { key } = await gw.issueKey();
  const before = await completionTokens();
  (await streamUntilThirdChunk(key)).destroy();
  expect(await eventually(async () => ((await completionTokens()) > before ? (await completionTokens()) - before : undefined))).toBe(3);
});

test('the worker dies mid-stream: the 3 tokens seen are charged, once', async () => {
  const { key } = await gw.issueKey();
  const before = await completionTokens();
  const res = await streamUntilThirdChunk(key, { 'x-test-end': 'die' });
  await new Promise((resolve) => res.on('close', resolve));
  expect(await eventually(async () => ((await completionTokens()) > before ? (await completionTokens()) - before : undefined))).toBe(3);
});
