import type { TokenUsage } from '../../src/context';
import { JsonUsageMeter, SseUsageMeter, TopLevelUsageScanner, usageOf } from '../../src/upstream/usage-meter';

/** The usage a JSON meter reports for these bytes, fed in chunks of `size`. */
function jsonUsage(text: string | Buffer, size = Infinity): TokenUsage | undefined {
  const bytes = Buffer.isBuffer(text) ? text : Buffer.from(text);
  const seen: TokenUsage[] = [];
  const meter = new JsonUsageMeter((u) => seen.push(u), { promptTokens: 0, generates: false });
  const step = Math.min(size, bytes.length) || 1;
  for (let at = 0; at < bytes.length; at += step) meter.relay(bytes.subarray(at, at + step));
  meter.end();
  const usage = seen[0];
  return usage && (usage.promptTokens > 0 || usage.completionTokens > 0) ? usage : undefined; // the estimate here is 0
}

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

test('a JSON answer: the top-level usage object, nested details included, and nothing that only looks like one', () => {
  const answer = JSON.stringify({ choices: [{ message: { content: '"usage": {"prompt_tokens": 99}' } }], usage: { prompt_tokens: 12, completion_tokens: 4, prompt_tokens_details: { cached_tokens: 0 } } });
  expect(jsonUsage(answer)).toEqual({ promptTokens: 12, completionTokens: 4 });
  expect(jsonUsage('{"usage": {"prompt_tokens": 1,')).toBeUndefined();
  expect(jsonUsage('{"choices": []}')).toBeUndefined();
  expect(jsonUsage('[{"usage": {"prompt_tokens": 1, "completion_tokens": 1}}]')).toBeUndefined(); // not an object's member
  expect(jsonUsage('{"a": 1} {"usage": {"prompt_tokens": 1, "completion_tokens": 1}}')).toBeUndefined(); // after the object
  expect(jsonUsage('{"usage": null, "x": {"usage": {"prompt_tokens": 1, "completion_tokens": 1}}}')).toBeUndefined();
});

test('the forgery: metadata a client sent, echoed by the worker after the real usage, is not the usage', () => {
  const forged = { usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 } };
  const answers = [
    { id: 'c', object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: 'hi' } }], usage: { prompt_tokens: 12, completion_tokens: 4 }, metadata: forged },
    { id: 't', object: 'text_completion', choices: [{ text: 'hi' }], usage: { prompt_tokens: 12, completion_tokens: 4 }, metadata: forged, extra: [forged, [forged]] },
    { id: 'r', object: 'response', output: [], usage: { input_tokens: 12, output_tokens: 4 }, metadata: forged, user: 'usage' },
    { object: 'list', data: [{ embedding: [0.1, -2e-3] }], usage: { prompt_tokens: 12, total_tokens: 12 }, metadata: { '"usage"': forged, 'usage\\': forged } },
  ];
  for (const answer of answers) {
    const text = JSON.stringify(answer, null, answer.object === 'response' ? 2 : undefined);
    const real = answer.object === 'list' ? { promptTokens: 12, completionTokens: 0 } : { promptTokens: 12, completionTokens: 4 };
    for (const size of [1, 2, 3, 7, 64, text.length]) expect({ object: answer.object, size, usage: jsonUsage(text, size) }).toEqual({ object: answer.object, size, usage: real });
  }
});

test("look-alike member names and strings full of escapes and quotes do not shift the scan's depth", () => {
  const tricky = ['\\"', '\\\\', '}}}', '{{{', '\\"usage\\": {\\"prompt_tokens\\": 0}', '\\u0022', 'usage'];
  const answer = `{"usagE": {"prompt_tokens": 0, "completion_tokens": 0}, "usages": {"prompt_tokens": 0, "completion_tokens": 0}, "us": 1, ${tricky
    .map((text, i) => `"k${i}": "${text}"`)
    .join(', ')}, "\\u0075sage": {"prompt_tokens": 0, "completion_tokens": 0}, "usage" : {"prompt_tokens": 5, "completion_tokens": 6}, "n": [1, {"usage": {"prompt_tokens": 0, "completion_tokens": 0}}]}`;
  expect(JSON.parse(answer).usage).toEqual({ prompt_tokens: 5, completion_tokens: 6 }); // the fixture is valid JSON
  for (let size = 1; size <= 16; size++) expect({ size, usage: jsonUsage(answer, size) }).toEqual({ size, usage: { promptTokens: 5, completionTokens: 6 } });
});

test('a usage member too large to be one is not held', () => {
  const found: unknown[] = [];
  const scanner = new TopLevelUsageScanner((value) => found.push(value));
  scanner.write(Buffer.from(`{"usage": {"prompt_tokens": 1, "completion_tokens": 1, "pad": "${'x'.repeat(70_000)}"}}`));
  expect(found).toEqual([]);
  for (let i = 0; i < 80; i++) scanner.write(Buffer.from('x'.repeat(1000)));
  expect(found).toEqual([]);
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

test("a long JSON answer: the usage near its end is read whatever the chunk sizes", () => {
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
  const stream = `${content('Hel') + content('lo') + usageChunk}data: [DONE]\n\n`;
  const meter = new SseUsageMeter(false, (u) => seen.push(u));
  expect(meter.relay(Buffer.from(stream.slice(0, 7)))).toBe(''); // no event is complete yet
  const out = run(meter, [stream.slice(7, 90), stream.slice(90)]);
  expect(out).toBe(stream);
  expect(seen).toEqual([{ promptTokens: 7, completionTokens: 3 }]);
});

test('a stream: the usage chunk the gateway asked for is read and dropped', () => {
  const seen: TokenUsage[] = [];
  const out = run(new SseUsageMeter(true, (u) => seen.push(u)), [content('a'), usageChunk, 'data: [DONE]\n\n']);
  expect(out).toBe(`${content('a')}data: [DONE]\n\n`);
  expect(seen).toEqual([{ promptTokens: 7, completionTokens: 3 }]);
});

test('a stream: CRLF events, comments and an unfinished last event pass through', () => {
  const out = run(new SseUsageMeter(true, () => undefined), [': keep-alive\r\n\r\n', 'data: {"a":1}\r\n\r\n', 'data: {"b"']);
  expect(out).toBe(': keep-alive\r\n\r\ndata: {"a":1}\r\n\r\ndata: {"b"');
});

test('a stream that never ends an event is passed on, not held in memory without bound', () => {
  const huge = `data: ${'x'.repeat(1_100_000)}`;
  const meter = new SseUsageMeter(true, () => undefined);
  expect(meter.relay(Buffer.from(huge))).toHaveLength(huge.length);
  expect(meter.end()).toBe('');
});

test('a character split between two chunks arrives whole, in a stream and in a JSON answer', () => {
  const stream = `${content('héllo 👋 世界')}data: [DONE]\n\n`;
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
  expect(jsonUsage('{"usage": {"prompt_tokens": 1e999, "completion_tokens": 2}}')).toBeUndefined();
  // A broken worker's fractions and absurd counts are not usage either: they would make a cost no store holds.
  expect(usageOf({ prompt_tokens: 2.5, completion_tokens: 2 })).toBeUndefined();
  expect(usageOf({ prompt_tokens: 1e300, completion_tokens: 2 })).toBeUndefined();
  expect(usageOf({ prompt_tokens: 1, completion_tokens: 1e12 + 1 })).toBeUndefined();
  expect(usageOf({ prompt_tokens: 1e12, completion_tokens: 0 })).toEqual({ promptTokens: 1e12, completionTokens: 0 });
  // A cached count that is not one is left out; the usage stands.
  expect(usageOf({ prompt_tokens: 9, completion_tokens: 1, prompt_tokens_details: { cached_tokens: -3 } })).toEqual({ promptTokens: 9, completionTokens: 1 });
  expect(usageOf({ prompt_tokens: 9, completion_tokens: 1, prompt_tokens_details: { cached_tokens: 4 } })).toEqual({ promptTokens: 9, completionTokens: 1, cachedTokens: 4 });
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
  expect(run(new SseUsageMeter(false, throwing), [content('a'), usageChunk, 'data: [DONE]\n\n'])).toBe(`${content('a') + usageChunk}data: [DONE]\n\n`);
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
  expect(jsonUsage('{"object":"response","output":[{"content":[{"text":"usage"}]}],"usage":{"input_tokens":3,"input_tokens_details":{"cached_tokens":0},"output_tokens":5}}')).toEqual({ promptTokens: 3, completionTokens: 5 });
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

test('a stream: metadata echoed after the usage, in a chunk or in response.completed, is not the usage', () => {
  const forged = { usage: { prompt_tokens: 0, completion_tokens: 0, input_tokens: 0, output_tokens: 0 } };
  const charged: TokenUsage[] = [];
  run(new SseUsageMeter(true, (u) => charged.push(u)), [
    content('a'),
    event({ object: 'chat.completion.chunk', choices: [], usage: { prompt_tokens: 7, completion_tokens: 3 }, metadata: forged }),
    event({ object: 'chat.completion.chunk', choices: [], metadata: forged, echo: [forged] }),
    'data: [DONE]\n\n',
  ]);
  const completed = { type: 'response.completed', response: { status: 'completed', usage: { input_tokens: 2, output_tokens: 6 }, metadata: forged } };
  run(new SseUsageMeter(false, (u) => charged.push(u)), [`event: response.completed\ndata: ${JSON.stringify(completed)}\n\n`, `data: ${JSON.stringify({ type: 'response.done', metadata: forged })}\n\n`]);
  expect(charged).toEqual([
    { promptTokens: 7, completionTokens: 3 },
    { promptTokens: 2, completionTokens: 6 },
  ]);
});

test('a stream without usage is charged the estimate: the prompt estimate, one token an event', () => {
  const charged: TokenUsage[] = [];
  run(new SseUsageMeter(true, (u) => charged.push(u), { promptTokens: 40, generates: true }), [content('a') + content('b'), content('c'), 'data: [DONE]\n\n']);
  const cut = new SseUsageMeter(true, (u) => charged.push(u), { promptTokens: 40, generates: true });
  cut.relay(Buffer.from(content('a') + content('b')));
  cut.abort();
  cut.abort();
  const json = new JsonUsageMeter((u) => charged.push(u), { promptTokens: 40, generates: true });
  json.relay(Buffer.from(`{"choices": [], "x": "${'y'.repeat(73)}"}`)); // 100 bytes, no usage
  json.end();
  const embeddings = new JsonUsageMeter((u) => charged.push(u), { promptTokens: 40, generates: false });
  embeddings.relay(Buffer.from('{"data": [{"embedding": [0.5]}]}'));
  embeddings.abort();
  expect(charged).toEqual([
    { promptTokens: 40, completionTokens: 4 },
    { promptTokens: 40, completionTokens: 2 },
    { promptTokens: 40, completionTokens: 25 },
    { promptTokens: 40, completionTokens: 0 },
  ]);
});

test('a stream whose client left: events are read for their usage and no longer given back', () => {
  const charged: TokenUsage[] = [];
  const meter = new SseUsageMeter(false, (u) => charged.push(u), { promptTokens: 40, generates: true });
  expect(meter.relay(Buffer.from(content('a')))).toBe(content('a'));
  meter.discard();
  expect(meter.relay(Buffer.from(`${content('b') + usageChunk}data: [DONE]\n\n`))).toBe('');
  meter.end();
  expect(charged).toEqual([{ promptTokens: 7, completionTokens: 3 }]);
});

test('the scan agrees with JSON.parse on random answers: nesting, escapes, numbers and look-alikes, cut anywhere', () => {
  let seed = 7;
  const random = () => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed / 2 ** 31;
  };
  const pick = <T>(list: T[]): T => list[Math.floor(random() * list.length)]!;
  const text = () => Array.from({ length: Math.floor(random() * 12) }, () => pick(['a', '"', '\\', '{', '}', '[', ']', ',', ':', 'usage', '"usage":', 'é', '\n', '\u2028'])).join('');
  const value = (depth: number): unknown => {
    const kind = depth > 4 ? pick(['number', 'string', 'null']) : pick(['number', 'string', 'null', 'array', 'object', 'usage']);
    if (kind === 'number') return pick([0, -1.5e-7, 123456789, 0.25]);
    if (kind === 'string') return text();
    if (kind === 'null') return null;
    if (kind === 'array') return Array.from({ length: Math.floor(random() * 5) }, () => value(depth + 1));
    if (kind === 'usage') return { usage: { prompt_tokens: 0, completion_tokens: 0 } };
    return Object.fromEntries(Array.from({ length: Math.floor(random() * 5) }, () => [pick(['usage', 'usage ', 'Usage', text()]), value(depth + 1)]));
  };
  for (let n = 0; n < 300; n++) {
    const answer: Record<string, unknown> = {};
    for (let m = Math.floor(random() * 6); m > 0; m--) answer[pick(['id', 'choices', 'data', 'metadata', text()])] = value(1);
    if (random() < 0.8) answer.usage = { prompt_tokens: n + 1, completion_tokens: n % 7, prompt_tokens_details: { cached_tokens: 0 } };
    for (let m = Math.floor(random() * 3); m > 0; m--) answer[pick(['metadata', 'echo', text()])] = value(1);
    const json = JSON.stringify(answer, null, random() < 0.3 ? 1 : undefined);
    const expected = usageOf(JSON.parse(json).usage);
    const size = 1 + Math.floor(random() * 40);
    expect({ json, usage: jsonUsage(json, size) }).toEqual({ json, usage: expected });
  }
});
