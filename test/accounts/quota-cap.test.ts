/**
 * quota.capMaxTokens: a request whose output bound does not fit what is left of its quota is served
 * with the bound lowered to fit (written into its worker's body, in the fields it sent), never past
 * the quota, and refused once not one token an answer is left. Through a real gateway and a mock
 * worker that generates as many tokens as it is allowed (x-mock-tokens: 100,000).
 */
import { estimatePromptTokens } from '../../src/common/estimate';
import { gatewayWithWorker } from '../helpers/fixture';
import { bearer, chatBody, request, type RawResponse } from '../helpers/http';

const QUOTA = 300;
const f = gatewayWithWorker({ quota: { capMaxTokens: true, syncMs: 200 } });

type Answer = { usage?: { total_tokens: number; completion_tokens: number }; error?: { code: string } };
const send = (key: string, extra: Record<string, unknown>, headers: Record<string, string> = {}): Promise<RawResponse> =>
  request(f.gw.url, { ca: f.gw.ca, headers: { ...bearer(key), 'x-mock-tokens': '100000', ...headers }, body: chatBody(extra) });
const workerBodies = async () => (await f.worker.requests()).map((recorded) => JSON.parse(recorded.body) as Record<string, unknown>);
const metered = async () => (await f.gw.issueKey({ name: 'capped', quota: { tokensPerDay: QUOTA, tokensPerMonth: null } })).key;

test('a bound past what is left is lowered to fit: served, its worker body carries the lowered bound, the quota is never passed', async () => {
  const key = await metered();
  const prompt = estimatePromptTokens(chatBody({ max_tokens: 100_000 }));
  const first = await send(key, { max_tokens: 100_000 });
  expect(first.status).toBe(200);
  const [body] = await workerBodies();
  expect(body!.max_tokens).toBe(QUOTA - prompt);
  expect(first.json<Answer>().usage!.completion_tokens).toBe(QUOTA - prompt);
  // Nothing is left: the next one is refused, whatever its bound.
  for (const bound of [100_000, 1]) {
    const refused = await send(key, { max_tokens: bound });
    expect({ status: refused.status, code: refused.json<Answer>().error?.code }).toEqual({ status: 429, code: 'insufficient_quota' });
  }
});

test('a bound that fits is left as the client sent it', async () => {
  const key = await metered();
  expect((await send(key, { max_tokens: 7 })).status).toBe(200);
  expect((await workerBodies())[0]).toMatchObject({ max_tokens: 7 });
});

test('max_completion_tokens alone is lowered in place (no max_tokens added); n shares what is left between its answers', async () => {
  const key = await metered();
  const prompt = estimatePromptTokens(chatBody({ max_completion_tokens: 100_000, n: 4 }));
  expect((await send(key, { max_completion_tokens: 100_000, n: 4 })).status).toBe(200);
  const [body] = await workerBodies();
  expect(body!.max_completion_tokens).toBe(Math.floor((QUOTA - prompt) / 4));
  expect(body).not.toHaveProperty('max_tokens');
});

test('two bounds that differ: each is lowered to what is left, none raised (the smaller one stays as it was)', async () => {
  const key = await metered();
  const prompt = estimatePromptTokens(chatBody({ max_completion_tokens: 10, max_tokens: 100_000 }));
  expect((await send(key, { max_completion_tokens: 10, max_tokens: 100_000 })).status).toBe(200);
  const [body] = await workerBodies();
  expect(body).toMatchObject({ max_completion_tokens: 10, max_tokens: QUOTA - prompt });
});

test('a burst of 30 concurrent requests asking for far more than the quota: the tokens served never pass it', async () => {
  const key = await metered();
  const burst = await Promise.all(Array.from({ length: 30 }, () => send(key, { max_tokens: 100_000 }, { 'x-mock-tokens-per-second': '400' })));
  expect(burst.every((answer) => answer.status === 200 || answer.status === 429)).toBe(true);
  const served = burst.filter((answer) => answer.status === 200).map((answer) => answer.json<Answer>().usage!.total_tokens);
  expect(served.length).toBeGreaterThan(0);
  expect(served.reduce((sum, tokens) => sum + tokens, 0)).toBeLessThanOrEqual(QUOTA);
  // Every worker body carried a bound that fitted beside the others in flight.
  const bounds = (await workerBodies()).map((body) => Number(body.max_tokens));
  expect(bounds.every((bound) => bound >= 1 && bound < 100_000)).toBe(true);
});
