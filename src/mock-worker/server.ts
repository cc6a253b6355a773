/**
 * An OpenAI-compatible mock model worker: POST /v1/chat/completions (JSON, or SSE with
 * `stream: true`, a usage chunk when `stream_options.include_usage` asks for it), POST
 * /v1/completions (the same for a `prompt`), POST /v1/responses (a Responses API object, or its
 * stream of typed events ending in `response.completed` with the usage), POST /v1/embeddings (a
 * vector per input, usage of prompt tokens only), GET /v1/models, GET /health. It answers with an
 * echo of the last user message (or the prompt, or the input), paced at `tokensPerSecond` after
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
      const endpoint = req.method === 'POST' ? ENDPOINTS[path ?? ''] : undefined;
      if (endpoint) {
        const entry: RecordedRequest = { method: req.method!, url: req.url ?? '', headers: req.headers, body, remotePort: req.socket.remotePort, outcome: 'pending' };
        record(entry);
        options.onRequest?.(typeof req.headers['x-request-id'] === 'string' ? req.headers['x-request-id'] : undefined);
        res.on('close', () => {
          entry.outcome = res.writableFinished ? 'completed' : 'aborted';
        });
        return answer(endpoint, req, res, body, options, (group) => released.has(group));
      }
      json(res, 404, { error: { message: `mock worker: no route ${req.method} ${path}`, type: 'invalid_request_error', param: null, code: 'not_found' } });
    });
  };
}

type Endpoint = 'chat' | 'completions' | 'responses' | 'embeddings';
const ENDPOINTS: Record<string, Endpoint> = {
  '/v1/chat/completions': 'chat',
  '/v1/completions': 'completions',
  '/v1/responses': 'responses',
  '/v1/embeddings': 'embeddings',
};

interface MockRequest {
  model?: unknown;
  messages?: unknown;
  prompt?: unknown;
  input?: unknown;
  stream?: unknown;
  max_tokens?: unknown;
  max_output_tokens?: unknown;
  stream_options?: { include_usage?: unknown };
  encoding_format?: unknown;
}

function answer(endpoint: Endpoint, req: http.IncomingMessage, res: http.ServerResponse, body: string, options: MockWorkerOptions, isReleased: (group: string) => boolean): void {
  let request: MockRequest;
  try {
    request = JSON.parse(body);
  } catch {
    json(res, 400, { error: { message: 'mock worker: body is not JSON', type: 'invalid_request_error', param: null, code: null } });
    return;
  }
  const control = controlsOf(req, options);
  if (control.fail === 'stall') return; // never answer; the gateway's timeout or the client gives up
  if (control.fail === 'reset') {
    req.socket.destroy();
    return;
  }
  if (control.fail === 'status-500') {
    json(res, 500, { error: { message: 'mock worker: failing on purpose', type: 'server_error', param: null, code: null } });
    return;
  }

  const model = typeof request.model === 'string' ? request.model : 'echo';
  if (endpoint === 'embeddings') {
    embeddings(res, request, model, control);
    return;
  }
  const maxTokens = endpoint === 'responses' ? request.max_output_tokens : request.max_tokens;
  const limit = typeof maxTokens === 'number' && maxTokens > 0 ? maxTokens : control.tokens;
  const tokenCount = Math.min(limit, control.tokens);
  const said = endpoint === 'chat' ? lastUserText(request.messages) : endpoint === 'completions' ? textOf(request.prompt) : inputText(request.input);
  const tokenAt = answerToken(said);
  const prompt = endpoint === 'chat' ? promptTokens(request.messages) : wordCount(said) + 3;
  const usage = { prompt_tokens: prompt, completion_tokens: tokenCount, total_tokens: 0 };
  usage.total_tokens = usage.prompt_tokens + usage.completion_tokens;
  const finishReason = limit < control.tokens ? 'length' : 'stop';
  if (endpoint === 'completions') {
    completion(res, request, model, control, tokenCount, tokenAt, usage, finishReason);
    return;
  }
  if (endpoint === 'responses') {
    response(res, request, model, control, tokenCount, tokenAt, usage);
    return;
  }
  const id = `chatcmpl-mock-${randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);

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

type Controls = ReturnType<typeof controlsOf>;
type Usage = { prompt_tokens: number; completion_tokens: number; total_tokens: number };

/** Answers after the latency and the tokens' time; a timer waits at least 1 ms, so a zero wait answers at once. */
function after(control: Controls, tokens: number, send: () => void): void {
  const delayMs = control.latencyMs + (tokens * 1000) / control.tokensPerSecond;
  if (delayMs < 1) send();
  else setTimeout(send, delayMs);
}

/** A stream of `events` (SSE lines, each a complete event), one a token's time after the other. */
function streamEvents(res: http.ServerResponse, control: Controls, events: string[]): void {
  res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' });
  res.flushHeaders();
  let timer: NodeJS.Timeout;
  const send = () => {
    if (res.destroyed) return;
    res.write(events.shift()!);
    if (control.fail === 'die-mid-stream') {
      res.socket?.destroy();
      return;
    }
    if (events.length === 0) res.end();
    else timer = setTimeout(send, 1000 / control.tokensPerSecond);
  };
  timer = setTimeout(send, control.latencyMs);
  res.on('close', () => clearTimeout(timer));
}

function completion(res: http.ServerResponse, request: MockRequest, model: string, control: Controls, tokens: number, tokenAt: (i: number) => string, usage: Usage, finishReason: string): void {
  const id = `cmpl-mock-${randomUUID()}`;
  const created = Math.floor(Date.now() / 1000);
  const text = Array.from({ length: tokens }, (_, i) => tokenAt(i)).join('');
  if (request.stream !== true) {
    after(control, tokens, () => json(res, 200, { id, object: 'text_completion', created, model, choices: [{ index: 0, text, logprobs: null, finish_reason: finishReason }], usage }));
    return;
  }
  const chunk = (piece: string, finish: string | null, extra: object = {}) => `data: ${JSON.stringify({ id, object: 'text_completion', created, model, choices: [{ index: 0, text: piece, logprobs: null, finish_reason: finish }], ...extra })}\n\n`;
  const events = Array.from({ length: tokens }, (_, i) => chunk(tokenAt(i), null));
  events.push(chunk('', finishReason));
  if (request.stream_options?.include_usage === true) events.push(`data: ${JSON.stringify({ id, object: 'text_completion', created, model, choices: [], usage })}\n\n`);
  events.push('data: [DONE]\n\n');
  streamEvents(res, control, events);
}

function response(res: http.ServerResponse, request: MockRequest, model: string, control: Controls, tokens: number, tokenAt: (i: number) => string, chat: Usage): void {
  const id = `resp_mock_${randomUUID().replace(/-/g, '')}`;
  const itemId = `msg_mock_${randomUUID().replace(/-/g, '')}`;
  const created_at = Math.floor(Date.now() / 1000);
  const text = Array.from({ length: tokens }, (_, i) => tokenAt(i)).join('');
  const usage = { input_tokens: chat.prompt_tokens, input_tokens_details: { cached_tokens: 0 }, output_tokens: chat.completion_tokens, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: chat.total_tokens };
  const message = (content: string, status: string) => ({ id: itemId, type: 'message', status, role: 'assistant', content: [{ type: 'output_text', text: content, annotations: [] }] });
  const object = (status: string, output: unknown[], withUsage: boolean) => ({ id, object: 'response', created_at, status, model, output, usage: withUsage ? usage : null });
  if (request.stream !== true) {
    after(control, tokens, () => json(res, 200, object('completed', [message(text, 'completed')], true)));
    return;
  }
  const event = (type: string, payload: object) => `event: ${type}\ndata: ${JSON.stringify({ type, ...payload })}\n\n`;
  const events = [event('response.created', { response: object('in_progress', [], false) })];
  for (let i = 0; i < tokens; i++) events.push(event('response.output_text.delta', { item_id: itemId, output_index: 0, content_index: 0, delta: tokenAt(i) }));
  events.push(event('response.output_text.done', { item_id: itemId, output_index: 0, content_index: 0, text }));
  events.push(event('response.completed', { response: object('completed', [message(text, 'completed')], true) }));
  streamEvents(res, control, events);
}

function embeddings(res: http.ServerResponse, request: MockRequest, model: string, control: Controls): void {
  const inputs = Array.isArray(request.input) ? request.input : [request.input];
  // The openai SDKs ask for base64 (little-endian float32s) and decode it themselves.
  const encode = (vector: number[]) => (request.encoding_format === 'base64' ? Buffer.from(new Float32Array(vector).buffer).toString('base64') : vector);
  const data = inputs.map((input, index) => ({ object: 'embedding', index, embedding: encode(vectorOf(typeof input === 'string' ? input : JSON.stringify(input))) }));
  const prompt = inputs.reduce((total: number, input) => total + (typeof input === 'string' ? wordCount(input) : Array.isArray(input) ? input.length : 1), 0);
  after(control, 0, () => json(res, 200, { object: 'list', data, model, usage: { prompt_tokens: prompt, total_tokens: prompt } }));
}

/** Eight numbers derived from the text: the same text, the same vector. */
function vectorOf(text: string): number[] {
  const vector = Array.from({ length: 8 }, () => 0);
  for (let i = 0; i < text.length; i++) vector[i % 8]! += text.charCodeAt(i) / 1000;
  const norm = Math.hypot(...vector) || 1;
  return vector.map((value) => Math.round((value / norm) * 1e6) / 1e6);
}

function textOf(prompt: unknown): string {
  return typeof prompt === 'string' ? prompt : Array.isArray(prompt) && typeof prompt[0] === 'string' ? prompt[0] : '';
}

/** The text of a Responses API input: a string, or the last user message's text among its items. */
function inputText(input: unknown): string {
  if (typeof input === 'string') return input;
  if (!Array.isArray(input)) return '';
  for (let i = input.length - 1; i >= 0; i--) {
    const item = input[i] as { role?: unknown; content?: unknown };
    if (item?.role !== 'user') continue;
    if (typeof item.content === 'string') return item.content;
    if (Array.isArray(item.content)) return item.content.map((part: { text?: unknown }) => (typeof part?.text === 'string' ? part.text : '')).join(' ');
  }
  return '';
}

const wordCount = (text: string) => text.split(/\s+/).filter(Boolean).length;

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
    return i === 0 ? word : ` ${word}`;
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
