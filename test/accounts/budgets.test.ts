/**
 * Budgets in money: `budget: {perDay, perMonth}` on keys and accounts, in the price table's currency,
 * enforced with reservations as token quotas are. Through a real gateway and a mock worker that
 * generates as many tokens as it is allowed, at a price of 1 EUR a token: a burst never spends past
 * a budget, later requests still reach most of it, the refusal names the budget and when it resets;
 * an account's budget holds across its keys; a model without a price is refused under a budget and
 * served without one; the admin API refuses budgets it cannot hold, and audits changes.
 */
import { gatewayWithWorker } from '../helpers/fixture';
import { bearer, chatBody, request, type RawResponse } from '../helpers/http';
import { eventually } from '../helpers/time';

const TOKEN = 'admin-token-for-budgets-0123456789';
const DEFAULT_RESERVE = 40;
// One euro a token, in and out: what an answer costs is its total_tokens in euros.
const f = gatewayWithWorker({
  admin: { host: '127.0.0.1', port: 0, token: TOKEN },
  prices: { currency: 'EUR', models: { 'mock/echo*': { inputPerMillion: 1_000_000, outputPerMillion: 1_000_000 } } },
  quota: { syncMs: 200, defaultReserveTokens: DEFAULT_RESERVE },
  auth: { createFirstKey: false, lastUsedFlushMs: 200 },
  // An alias whose fallback has no price: a key allowed only the priced target never goes there.
  models: { aliases: { thrifty: { targets: [{ model: 'mock/echo', weight: 1 }], fallback: ['mock/free'] } } },
});

type Answer = { usage?: { total_tokens: number }; error?: { code: string; message: string; type: string } };
const admin = (method: string, path: string, body?: unknown) =>
  request(f.gw.adminUrl, { method, path: `/admin/api${path}`, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
const send = (key: string, extra: Record<string, unknown> = {}): Promise<RawResponse> =>
  request(f.gw.url, { ca: f.gw.ca, headers: { ...bearer(key), 'x-mock-tokens': '100000', 'x-mock-tokens-per-second': '400' }, body: chatBody(extra) });
const spent = (answers: RawResponse[]) => answers.filter((a) => a.status === 200).reduce((sum, a) => sum + a.json<Answer>().usage!.total_tokens, 0);
const newKey = async (body: Record<string, unknown>) => (await admin('POST', '/keys', { name: 'budgeted', ...body })).json<{ key: string; id: string; accountId: string }>();

test("a key's budget: a burst never spends past it, later requests reach most of it; the refusal names the budget and its reset", async () => {
  const BUDGET = 300;
  const { key, accountId } = await newKey({ budget: { perDay: BUDGET } });
  const burst = await Promise.all(Array.from({ length: 30 }, () => send(key, { max_tokens: 20 })));
  expect(burst.every((a) => a.status === 200 || a.status === 429)).toBe(true);
  expect(burst.filter((a) => a.status === 429).length).toBeGreaterThan(0);
  let total = spent(burst);
  expect(total).toBeLessThanOrEqual(BUDGET);
  // One at a time until refused: what was reserved and not spent comes back, and is spent.
  let refusal: RawResponse | undefined;
  for (let i = 0; i < 60 && !refusal; i++) {
    const answer = await send(key, { max_tokens: 5 });
    if (answer.status === 429) refusal = answer;
    else total += spent([answer]);
  }
  expect(total).toBeLessThanOrEqual(BUDGET);
  expect(total).toBeGreaterThanOrEqual(0.9 * BUDGET);
  expect(refusal!.json<Answer>().error).toMatchObject({ type: 'insufficient_quota', code: 'insufficient_quota', message: expect.stringMatching(/API key has spent its budget for this day \(UTC\)/) });
  expect(Number(refusal!.headers['retry-after'])).toBeGreaterThan(0);
  expect(Number(refusal!.headers['retry-after'])).toBeLessThanOrEqual(86_400);
  // What the usage rows say it cost: what the answers said they used, at a euro a token.
  const today = new Date().toISOString().slice(0, 10);
  await eventually(async () => {
    const rows = (await admin('GET', `/accounts/${accountId}/usage?from=${today}&to=${today}`)).json<{ data: Array<{ cost: number }> }>().data;
    return rows.reduce((sum, row) => sum + row.cost, 0) === total ? true : undefined;
  }, 5_000);
});

test("an account's budget holds across its keys, and is named in the refusal", async () => {
  const account = (await admin('POST', '/accounts', { name: 'budgeted team', budget: { perDay: 120, perMonth: null } })).json<{ id: string; budget: unknown }>();
  expect(account.budget).toEqual({ perDay: 120, perMonth: null });
  const keys = [(await newKey({ account: account.id })).key, (await newKey({ account: account.id })).key];
  const answers = await Promise.all(Array.from({ length: 20 }, (_, i) => send(keys[i % 2]!, { max_tokens: 10 })));
  expect(spent(answers)).toBeLessThanOrEqual(120);
  const refused = answers.find((a) => a.status === 429);
  expect(refused?.json<Answer>().error?.message).toMatch(/API key's account has spent its budget for this day/);
});

test('a model without a price: refused 403 model_not_priced under a budget, served (at no cost) without one', async () => {
  const { key } = await newKey({ budget: { perMonth: 1000 } });
  const unpriced = await send(key, { model: 'mock/free', max_tokens: 5 });
  expect(unpriced.status).toBe(403);
  expect(unpriced.json<Answer>().error).toMatchObject({ code: 'model_not_priced', message: expect.stringMatching(/has a budget/) });
  const { key: unbudgeted } = await newKey({});
  expect((await send(unbudgeted, { model: 'mock/free', max_tokens: 5 })).status).toBe(200);
});

test('an alias: reserved at the models routing kept for the key; an unpriced fallback it may not use does not refuse it', async () => {
  const { key: narrow } = await newKey({ models: ['mock/echo'], budget: { perDay: 1000 } });
  expect((await send(narrow, { model: 'thrifty', max_tokens: 5 })).status).toBe(200);
  // A key that may use the fallback could be answered by it, at no price: refused under its budget.
  const { key: wide } = await newKey({ budget: { perDay: 1000 } });
  const refused = await send(wide, { model: 'thrifty', max_tokens: 5 });
  expect({ status: refused.status, code: refused.json<Answer>().error?.code }).toEqual({ status: 403, code: 'model_not_priced' });
});

test('a request under a budget that sets no output bound gets quota.defaultReserveTokens as its bound, in its worker body', async () => {
  const { key } = await newKey({ budget: { perDay: 10_000 } });
  f.worker.clear();
  expect((await send(key)).status).toBe(200);
  const [recorded] = await f.worker.requests();
  expect(JSON.parse(recorded!.body)).toMatchObject({ max_tokens: DEFAULT_RESERVE });
});

test('the admin API: budgets it cannot hold are refused naming the field; null clears one; a change is audited', async () => {
  const { id, accountId } = await newKey({ budget: { perDay: 5 } });
  const refusals: Array<[unknown, string]> = [
    [{ perDay: -1 }, 'budget.perDay'],
    [{ perDay: 'ten' }, 'budget.perDay'],
    [{ perDay: 1e7 }, 'budget.perDay'],
    [{ perMonth: Number.MAX_VALUE }, 'budget.perMonth'],
    [{ perWeek: 3 }, 'budget.perWeek'],
    [[5], 'budget'],
    ['5', 'budget'],
  ];
  for (const [budget, param] of refusals) {
    const answer = await admin('PATCH', `/keys/${id}`, { budget });
    expect({ budget, status: answer.status, error: answer.json().error }).toEqual({ budget, status: 400, error: expect.objectContaining({ code: 'invalid_body', param }) });
  }
  const cleared = await admin('PATCH', `/keys/${id}`, { budget: { perDay: null, perMonth: 12.5 } });
  expect(cleared.json<{ budget: unknown }>().budget).toEqual({ perDay: null, perMonth: 12.5 });
  expect((await admin('GET', `/keys/${id}`)).json<{ budget: unknown }>().budget).toEqual({ perDay: null, perMonth: 12.5 });
  const audit = (await admin('GET', `/accounts/${accountId}/audit`)).json<{ data: Array<{ action: string; target: string; details: unknown }> }>().data;
  expect(audit.filter((e) => e.action === 'budget.changed' && e.target === id).map((e) => e.details)).toEqual([{ from: { perDay: 5, perMonth: null }, to: { perDay: null, perMonth: 12.5 } }]);
  expect((await admin('PATCH', `/accounts/${accountId}`, { budget: { perDay: 0.5, perMonth: 'lots' } })).json().error).toMatchObject({ code: 'invalid_body', param: 'budget.perMonth' });
});
