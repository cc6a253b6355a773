import type { TokenUsage } from '../../src/context';
import { JsonUsageMeter, SseUsageMeter, usageInTail, usageOf } from '../../src/upstream/usage-meter';

/** What a client gets of a stream that arrives in these chunks. */
function run(meter: SseUsageMeter, chunks: string[]): string {
  return chunks.map((chunk) => meter.relay(Buffer.from(chunk))).join('') + meter.end();
}

const event = (payload: unknown) => `data: ${JSON.stringify(payload)}\n\n`;
const content = (text: string) => event({ object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: text } }] });
const usageChunk = event({ object: 'chat.completion.chunk', choices: [], usage: { prompt_tokens: 7, completion_tokens: 3, total_tokens: 10 } });

test('usageOf reads an OpenAI usage object and nothing else', () => {
  expect(usageOf({ prompt_tokens: 5, completion_tokens: 2 })).toEqual({ promptTokens: 5, completionTokens: 2 });
  for (const odd of [null, 3, {}, { prompt_tokens: '5', completion_tokens: 2 }, { prompt_tokens: -1, completion_tokens: 2 }]) expect(usageOf(odd)).toBeUndefined();
});

test('usageInTail finds the last usage object, nested details included', () => {
  const answer = JSON.stringify({ choices: [{ message: { content: '"usage": {"prompt_tokens": 99}' } }], usage: { prompt_tokens: 12, completion_tokens: 4, prompt_tokens_details: { cached_tokens: 0 } } });
  expect(usageInTail(Buffer.from(answer))).toEqual({ promptTokens: 12, completionTokens: 4 });
  expect(usageInTail(Buffer.from('{"usage": {"prompt_tokens": 1,'))).toBeUndefined();
  expect(usageInTail(Buffer.from('{"choices": []}'))).toBeUndefined();
});

test("a JSON answer's usage is read as its chunks pass, and reported once at the end", () => {
  const seen: TokenUsage[] = [];
  const body = JSON.stringify({ id: 'x', choices: [], usage: { prompt_tokens: 20, completion_tokens: 30 } });
  const meter = new JsonUsageMeter((u) => seen.push(u));
  for (const part of [body.slice(0, 10), body.slice(10, 25), body.slice(25)]) expect(meter.relay(Buffer.from(part)).toString()).toBe(part);
  expect(seen).toEqual([]);
  expect(meter.end()).toBe(''); // nothing held back: every byte went on as it came
  expect(seen).toEqual([{ promptTokens: 20, completionTokens: 30 }]);
});

test("a long JSON answer: only its last chunks are kept, and the usage at its end is read whatever the chunk sizes", () => {
  const body = JSON.stringify({ id: 'x', choices: [{ message: { content: 'é'.repeat(300_000) } }], usage: { prompt_tokens: 8, completion_tokens: 9 }, system_fingerprint: 'f'.repeat(12_000) });
  const bytes = Buffer.from(body);
  for (const size of [1, 100, 700, 4096, 16 * 1024 + 3, 65_536, bytes.length]) {
    const seen: TokenUsage[] = [];
    const meter = new JsonUsageMeter((u) => seen.push(u));
    for (let at = 0; at < bytes.length; at += size) meter.relay(bytes.subarray(at, at + size));
    meter.end();
    expect(seen).toEqual([{ promptTokens: 8, completionTokens: 9 }]);
  }
});

test('a stream: events split across chunks come out whole; the usage chunk is read and kept when the client asked', () => {
  const seen: TokenUsage[] = [];
  const stream = content('Hel') + content('lo') + usageChunk + 'data: [DONE]\n\n';
  const meter = new SseUsageMeter(false, (u) => seen.push(u));
  expect(meter.relay(Buffer.from(stream.slice(0, 7)))).toBe(''); // no event is complete yet
  const out = run(meter, [stream.slice(7, 90), stream.slice(90)]);
  expect(out).toBe(stream);
  expect(seen).toEqual([{ promptTokens: 7, completionTokens: 3 }]);
});

test('a stream: the usage chunk the gateway asked for is read and dropped', () => {
  const seen: TokenUsage[] = [];
  const out = run(new SseUsageMeter(true, (u) => seen.push(u)), [content('a'), usageChunk, 'data: [DONE]\n\n']);
  expect(out).toBe(content('a') + 'data: [DONE]\n\n');
  expect(seen).toEqual([{ promptTokens: 7, completionTokens: 3 }]);
});

test('a stream: CRLF events, comments and an unfinished last event pass through', () => {
  const out = run(new SseUsageMeter(true, () => undefined), [': keep-alive\r\n\r\n', 'data: {"a":1}\r\n\r\n', 'data: {"b"']);
  expect(out).toBe(': keep-alive\r\n\r\ndata: {"a":1}\r\n\r\ndata: {"b"');
});

test('a stream that never ends an event is passed on, not held in memory without bound', () => {
  const huge = 'data: ' + 'x'.repeat(1_100_000);
  const meter = new SseUsageMeter(true, () => undefined);
  expect(meter.relay(Buffer.from(huge))).toHaveLength(huge.length);
  expect(meter.end()).toBe('');
});

test('a character split between two chunks arrives whole, in a stream and in a JSON answer', () => {
  const stream = content('héllo 👋 世界') + 'data: [DONE]\n\n';
  const bytes = Buffer.from(stream);
  const cut = bytes.indexOf(Buffer.from('👋')) + 2; // inside the emoji's four bytes
  const meter = new SseUsageMeter(true, () => undefined);
  expect(meter.relay(bytes.subarray(0, cut)) + meter.relay(bytes.subarray(cut)) + meter.end()).toBe(stream);

  const seen: TokenUsage[] = [];
  const answer = Buffer.from(JSON.stringify({ choices: [{ message: { content: '世界' } }], usage: { prompt_tokens: 1, completion_tokens: 2 } }));
  const json = new JsonUsageMeter((u) => seen.push(u));
  const inside = answer.indexOf(Buffer.from('界')) + 1;
  json.relay(answer.subarray(0, inside));
  json.relay(answer.subarray(inside));
  json.end();
  expect(seen).toEqual([{ promptTokens: 1, completionTokens: 2 }]);
});

test('usage that is not a finite count is ignored', () => {
  expect(usageOf({ prompt_tokens: Infinity, completion_tokens: 2 })).toBeUndefined();
  expect(usageOf({ prompt_tokens: 1, completion_tokens: NaN })).toBeUndefined();
  expect(usageInTail(Buffer.from('{"usage": {"prompt_tokens": 1e999, "completion_tokens": 2}}'))).toBeUndefined();
});

test('continuous usage stats (a growing total in every chunk) are charged once, with the last total', () => {
  const seen: TokenUsage[] = [];
  const withUsage = (text: string, completion: number) =>
    event({ object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content: text } }], usage: { prompt_tokens: 7, completion_tokens: completion } });
  run(new SseUsageMeter(false, (u) => seen.push(u)), [withUsage('a', 1), withUsage('b', 2), withUsage('c', 3), 'data: [DONE]\n\n']);
  expect(seen).toEqual([{ promptTokens: 7, completionTokens: 3 }]);
});

test('a stream cut short is charged what it used so far, once', () => {
  const seen: TokenUsage[] = [];
  const meter = new SseUsageMeter(false, (u) => seen.push(u));
  meter.relay(Buffer.from(event({ choices: [{ index: 0, delta: { content: 'a' } }], usage: { prompt_tokens: 7, completion_tokens: 1 } })));
  expect(seen).toEqual([]);
  meter.abort();
  meter.abort();
  expect(seen).toEqual([{ promptTokens: 7, completionTokens: 1 }]);
});

test('a usage listener that throws does not break the answer', () => {
  const throwing = () => {
    throw new Error('metrics broke');
  };
  expect(run(new SseUsageMeter(false, throwing), [content('a'), usageChunk, 'data: [DONE]\n\n'])).toBe(content('a') + usageChunk + 'data: [DONE]\n\n');
  const json = new JsonUsageMeter(throwing);
  json.relay(Buffer.from(JSON.stringify({ choices: [], usage: { prompt_tokens: 1, completion_tokens: 1 } })));
  expect(() => json.end()).not.toThrow();
});

test("each endpoint's usage shape: embeddings have prompt tokens only, responses input and output tokens", () => {
  expect(usageOf({ prompt_tokens: 7, total_tokens: 7 })).toEqual({ promptTokens: 7, completionTokens: 0 });
  expect(usageOf({ input_tokens: 4, input_tokens_details: { cached_tokens: 0 }, output_tokens: 9, total_tokens: 13 })).toEqual({ promptTokens: 4, completionTokens: 9 });
  expect(usageOf({ input_tokens: 4 })).toBeUndefined();
  expect(usageOf({ total_tokens: 4 })).toBeUndefined();
  // A responses answer as JSON: the usage at its end, nested details and all.
  expect(usageInTail(Buffer.from('{"object":"response","output":[{"content":[{"text":"usage"}]}],"usage":{"input_tokens":3,"input_tokens_details":{"cached_tokens":0},"output_tokens":5}}'))).toEqual({ promptTokens: 3, completionTokens: 5 });
});

test('a responses stream: the usage of response.completed is charged, and the event is passed on', () => {
  const charged: unknown[] = [];
  const meter = new SseUsageMeter(false, (usage) => charged.push(usage));
  const created = 'event: response.created\ndata: {"type":"response.created","response":{"usage":null}}\n\n';
  const completed = 'event: response.completed\ndata: {"type":"response.completed","response":{"status":"completed","usage":{"input_tokens":2,"output_tokens":6}}}\n\n';
  expect(meter.relay(Buffer.from(created + completed))).toBe(created + completed);
  meter.end();
  expect(charged).toEqual([{ promptTokens: 2, completionTokens: 6 }]);
});
