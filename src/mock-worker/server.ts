/**
 * An OpenAI-compatible mock model worker: POST /v1/chat/completions (JSON, or SSE with
 * `stream: true`, a usage chunk when `stream_options.include_usage` asks for it), GET /v1/models,
 * GET /health. It answers with an echo of the last user message, paced at `tokensPerSecond` after
 * `latencyMs` (a stream's head goes out first, at once). Used by the embedded defaults, the tests
 * and the benchmark.
 *
 * Test controls, per request (headers pass through the gateway untouched):
 *   x-mock-latency-ms, x-mock-tokens-per-second, x-mock-tokens (answer length in tokens)
 *   x-mock-fail: stall (never answer) | reset (cut the connection without answering) |
 *                die-mid-stream (cut the connection after the first chunk) | status-500
 *   x-mock-hold: <group> (a stream): its tokens stop, and it finishes, at its first tick after
 *                `POST /_mock/release?group=<group>`, or after x-mock-tokens tokens if that comes first
 * GET /_mock/requests lists the requests received (headers, body) and how each ended; with
 * `onRequest`, each received request's X-Request-Id is reported as it arrives (the CLI prints it).
 */
import http from 'node:http';
import { randomUUID } from 'node:crypto';

export interface MockWorkerOptions {
  latencyMs: number;
  tokensPerSecond: number;
  onRequest?: (requestId: string | undefined) => void;
}

export interface RecordedRequest {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  body: string;
  /** The client's source port: requests on one keep-alive connection share it. */
  remotePort: number | undefined;
  outcome: 'pending' | 'completed' | 'aborted';
}

const MODELS = ['echo', 'mock-1'];
const MAX_RECORDED = 1000;
const DEFAULT_TOKENS = 16;

export function createMockWorker(options: MockWorkerOptions): http.Server {
  return http.createServer(mockWorkerHandler(options));
}

/** The worker's request listener, for any server (the benchmark also serves it over HTTPS). */
export function mockWorkerHandler(options: MockWorkerOptions): http.RequestListener {
  const recorded: RecordedRequest[] = [];
  const released = new Set<string>();
  const record = (entry: RecordedRequest) => {
    recorded.push(entry);
    if (recorded.length > MAX_RECORDED) recorded.shift();
  };

  return (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const path = (req.url ?? '/').split('?')[0];
      if (req.method === 'GET' && path === '/health') return json(res, 200, { status: 'ok' });
      if (req.method === 'GET' && path === '/v1/models') return json(res, 200, modelList());
      if (req.method === 'GET' && path === '/_mock/requests') return json(res, 200, { requests: recorded });
      if (req.method === 'DELETE' && path === '/_mock/requests') {
        recorded.length = 0;
        return json(res, 200, { cleared: true });
      }
      if (req.method === 'POST' && path === '/_mock/release') {
        const group = new URL(req.url ?? '/', 'http://mock').searchParams.get('group');
        if (!group) return json(res, 400, { error: { message: 'mock worker: release needs ?group=', type: 'invalid_request_error', param: 'group', code: null } });
        released.add(group);
        return json(res, 200, { released: group });
      }
      if (req.method === 'POST' && path === '/v1/chat/completions') {
        const entry: RecordedRequest = { method: req.method, url: req.url ?? '', headers: req.headers, body, remotePort: req.socket.remotePort, outcome: 'pending' };
        record(entry);
        options.onRequest?.(typeof req.headers['x-request-id'] === 'string' ? req.headers['x-request-id'] : undefined);
        res.on('close', () => {
          entry.outcome = res.writableFinished ? 'completed' : 'aborted';
        });
        return chatCompletion(req, res, body, options, (group) => released.has(group));
      }
      json(res, 404, { error: { message: `mock worker: no route ${req.method} ${path}`, type: 'invalid_request_error', param: null, code: 'not_found' } });
    });
  };
}

function chatCompletion(req: http.IncomingMessage, res: http.ServerResponse, body: string, options: MockWorkerOptions, isReleased: (group: string) => boolean): void {
  let request: { model?: unknown; messages?: unknown; stream?: unknown; max_tokens?: unknown; stream_options?: { include_usage?: unknown } };
  try {
    request = JSON.parse(body);
  } catch {
    return json(res, 400, { error: { message: 'mock worker: body is not JSON', type: 'invalid_request_error', param: null, code: null } });
  }
  const control = controlsOf(req, options);
  if (control.fail === 'stall') return; // never answer; the gateway's timeout or the client gives up
  if (control.fail === 'reset') {
    req.socket.destroy();
    return;
  }
  if (control.fail === 'status-500') {
    return json(res, 500, { error: { message: 'mock worker: failing on purpose', type: 'server_error', param: null, code: null } });
  }

  const model = typeof request.model === 'string' ? request.model : 'echo';
  const limit = typeof request.max_tokens === 'number' && request.max_tokens > 0 ? request.max_tokens : control.tokens;
  const tokenCount = Math.min(limit, control.tokens);
  const tokenAt = answerToken(lastUserText(request.messages));
  const usage = { prompt_tokens: promptTokens(request.messages), completion_tokens: tokenCount, total_tokens: 0 };
  usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
  const id = `chatcmpl-mock-${randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);
  const finishReason = limit < control.tokens ? 'length' : 'stop';

  if (request.stream !== true) {
    const answer = () =>
      json(res, 200, {
        id,
        object: 'chat.completion',
        created,
        model,
        choices: [{ index: 0, message: { role: 'assistant', content: Array.from({ length: tokenCount }, (_, i) => tokenAt(i)).join('') }, logprobs: null, finish_reason: finishReason }],
        usage,
      });
    const delayMs = control.latencyMs + (tokenCount * 1000) / control.tokensPerSecond;
    // A timer waits at least 1 ms: a worker told to take less (the benchmark's zero-latency floor) answers at once.
    if (delayMs < 1) answer();
    else setTimeout(answer, delayMs);
    return;
  }

  const includeUsage = request.stream_options?.include_usage === true;
  const chunk = (delta: object, finish: string | null, extra: object = {}) =>
    `data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }], ...extra })}\n\n`;
  // Made when the tokens end, so that a held stream released early reports the tokens it sent.
  const finishingEvents = (sent: number, reason: string) => {
    const events = [chunk({}, reason)];
    const streamed = { ...usage, completion_tokens: sent, total_tokens: usage.prompt_tokens + sent };
    if (includeUsage) events.push(`data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model, choices: [], usage: streamed })}\n\n`);
    events.push('data: [DONE]\n\n');
    return events;
  };
  let sent = 0;
  let finishing: string[] | undefined;
  const nextEvent = (written: number): string => {
    if (written === 0) return chunk({ role: 'assistant', content: '' }, null);
    if (!finishing) {
      const released = control.hold !== undefined && isReleased(control.hold);
      if (!released && sent < tokenCount) return chunk({ content: tokenAt(sent++) }, null);
      finishing = finishingEvents(sent, released ? 'stop' : finishReason);
    }
    return finishing.shift()!;
  };

  // The head goes out when the request is taken, before the first token (which may be seconds away).
  res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
  res.flushHeaders();
  const interval = 1000 / control.tokensPerSecond;
  let written = 0;
  const send = () => {
    if (res.destroyed) return;
    res.write(nextEvent(written++));
    if (control.fail === 'die-mid-stream' && written === 2) {
      res.socket?.destroy();
      return;
    }
    if (finishing?.length === 0) res.end();
    else timer = setTimeout(send, written === 1 ? 0 : interval);
  };
  let timer = setTimeout(send, control.latencyMs);
  res.on('close', () => clearTimeout(timer));
}

function controlsOf(req: http.IncomingMessage, options: MockWorkerOptions) {
  const number = (name: string, fallback: number) => {
    const value = Number(req.headers[name]);
    return Number.isFinite(value) && value >= 0 ? value : fallback;
  };
  return {
    latencyMs: number('x-mock-latency-ms', options.latencyMs),
    tokensPerSecond: Math.max(number('x-mock-tokens-per-second', options.tokensPerSecond), 0.001),
    tokens: Math.max(1, Math.floor(number('x-mock-tokens', DEFAULT_TOKENS))),
    fail: String(req.headers['x-mock-fail'] ?? ''),
    hold: typeof req.headers['x-mock-hold'] === 'string' ? req.headers['x-mock-hold'] : undefined,
  };
}

function lastUserText(messages: unknown): string {
  if (!Array.isArray(messages)) return '';
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i] as { role?: unknown; content?: unknown };
    if (message?.role !== 'user') continue;
    if (typeof message.content === 'string') return message.content;
    if (Array.isArray(message.content)) {
      return message.content.map((part: { text?: unknown }) => (typeof part?.text === 'string' ? part.text : '')).join(' ');
    }
  }
  return '';
}

/** The i-th token of "echo: <last user message>", padded with a fixed sentence (made when sent: a held stream may send thousands). */
function answerToken(userText: string): (i: number) => string {
  const filler = 'this is the chatgate mock worker answering'.split(' ');
  const words = ['echo:', ...userText.split(/\s+/).filter(Boolean)];
  return (i) => {
    const word = i < words.length ? words[i]! : filler[(i - words.length) % filler.length]!;
    return i === 0 ? word : ' ' + word;
  };
}

function promptTokens(messages: unknown): number {
  return Array.isArray(messages) ? JSON.stringify(messages).split(/\s+/).length + messages.length * 3 : 0;
}

function modelList() {
  const created = 1_700_000_000;
  return { object: 'list', data: MODELS.map((id) => ({ id, object: 'model', created, owned_by: 'chatgate-mock' })) };
}

function json(res: http.ServerResponse, status: number, payload: unknown): void {
  const body = JSON.stringify(payload);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}
