/**
 * An account's end user quota through a real gateway: each end user of its keys may use so many
 * tokens (or so much money) a UTC day. One end user past it is refused 429 insufficient_quota,
 * naming the end user, while another end user, and requests that name none, are served; a burst of
 * one end user's requests serves no more than the quota; the quota is set, changed and cleared by the
 * admin API (audited), which refuses what it cannot take.
 */
import { gatewayWithWorker } from '../helpers/fixture';
import { bearer, chatBody, request } from '../helpers/http';

const TOKEN = 'admin-token-for-the-end-user-quota-test';
const f = gatewayWithWorker({
  admin: { host: '127.0.0.1', port: 0, token: TOKEN },
  auth: { createFirstKey: false, lastUsedFlushMs: 100 },
  quota: { syncMs: 100 },
  prices: { currency: 'EUR', models: { 'mock/*': { inputPerMillion: 1000, outputPerMillion: 1000 } } },
});

type Account = { id: string; endUserQuota: { tokensPerDay: number | null; budgetPerDay: number | null } | null };
const admin = async <T>(method: string, path: string, body?: unknown) => {
  const answer = await request(f.gw.adminUrl, { method, path: `/admin/api${path}`, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: answer.status, json: answer.json<T & { error?: { param: string } }>() };
};
type Answer = { status: number; tokens: number; message?: string };
const ask = async (key: string, endUser: string | undefined): Promise<Answer> => {
  const answer = await request(f.gw.url, { ca: f.gw.ca, headers: { ...bearer(key), 'x-mock-tokens': '30', ...(endUser ? { 'x-chatgate-end-user': endUser } : {}) }, body: chatBody({ max_tokens: 30 }) });
  const json = answer.json<{ usage?: { total_tokens: number }; error?: { message: string; code: string } }>();
  return { status: answer.status, tokens: json.usage?.total_tokens ?? 0, message: json.error?.message };
};

async function accountWithKey(name: string, endUserQuota: unknown) {
  const account = await admin<Account>('POST', '/accounts', { name, endUserQuota });
  expect(account.status).toBe(201);
  const key = await admin<{ key: string }>('POST', '/keys', { name: `${name} key`, account: account.json.id });
  return { account: account.json, key: key.json.key };
}

test('one end user past its day is refused, naming the end user; another end user and requests naming none are served', async () => {
  const { account, key } = await accountWithKey('per end user tokens', { tokensPerDay: 200 });
  expect(account.endUserQuota).toEqual({ tokensPerDay: 200, budgetPerDay: null });
  const served: number[] = [];
  let refusal: Answer | undefined;
  for (let i = 0; i < 20 && !refusal; i++) {
    const answer = await ask(key, 'alice');
    if (answer.status === 200) served.push(answer.tokens);
    else refusal = answer;
  }
  expect(refusal).toMatchObject({ status: 429, message: expect.stringMatching(/end user/) });
  const used = served.reduce((sum, tokens) => sum + tokens, 0);
  expect(used).toBeLessThanOrEqual(200);
  expect(used).toBeGreaterThan(200 * 0.6); // it was reached, not refused early
  expect((await ask(key, 'bob')).status).toBe(200);
  expect((await ask(key, undefined)).status).toBe(200);
  expect((await ask(key, 'alice')).status).toBe(429);
});

test("a burst of one end user's requests serves no more than its day's tokens", async () => {
  const { key } = await accountWithKey('per end user burst', { tokensPerDay: 300 });
  const answers = await Promise.all(Array.from({ length: 30 }, () => ask(key, 'carol')));
  const used = answers.reduce((sum, answer) => sum + answer.tokens, 0);
  expect(answers.filter((answer) => answer.status === 429).length).toBeGreaterThan(0);
  expect(used).toBeLessThanOrEqual(300);
  expect(used).toBeGreaterThan(0);
});

test("an end user's budget is refused at, never past, its day's amount", async () => {
  // 1000 per million tokens: a request of about 50 tokens costs about 0.05.
  const { key } = await accountWithKey('per end user budget', { budgetPerDay: 0.3 });
  let spent = 0;
  let status = 200;
  for (let i = 0; i < 20 && status === 200; i++) {
    const answer = await ask(key, 'dave');
    status = answer.status;
    if (status === 200) spent += answer.tokens * 0.001;
  }
  expect(status).toBe(429);
  expect(spent).toBeLessThanOrEqual(0.3 + 1e-9);
  expect(spent).toBeGreaterThan(0.3 * 0.5);
  expect((await ask(key, 'erin')).status).toBe(200);
});

test('the admin API sets, changes and clears it (audited), and refuses what it cannot take, changing nothing', async () => {
  const { account } = await accountWithKey('per end user admin', null);
  expect(account.endUserQuota).toBeNull();
  const patch = (body: unknown) => admin<Account>('PATCH', `/accounts/${account.id}`, body);
  expect((await patch({ endUserQuota: { tokensPerDay: 1000 } })).json.endUserQuota).toEqual({ tokensPerDay: 1000, budgetPerDay: null });
  expect((await patch({ endUserQuota: { budgetPerDay: 2.5 } })).json.endUserQuota).toEqual({ tokensPerDay: 1000, budgetPerDay: 2.5 });
  for (const [body, param] of [
    [{ endUserQuota: { tokensPerDay: -1 } }, 'endUserQuota.tokensPerDay'],
    [{ endUserQuota: { tokensPerDay: 1.5 } }, 'endUserQuota.tokensPerDay'],
    [{ endUserQuota: { budgetPerDay: '2' } }, 'endUserQuota.budgetPerDay'],
    [{ endUserQuota: { tokens: 5 } }, 'endUserQuota.tokens'],
    [{ endUserQuota: { tokensPerDay__proto__: 5 } }, 'endUserQuota.tokensPerDay__proto__'],
    [{ endUserQuota: [1000] }, 'endUserQuota'],
    [{ endUserQuota: 1000 }, 'endUserQuota'],
    [{ endUserQuotas: {} }, 'endUserQuotas'],
  ] as const) {
    const refused = await patch(body);
    expect([refused.status, refused.json.error?.param]).toEqual([400, param]);
  }
  expect((await admin<Account>('GET', `/accounts/${account.id}`)).json.endUserQuota).toEqual({ tokensPerDay: 1000, budgetPerDay: 2.5 });
  expect((await patch({ endUserQuota: { tokensPerDay: null, budgetPerDay: null } })).json.endUserQuota).toBeNull();
  expect((await patch({ endUserQuota: { tokensPerDay: 10 } })).json.endUserQuota).toEqual({ tokensPerDay: 10, budgetPerDay: null });
  expect((await patch({ endUserQuota: null })).json.endUserQuota).toBeNull();
  const audit = await admin<{ data: Array<{ action: string; details: { to: unknown } }> }>('GET', `/accounts/${account.id}/audit`);
  expect(audit.json.data.filter((event) => event.action === 'end_user_quota.changed').map((event) => event.details.to).reverse()).toEqual([
    { tokensPerDay: 1000, budgetPerDay: null },
    { tokensPerDay: 1000, budgetPerDay: 2.5 },
    null,
    { tokensPerDay: 10, budgetPerDay: null },
    null,
  ]);
});
