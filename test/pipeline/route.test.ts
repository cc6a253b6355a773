/**
 * The route stage's decisions, without sockets: the key's endpoints and allow-list, aliases (by name
 * and by target), weights, fallbacks filtered by what each provider serves, and the worker's body.
 */
import type { Request, Response } from 'express';
import type { Endpoint } from '../../src/common/endpoints';
import type { CallerKey, RequestContext, UpstreamTarget } from '../../src/context';
import { GatewayError } from '../../src/errors';
import { route } from '../../src/pipeline/route';
import { validateModelRequest } from '../../src/pipeline/validate';
import { buildAliases, pickByWeight } from '../../src/upstream/aliases';
import type { ProviderTable } from '../../src/upstream/providers';

const ALL: Endpoint[] = ['chat', 'completions', 'embeddings', 'responses'];
const providers = new Map(
  Object.entries({ vllm: ALL, embed: ['embeddings'], hosted: ALL, canary: ALL }).map(([name, endpoints]) => [name, { name, endpoints: new Set(endpoints) }]),
) as unknown as ProviderTable;
const aliases = buildAliases({
  models: {
    aliases: {
      fast: 'vllm/llama',
      split: { targets: [{ model: 'vllm/a', weight: 3 }, { model: 'canary/b', weight: 1 }], fallback: ['hosted/c', 'embed/e'] },
      'text-embedding-3-small': 'embed/bge',
    },
  },
});

const key = (models: string[] = [], endpoints: string[] = []): CallerKey => ({
  id: 'key_1',
  name: 'k',
  accountId: 'acc',
  models,
  endpoints,
  quota: { tokensPerDay: null, tokensPerMonth: null },
  budget: { perDay: null, perMonth: null },
  rateLimit: { requestsPerMinute: null, tokensPerMinute: null, maxConcurrent: null },
});

/** Runs the stage on a validated body; the target it chose, or the error it threw. */
function routed(endpoint: Endpoint, body: Record<string, unknown>, caller = key(), random = 0): UpstreamTarget | GatewayError {
  const modelRequest = validateModelRequest(endpoint, body);
  if (modelRequest instanceof GatewayError) throw modelRequest;
  const context: RequestContext = { arrivedAt: 0, requestId: 'r', provider: 'none', key: caller, body: JSON.stringify(body), modelRequest };
  const res = { locals: { chatgate: context } } as unknown as Response;
  try {
    route(providers, aliases, () => random)({} as Request, res, () => undefined);
  } catch (err) {
    return err as GatewayError;
  }
  return context.target!;
}

const chat = (model: string) => ({ model, messages: [{ role: 'user', content: 'hi' }] });
const sentModel = (target: UpstreamTarget | GatewayError) => JSON.parse((target as UpstreamTarget).body.toString()).model;

test('pickByWeight: each target over its share of [0, 1)', () => {
  const targets = [{ weight: 3, name: 'a' }, { weight: 1, name: 'b' }];
  expect(pickByWeight(targets, 0).name).toBe('a');
  expect(pickByWeight(targets, 0.7499).name).toBe('a');
  expect(pickByWeight(targets, 0.75).name).toBe('b');
  expect(pickByWeight(targets, 0.9999).name).toBe('b');
});

test('a provider model goes as it is named; an alias to its target, the worker getting the target model name', () => {
  expect(routed('chat', chat('vllm/x/y'))).toMatchObject({ provider: 'vllm', modelName: 'x/y', alias: undefined, fallback: undefined });
  const viaAlias = routed('chat', chat('fast'));
  expect(viaAlias).toMatchObject({ endpoint: 'chat', provider: 'vllm', modelName: 'llama', alias: 'fast' });
  expect(sentModel(viaAlias)).toBe('llama');
});

test('weights pick the target; the fallbacks the endpoint is served by follow in order', () => {
  const first = routed('chat', chat('split'), key(), 0.1) as UpstreamTarget;
  expect(first).toMatchObject({ provider: 'vllm', modelName: 'a' });
  expect(routed('chat', chat('split'), key(), 0.9)).toMatchObject({ provider: 'canary', modelName: 'b' });
  const second = first.fallback!();
  expect(second).toMatchObject({ provider: 'hosted', modelName: 'c', alias: 'split' });
  expect(sentModel(second)).toBe('c');
  expect(second.fallback).toBeUndefined(); // embed/e does not serve chat
});

test("the key's allow-list: an alias by name allows every target; by target only those it matches", () => {
  expect(routed('chat', chat('split'), key(['split']), 0.9)).toMatchObject({ provider: 'canary' });
  const byTarget = routed('chat', chat('split'), key(['hosted/*']), 0) as UpstreamTarget;
  expect(byTarget).toMatchObject({ provider: 'hosted', modelName: 'c' }); // no target allowed: the allowed fallback
  expect(byTarget.fallback).toBeUndefined();
  expect((routed('chat', chat('split'), key(['other/*'])) as GatewayError).code).toBe('model_not_allowed');
  expect((routed('chat', chat('vllm/llama'), key(['fast'])) as GatewayError).code).toBe('model_not_allowed');
});

test('endpoints: a key limited to some is refused the others first; a provider that does not serve one is 404', () => {
  expect((routed('embeddings', { model: 'vllm/x', input: 'a' }, key([], ['chat'])) as GatewayError).code).toBe('endpoint_not_allowed');
  expect((routed('embeddings', { model: 'nowhere/x', input: 'a' }, key(['vllm/*'], ['chat'])) as GatewayError).code).toBe('endpoint_not_allowed');
  const notServed = routed('chat', chat('embed/bge')) as GatewayError;
  expect({ status: notServed.status, code: notServed.code }).toEqual({ status: 404, code: 'model_not_found' });
  expect(notServed.message).toContain('/v1/chat/completions');
  expect((routed('chat', chat('text-embedding-3-small')) as GatewayError).code).toBe('model_not_found');
  expect(routed('embeddings', { model: 'text-embedding-3-small', input: 'a' })).toMatchObject({ provider: 'embed', modelName: 'bge' });
});

test('an unknown provider: 404 model_not_found (after the allow-list); a name that is neither <provider>/<model> nor an alias: 400', () => {
  const malformed = routed('chat', chat('gpt-5'), key(['vllm/*'])) as GatewayError;
  expect({ status: malformed.status, code: malformed.code, param: malformed.param }).toEqual({ status: 400, code: 'invalid_body', param: 'model' });
  expect((routed('chat', chat('nowhere/m')) as GatewayError).code).toBe('model_not_found');
  expect((routed('chat', chat('nowhere/m'), key(['vllm/*'])) as GatewayError).code).toBe('model_not_allowed');
});

test('a stream of chat or completions asks for the usage chunk; embeddings and responses are left as they are', () => {
  const stream = routed('completions', { model: 'vllm/m', prompt: 'p', stream: true }) as UpstreamTarget;
  expect(stream.dropUsageChunk).toBe(true);
  expect(JSON.parse(stream.body.toString()).stream_options).toEqual({ include_usage: true });
  const asked = routed('chat', { ...chat('vllm/m'), stream: true, stream_options: { include_usage: true } }) as UpstreamTarget;
  expect(asked.dropUsageChunk).toBe(false);
  const responses = routed('responses', { model: 'vllm/m', input: 'p', stream: true }) as UpstreamTarget;
  expect(responses.dropUsageChunk).toBe(false);
  expect(JSON.parse(responses.body.toString())).not.toHaveProperty('stream_options');
});
