/**
 * Usage nobody dodges or forges, through a real gateway and a worker on a real socket that reports
 * usage the way vLLM and OpenAI do:
 * - a client that reads a stream up to its finish_reason and hangs up before the usage event is
 *   charged the worker's real usage, read after it left (chat, completions, responses);
 * - a worker that sends no usage after the client left is cut after usage.drainAfterDisconnectMs and
 *   the estimate is charged; its connection is closed and the worker no longer counted busy;
 * - metadata a client sent, echoed by the worker after the real usage, is not the usage (every
 *   endpoint, JSON and stream).
 * What is charged is read where operators read it: the key's usage in the store.
 */
import http from 'node:http';
import https from 'node:https';
import type { KeyUsage } from '../../src/store/types';
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { bearer, request } from '../helpers/http';
import { sample, scrape } from '../helpers/metrics';
import { listenOnLoopback } from '../helpers/net';
import { eventually } from '../helpers/time';

const DRAIN_MS = 1000;
const REAL = { prompt: 11, completion: 5 };
const PATHS = { chat: '/v1/chat/completions', completions: '/v1/completions', responses: '/v1/responses', embeddings: '/v1/embeddings' } as const;
type Endpoint = keyof typeof PATHS;

/** What the worker did with each request, by the X-Request-Id the gateway sent. */
interface Seen {
  bodyBytes: number;
  events: number;
  closedEarly: boolean;
  release: () => void;
}

let worker: http.Server;
let gw: TestGateway;
const seen = new Map<string, Seen>();

const event = (payload: object, type?: string) => `${type ? `event: ${type}\n` : ''}data: ${JSON.stringify(payload)}\n\n`;

/**
 * The worker. Modes (x-test-mode): `late-usage`: a stream's content up to its finish, then its usage
 * only once the test releases it; `no-usage`: the same, and then silence; `echo`: the whole answer at
 * once, with the request's `metadata` echoed after the real usage (and, in a stream, in an event after it).
 */
function workerHandler(req: http.IncomingMessage, res: http.ServerResponse): void {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    const raw = Buffer.concat(chunks);
    const body = JSON.parse(raw.toString('utf8')) as { stream?: boolean; metadata?: unknown };
    const endpoint = (Object.keys(PATHS) as Endpoint[]).find((name) => PATHS[name] === req.url)!;
    const mode = String(req.headers['x-test-mode']);
    const entry: Seen = { bodyBytes: raw.length, events: 0, closedEarly: false, release: () => undefined };
    seen.set(String(req.headers['x-request-id']), entry);
    res.on('close', () => (entry.closedEarly = !res.writableFinished));
    const metadata = body.metadata;
    const chatUsage = { prompt_tokens: REAL.prompt, completion_tokens: endpoint === 'embeddings' ? 0 : REAL.completion, total_tokens: REAL.prompt + REAL.completion };
    const responsesUsage = { input_tokens: REAL.prompt, output_tokens: REAL.completion, total_tokens: REAL.prompt + REAL.completion };

    if (!body.stream) {
      const answers: Record<Endpoint, object> = {
        chat: { id: 'c', object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }], usage: chatUsage, metadata },
        completions: { id: 't', object: 'text_completion', choices: [{ index: 0, text: 'hi', finish_reason: 'stop' }], usage: chatUsage, metadata },
        responses: { id: 'r', object: 'response', status: 'completed', output: [], usage: responsesUsage, metadata },
        embeddings: { object: 'list', data: [{ object: 'embedding', index: 0, embedding: [0.5, 0.25] }], usage: { prompt_tokens: REAL.prompt, total_tokens: REAL.prompt }, metadata },
      };
      const text = JSON.stringify(answers[endpoint]);
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
      res.end(text);
      return;
    }

    // A stream: its content up to the finish, then (at once, on release, or never) its usage.
    const content: string[] = [];
    let usage: string[];
    if (endpoint === 'responses') {
      content.push(event({ type: 'response.created', response: { id: 'r', status: 'in_progress', usage: null } }, 'response.created'));
      for (let i = 0; i < REAL.completion; i++) content.push(event({ type: 'response.output_text.delta', delta: `w${i} ` }, 'response.output_text.delta'));
      content.push(event({ type: 'response.output_text.done', text: 'done' }, 'response.output_text.done'));
      usage = [event({ type: 'response.completed', response: { id: 'r', status: 'completed', usage: responsesUsage, metadata } }, 'response.completed')];
      if (mode === 'echo') usage.push(event({ type: 'response.echo', metadata }, 'response.echo'));
    } else {
      const piece = (text: string, finish: string | null) =>
        endpoint === 'chat'
          ? { object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: text }, finish_reason: finish }] }
          : { object: 'text_completion', choices: [{ index: 0, text, finish_reason: finish }] };
      for (let i = 0; i < REAL.completion; i++) content.push(event(piece(`w${i} `, null)));
      content.push(event(piece('', 'stop')));
      usage = [event({ object: piece('', null).object, choices: [], usage: chatUsage, metadata })];
      if (mode === 'echo') usage.push(event({ object: piece('', null).object, choices: [], metadata, echo: { metadata } }));
      usage.push('data: [DONE]\n\n');
    }
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    entry.events = content.length;
    res.write(content.join(''));
    const finish = () => {
      if (!res.destroyed) res.end(usage.join(''));
    };
    if (mode === 'echo') finish();
    else if (mode === 'late-usage') entry.release = finish;
  });
}

beforeAll(async () => {
  worker = http.createServer(workerHandler);
  const workerUrl = await listenOnLoopback(worker);
  gw = await startTestGateway({
    providers: { drain: { workers: [workerUrl], models: ['m'], upstream: { health: { enabled: false } } } },
    auth: { createFirstKey: false, lastUsedFlushMs: 50 },
    usage: { drainAfterDisconnectMs: DRAIN_MS },
  });
});
afterAll(async () => {
  await gw?.stop();
  worker.closeAllConnections();
  await new Promise((resolve) => worker.close(resolve));
});

function bodyOf(endpoint: Endpoint, extra: Record<string, unknown>): string {
  const input = { chat: { messages: [{ role: 'user', content: 'Hello there' }] }, completions: { prompt: 'Hello there' }, responses: { input: 'Hello there' }, embeddings: { input: 'Hello there' } }[endpoint];
  return JSON.stringify({ model: 'drain/m', ...input, ...extra });
}

/** The key's usage as the store has it, once it has changed from `before` (the recorder writes every 50 ms). */
async function usageOf(id: string, settled: (usage: KeyUsage) => boolean): Promise<KeyUsage> {
  const store = gw.store;
  return eventually(async () => {
    const usage = (await store.get(id))?.usage;
    return usage && settled(usage) ? usage : undefined;
  });
}

const inFlight = async () => sample(await scrape(gw.adminUrl), 'chatgate_requests_in_flight');
const busy = async () =>
  (await scrape(gw.adminUrl))
    .split('\n')
    .filter((line) => line.startsWith('chatgate_worker_outstanding_requests{provider="drain"'))
    .reduce((sum, line) => sum + Number(line.slice(line.lastIndexOf(' ') + 1)), 0);

/**
 * A client that reads the stream up to its finish (finish_reason, or the responses text's `done`) and
 * then destroys its connection; resolves with the request id and all the client got.
 */
function readToFinishAndLeave(endpoint: Endpoint, key: string, mode: string): Promise<{ requestId: string; text: string }> {
  const finishMark = endpoint === 'responses' ? 'response.output_text.done' : '"finish_reason":"stop"';
  return new Promise((resolve, reject) => {
    const req = https.request(`${gw.url}${PATHS[endpoint]}`, { method: 'POST', ca: gw.ca, agent: false, headers: { ...bearer(key), 'x-test-mode': mode } }, (res) => {
      let text = '';
      res.on('data', (chunk: Buffer) => {
        text += chunk.toString('utf8');
        if (text.includes(finishMark) && text.endsWith('\n\n')) {
          res.destroy();
          resolve({ requestId: String(res.headers['x-request-id']), text });
        }
      });
      res.on('error', () => undefined);
    });
    req.on('error', reject);
    req.end(bodyOf(endpoint, { stream: true }));
  });
}

for (const endpoint of ['chat', 'completions', 'responses'] as const) {
  test(`${endpoint}: a client that leaves at the finish, before the usage, is charged the worker's real usage`, async () => {
    const { key, id } = await gw.issueKey({ name: `leaves ${endpoint}` });
    const { requestId, text } = await readToFinishAndLeave(endpoint, key, 'late-usage');
    expect(text).not.toContain('"usage":{'); // the client left with the content and without the usage
    await eventually(async () => ((await inFlight()) === 0 ? true : undefined)); // the gateway saw it leave
    const entry = seen.get(requestId)!;
    expect(entry.closedEarly).toBe(false); // the worker's request was not cancelled
    entry.release(); // only now does the worker send its usage
    const usage = await usageOf(id, (u) => u.promptTokens > 0);
    expect(usage).toEqual({ requests: 1, promptTokens: REAL.prompt, completionTokens: REAL.completion });
    expect(await eventually(async () => ((await busy()) === 0 ? 0 : undefined))).toBe(0);
    expect(entry.closedEarly).toBe(false); // the worker finished its answer
  });

  test(`${endpoint}: a worker that sends no usage after the client left is cut after drainAfterDisconnectMs, and the estimate charged`, async () => {
    const { key, id } = await gw.issueKey({ name: `no usage ${endpoint}` });
    const { requestId } = await readToFinishAndLeave(endpoint, key, 'no-usage');
    const left = Date.now();
    const entry = seen.get(requestId)!;
    await eventually(() => (entry.closedEarly ? true : undefined), 5000); // the worker's connection is closed...
    expect(Date.now() - left).toBeGreaterThanOrEqual(DRAIN_MS - 50); // ... once the drain's deadline passed
    const usage = await usageOf(id, (u) => u.promptTokens > 0);
    // The estimate: the prompt at one token per 4 bytes of the body the worker got, one token an event.
    expect(usage).toEqual({ requests: 1, promptTokens: Math.ceil(entry.bodyBytes / 4), completionTokens: entry.events });
    expect(await eventually(async () => ((await busy()) === 0 ? 0 : undefined))).toBe(0);
    const metrics = await scrape(gw.adminUrl);
    expect(metrics).not.toMatch(/chatgate_upstream_broken_answers_total\{provider="drain"[^}]*\} [1-9]/); // a client leaving is not the worker failing
    expect(metrics).not.toMatch(/chatgate_upstream_timeouts_total\{provider="drain"[^}]*\} [1-9]/);
  });
}

test('the forgery: metadata a client sent, echoed by the worker after the real usage, is not charged, on every endpoint, JSON and stream', async () => {
  const forged = { usage: { prompt_tokens: 0, completion_tokens: 0, input_tokens: 0, output_tokens: 0, total_tokens: 0 } };
  const cases: Array<[Endpoint, boolean]> = [
    ['chat', false],
    ['chat', true],
    ['completions', false],
    ['completions', true],
    ['responses', false],
    ['responses', true],
    ['embeddings', false],
  ];
  for (const [endpoint, stream] of cases) {
    const { key, id } = await gw.issueKey({ name: `forgery ${endpoint} ${stream}` });
    const answer = await request(gw.url, { ca: gw.ca, path: PATHS[endpoint], headers: { ...bearer(key), 'x-test-mode': 'echo' }, body: bodyOf(endpoint, { stream, metadata: forged }) });
    expect({ endpoint, stream, status: answer.status }).toEqual({ endpoint, stream, status: 200 });
    expect(answer.body).toContain('"metadata":{"usage":{"prompt_tokens":0'); // the worker did echo it, after the real usage
    const usage = await usageOf(id, (u) => u.requests > 0 && u.promptTokens + u.completionTokens > 0);
    expect({ endpoint, stream, usage }).toEqual({ endpoint, stream, usage: { requests: 1, promptTokens: REAL.prompt, completionTokens: endpoint === 'embeddings' ? 0 : REAL.completion } });
  }
});
