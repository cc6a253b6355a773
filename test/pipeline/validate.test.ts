import { GatewayError } from '../../src/errors';
import { ROLES, splitModel, validateChatRequest, validateModelRequest } from '../../src/pipeline/validate';

const user = { role: 'user', content: 'hi' };
const valid = (extra: Record<string, unknown> = {}) => ({ model: 'mock/echo', messages: [user], ...extra });

function rejection(body: unknown): { status: number; type: string; code: string; param: string | null } {
  const result = validateChatRequest(body);
  if (!(result instanceof GatewayError)) throw new Error(`expected a rejection, got ${JSON.stringify(result)}`);
  return { status: result.status, type: result.type, code: result.code, param: result.param };
}

describe('output bounds (what the quota stage reserves)', () => {
  test.each([
    ['chat', { max_tokens: 7 }, 7],
    ['chat', { max_completion_tokens: 9 }, 9],
    ['chat', { max_tokens: 3, max_completion_tokens: 40 }, 40],
    ['chat', { max_tokens: 40, max_completion_tokens: 3 }, 40],
    ['chat', { max_tokens: null }, undefined],
    ['chat', {}, undefined],
    ['completions', { max_tokens: 12 }, 12],
    ['responses', { max_output_tokens: 30, max_tokens: 1 }, 30],
    ['embeddings', { max_tokens: 99 }, 0],
  ] as const)('%s %j: %p', (endpoint, bounds, expected) => {
    const body = { model: 'p/m', messages: [user], prompt: 'x', input: 'x', ...bounds };
    expect(validateModelRequest(endpoint, body)).toMatchObject({ maxOutputTokens: expected });
  });

  test.each([-1, 0, 1.5, '10', 1e9, true, Number.MAX_SAFE_INTEGER])('max_tokens %p is refused, naming the field', (value) => {
    expect(rejection(valid({ max_tokens: value }))).toEqual({ status: 400, type: 'invalid_request_error', code: 'invalid_body', param: 'max_tokens' });
  });
});

describe('validateChatRequest accepts', () => {
  test('the minimal request', () => {
    expect(validateChatRequest(valid())).toStrictEqual({ endpoint: 'chat', model: 'mock/echo', provider: 'mock', modelName: 'echo', stream: false, streamOptions: undefined, maxOutputTokens: undefined, outputBounds: undefined, outputs: 1, endUser: undefined });
  });

  test('a model without a slash: a name for the route stage to find among the aliases', () => {
    expect(validateChatRequest(valid({ model: 'gpt-4o' }))).toStrictEqual({ endpoint: 'chat', model: 'gpt-4o', provider: undefined, modelName: undefined, stream: false, streamOptions: undefined, maxOutputTokens: undefined, outputBounds: undefined, outputs: 1, endUser: undefined });
  });

  test('a model of exactly 256 characters is taken', () => {
    expect(validateChatRequest(valid({ model: `mock/${'m'.repeat(251)}` }))).toMatchObject({ provider: 'mock', modelName: 'm'.repeat(251) });
  });

  test('a model name with more slashes: the provider is before the first', () => {
    expect(validateChatRequest(valid({ model: 'vllm/meta-llama/Llama-3.1-8B' }))).toMatchObject({
      model: 'vllm/meta-llama/Llama-3.1-8B',
      provider: 'vllm',
      modelName: 'meta-llama/Llama-3.1-8B',
    });
  });

  test.each([
    [true, true],
    [false, false],
    [undefined, false],
    [null, false],
  ])('stream %p as %p', (stream, expected) => {
    expect(validateChatRequest(valid({ stream }))).toMatchObject({ stream: expected });
  });

  test('stream_options, when an object, is handed on', () => {
    expect(validateChatRequest(valid({ stream: true, stream_options: { include_usage: true } }))).toMatchObject({
      stream: true,
      streamOptions: { include_usage: true },
    });
    expect(validateChatRequest(valid({ stream_options: null }))).toMatchObject({ streamOptions: undefined });
  });

  test.each(ROLES.map((role) => [role]))('role %s with string content', (role) => {
    expect(validateChatRequest(valid({ messages: [{ role, content: 'x' }] }))).toMatchObject({ provider: 'mock' });
  });

  test('the five roles are exactly the OpenAI ones', () => {
    expect([...ROLES].sort()).toEqual(['assistant', 'developer', 'system', 'tool', 'user']);
  });

  test('content parts: text, image, audio, and types the gateway does not know', () => {
    const content = [
      { type: 'text', text: 'look' },
      { type: 'text', text: '' },
      { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } },
      { type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } },
      { type: 'something_new' },
    ];
    expect(validateChatRequest(valid({ messages: [{ role: 'user', content }] }))).toMatchObject({ modelName: 'echo' });
  });

  test('a conversation with every role, and assistant turns that only call tools', () => {
    const messages = [
      { role: 'system', content: 'be brief' },
      { role: 'developer', content: [{ type: 'text', text: 'rules' }] },
      { role: 'user', content: [{ type: 'text', text: 'look' }] },
      { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: '{}' } }] },
      { role: 'tool', content: 'result', tool_call_id: 'c1' },
      { role: 'assistant', tool_calls: [] },
      { role: 'assistant', content: null, function_call: { name: 'f', arguments: '{}' } },
      { role: 'assistant', content: 'done' },
    ];
    expect(validateChatRequest({ model: 'p/m', messages, temperature: 0.2, tools: [], max_tokens: 5 })).toStrictEqual({
      endpoint: 'chat',
      model: 'p/m',
      provider: 'p',
      modelName: 'm',
      stream: false,
      streamOptions: undefined,
      maxOutputTokens: 5,
      outputBounds: { max_tokens: 5 },
      outputs: 1,
      endUser: undefined,
    });
  });

  test('the end user: safety_identifier over user; empty or null names none', () => {
    const endUser = (fields: Record<string, unknown>) => (validateChatRequest(valid(fields)) as { endUser?: string }).endUser;
    expect(endUser({ user: 'alice' })).toBe('alice');
    expect(endUser({ user: 'alice', safety_identifier: 'h-1' })).toBe('h-1');
    expect(endUser({ user: 'alice', safety_identifier: '' })).toBe('alice');
    expect(endUser({ user: null, safety_identifier: null })).toBeUndefined();
    expect(endUser({ user: 'x'.repeat(256) })).toHaveLength(256);
  });
});

describe('validateChatRequest rejects with 400 invalid_body, naming the field', () => {
  test.each([
    ['an array body', [1, 2], null],
    ['an empty array body', [], null],
    ['a null body', null, null],
    ['a string body', 'hello', null],
    ['a number body', 42, null],
    ['a boolean body', true, null],
    ['model missing', { messages: [user] }, 'model'],
    ['model null', valid({ model: null }), 'model'],
    ['model not a string', valid({ model: 7 }), 'model'],
    ['model an array', valid({ model: ['mock/echo'] }), 'model'],
    ['model empty', valid({ model: '' }), 'model'],
    ['model with a leading slash', valid({ model: '/echo' }), 'model'],
    ['model with a trailing slash', valid({ model: 'mock/' }), 'model'],
    ['model a lone slash', valid({ model: '/' }), 'model'],
    ['model longer than 256 characters', valid({ model: `mock/${'m'.repeat(252)}` }), 'model'],
    ['messages missing', { model: 'mock/echo' }, 'messages'],
    ['messages null', valid({ messages: null }), 'messages'],
    ['messages not an array', valid({ messages: { role: 'user' } }), 'messages'],
    ['messages a string', valid({ messages: 'hi' }), 'messages'],
    ['messages empty', valid({ messages: [] }), 'messages'],
    ['a message that is not an object', valid({ messages: [user, user, 'hi'] }), 'messages[2]'],
    ['a message that is null', valid({ messages: [null] }), 'messages[0]'],
    ['a message that is an array', valid({ messages: [user, [user]] }), 'messages[1]'],
    ['a bad role', valid({ messages: [user, { role: 'wizard', content: 'x' }] }), 'messages[1].role'],
    ['a role in capitals', valid({ messages: [{ role: 'USER', content: 'x' }] }), 'messages[0].role'],
    ['a missing role', valid({ messages: [{ content: 'x' }] }), 'messages[0].role'],
    ['a role that is not a string', valid({ messages: [{ role: 1, content: 'x' }] }), 'messages[0].role'],
    ['content missing', valid({ messages: [{ role: 'user' }] }), 'messages[0].content'],
    ['content null for a user', valid({ messages: [{ role: 'user', content: null }] }), 'messages[0].content'],
    ['content a number', valid({ messages: [{ role: 'user', content: 1 }] }), 'messages[0].content'],
    ['content an object', valid({ messages: [{ role: 'user', content: { type: 'text', text: 'x' } }] }), 'messages[0].content'],
    ['content an empty array', valid({ messages: [{ role: 'user', content: [] }] }), 'messages[0].content'],
    ['a content part without a type', valid({ messages: [{ role: 'user', content: [{ type: 'text', text: 'a' }, { text: 'b' }] }] }), 'messages[0].content[1].type'],
    ['a content part with a numeric type', valid({ messages: [{ role: 'user', content: [{ type: 1 }] }] }), 'messages[0].content[0].type'],
    ['a content part that is a string', valid({ messages: [{ role: 'user', content: ['hi'] }] }), 'messages[0].content[0].type'],
    ['a text part without text', valid({ messages: [{ role: 'user', content: [{ type: 'text' }] }] }), 'messages[0].content[0].text'],
    ['a text part with numeric text', valid({ messages: [{ role: 'user', content: [{ type: 'text', text: 5 }] }] }), 'messages[0].content[0].text'],
    ['a later message at fault', valid({ messages: [user, user, { role: 'tool', content: [{ type: 'text', text: null }] }] }), 'messages[2].content[0].text'],
    ['an assistant with null content and no tool calls', valid({ messages: [{ role: 'assistant', content: null }] }), 'messages[0].content'],
    ['stream not a boolean', valid({ stream: 'yes' }), 'stream'],
    ['stream a number', valid({ stream: 1 }), 'stream'],
    ['stream_options not an object', valid({ stream_options: true }), 'stream_options'],
  ])('%s', (_name, body, param) => {
    expect(rejection(body)).toEqual({ status: 400, type: 'invalid_request_error', code: 'invalid_body', param });
  });

  test('the first fault is the one named, in the order model, messages, stream', () => {
    expect(rejection({ model: 1, messages: 1, stream: 1 }).param).toBe('model');
    expect(rejection({ model: 'p/m', messages: 1, stream: 1 }).param).toBe('messages');
    expect(rejection({ model: 'p/m', messages: [{ role: 'x' }, 1], stream: 1 }).param).toBe('messages[0].role');
  });

  test('the message names the field and says what it must be', () => {
    const error = validateChatRequest(valid({ messages: [user, { role: 'wizard', content: 'x' }] })) as GatewayError;
    expect(error.message).toContain('messages[1].role');
    for (const role of ROLES) expect(error.message).toContain(role);
    expect((validateChatRequest(valid({ model: '/echo' })) as GatewayError).message).toContain('<provider>/<model_name>');
  });
});

describe('validateChatRequest never throws', () => {
  const huge = new Array(100_000).fill(user);
  let deep: unknown = [];
  for (let i = 0; i < 10_000; i++) deep = [deep];

  test.each([
    ['__proto__ as the only model-bearing key', JSON.parse('{"__proto__": {"model": "mock/echo"}, "messages": [{"role": "user", "content": "x"}]}'), 'model'],
    ['a role named constructor', JSON.parse('{"model": "mock/echo", "messages": [{"role": "constructor", "content": "x"}]}'), 'messages[0].role'],
    ['a role named __proto__', JSON.parse('{"model": "mock/echo", "messages": [{"role": "__proto__", "content": "x"}]}'), 'messages[0].role'],
    ['a role named toString', JSON.parse('{"model": "mock/echo", "messages": [{"role": "toString", "content": "x"}]}'), 'messages[0].role'],
    ['a message that is __proto__ only', JSON.parse('{"model": "mock/echo", "messages": [{"__proto__": {"role": "user", "content": "x"}}]}'), 'messages[0].role'],
    ['a huge array with a fault at its end', valid({ messages: [...huge, { role: 'nope' }] }), 'messages[100000].role'],
    ['a huge content array with a fault at its end', valid({ messages: [{ role: 'user', content: [...new Array(100_000).fill({ type: 'text', text: 'x' }), {}] }] }), 'messages[0].content[100000].type'],
    ['deeply nested arrays as messages', valid({ messages: deep }), 'messages[0]'],
    ['deeply nested arrays as the body', deep, null],
    ['a sparse array of messages', valid({ messages: new Array(3) }), 'messages[0]'],
    ['NaN', Number.NaN, null],
    ['undefined', undefined, null],
    ['a number as model', valid({ model: 1e308 }), 'model'],
  ])('%s', (_name, body, param) => {
    let result: unknown;
    expect(() => (result = validateChatRequest(body))).not.toThrow();
    expect(result).toBeInstanceOf(GatewayError);
    expect((result as GatewayError).param).toBe(param);
  });

  test('a huge valid request is accepted', () => {
    expect(validateChatRequest(valid({ messages: huge }))).toMatchObject({ provider: 'mock' });
  });

  test('a __proto__ member from JSON.parse neither counts as a field nor pollutes anything', () => {
    const body = JSON.parse('{"model": "mock/echo", "messages": [{"role": "user", "content": "x"}], "__proto__": {"stream": "yes"}}');
    expect(validateChatRequest(body)).toMatchObject({ stream: false });
    expect(({} as Record<string, unknown>).stream).toBeUndefined();
  });
});

describe('splitModel', () => {
  test('splits at the first slash only', () => {
    expect(splitModel('a/b/c')).toEqual({ model: 'a/b/c', provider: 'a', modelName: 'b/c' });
    expect(splitModel('a//b')).toEqual({ model: 'a//b', provider: 'a', modelName: '/b' });
  });

  test('a name without a slash is kept whole, for the aliases', () => {
    expect(splitModel('a')).toEqual({ model: 'a', provider: undefined, modelName: undefined });
  });

  test.each(['', '/a', 'a/', '/', 42, null, undefined, {}, ['a/b']])('refuses %p, naming model', (model) => {
    const result = splitModel(model);
    expect(result).toBeInstanceOf(GatewayError);
    expect(result).toMatchObject({ status: 400, code: 'invalid_body', param: 'model' });
  });
});

describe('validateModelRequest, per endpoint', () => {
  const accepted = (endpoint: Parameters<typeof validateModelRequest>[0], body: Record<string, unknown>) => {
    const result = validateModelRequest(endpoint, body);
    if (result instanceof GatewayError) throw new Error(`expected acceptance, got ${result.message}`);
    return result;
  };
  const refusedAt = (endpoint: Parameters<typeof validateModelRequest>[0], body: unknown) => {
    const result = validateModelRequest(endpoint, body);
    if (!(result instanceof GatewayError)) throw new Error(`expected a rejection, got ${JSON.stringify(result)}`);
    expect({ status: result.status, code: result.code }).toEqual({ status: 400, code: 'invalid_body' });
    return result.param;
  };

  test('completions need a prompt (a string, even empty, or a non-empty array); no messages', () => {
    expect(accepted('completions', { model: 'p/m', prompt: 'Say hi', stream: true })).toMatchObject({ endpoint: 'completions', stream: true });
    expect(accepted('completions', { model: 'p/m', prompt: '' }).endpoint).toBe('completions');
    expect(accepted('completions', { model: 'p/m', prompt: [1, 2, 3] }).endpoint).toBe('completions');
    expect(refusedAt('completions', { model: 'p/m' })).toBe('prompt');
    expect(refusedAt('completions', { model: 'p/m', prompt: [] })).toBe('prompt');
    expect(refusedAt('completions', { model: 'p/m', prompt: 7 })).toBe('prompt');
    expect(refusedAt('completions', { model: 'p/m', messages: [user] })).toBe('prompt');
  });

  test('embeddings need an input; they never stream', () => {
    expect(accepted('embeddings', { model: 'p/m', input: ['a', 'b'], stream: true })).toMatchObject({ endpoint: 'embeddings', stream: false });
    expect(refusedAt('embeddings', { model: 'p/m', input: '' })).toBe('input');
    expect(refusedAt('embeddings', { model: 'p/m', input: null })).toBe('input');
    expect(refusedAt('embeddings', { model: 'p/m', input: { text: 'a' } })).toBe('input');
  });

  test('responses need an input: a string or items; every other field passes', () => {
    expect(accepted('responses', { model: 'p/m', input: [{ role: 'user', content: 'hi' }], tools: [{ type: 'web_search' }], stream: true })).toMatchObject({ endpoint: 'responses', stream: true });
    expect(refusedAt('responses', { model: 'p/m', messages: [user] })).toBe('input');
    expect(refusedAt('responses', { model: 'p/m', input: 'x', stream: 'yes' })).toBe('stream');
  });

  test('model comes first on every endpoint', () => {
    for (const endpoint of ['chat', 'completions', 'embeddings', 'responses'] as const) expect(refusedAt(endpoint, { input: 1, prompt: 1, messages: 1 })).toBe('model');
  });
});

describe('outputs: how many answers a request asks for (each may reach the bound)', () => {
  test.each([
    ['chat', {}, 1],
    ['chat', { n: 4 }, 4],
    ['completions', { n: 2, best_of: 5 }, 5],
    ['completions', { prompt: ['a', 'b', 'c'], n: 2 }, 6],
    ['completions', { prompt: [1, 2, 3] }, 1],
    ['completions', { prompt: [[1, 2], [3]] }, 2],
    ['responses', { n: 9 }, 1],
    ['embeddings', { n: 9 }, 1],
  ] as const)('%s %j: %p', (endpoint, fields, expected) => {
    const body = { model: 'p/m', messages: [user], prompt: 'x', input: 'x', ...fields };
    expect(validateModelRequest(endpoint, body)).toMatchObject({ outputs: expected });
  });

  test.each([0, -1, 129, 1.5, '4'])('n %p is refused, naming it', (n) => {
    expect(rejection(valid({ n }))).toEqual({ status: 400, type: 'invalid_request_error', code: 'invalid_body', param: 'n' });
  });
});
