/**
 * Prices through a real gateway: each answer's cost by the config's price table lands in the daily
 * usage rows (admin API, console CSV) in the table's currency, from the usage the worker reported
 * (streamed or not); a model without a price costs 0. Config refuses a price table it cannot use.
 */
import https from 'node:https';
import { parseConfig } from '../../src/config';
import { gatewayWithWorker } from '../helpers/fixture';
import { bearer, chatBody, request } from '../helpers/http';
import { eventually } from '../helpers/time';

const TOKEN = 'admin-token-for-the-prices-test-0123';
const f = gatewayWithWorker({
  admin: { host: '127.0.0.1', port: 0, token: TOKEN },
  auth: { createFirstKey: false, lastUsedFlushMs: 100 },
  prices: { currency: 'EUR', models: { 'mock/echo': { inputPerMillion: 2, outputPerMillion: 8 } } },
});

type Usage = { prompt_tokens: number; completion_tokens: number };
type Row = { date: string; keyId: string; requests: number; refused: number; promptTokens: number; completionTokens: number; cost: number };
const admin = (path: string) => request(f.gw.adminUrl, { method: 'GET', path: `/admin/api${path}`, headers: { authorization: `Bearer ${TOKEN}` } });

test('each answer is charged by the price table: the day row holds the exact sum, in the currency; an unpriced model costs 0', async () => {
  const { key, id } = await f.gw.issueKey({ name: 'priced' });
  const usages: Usage[] = [];
  for (const tokens of ['5', '17', '40']) {
    const answer = await request(f.gw.url, { ca: f.gw.ca, headers: { ...bearer(key), 'x-mock-tokens': tokens }, body: chatBody() });
    expect(answer.status).toBe(200);
    usages.push(answer.json<{ usage: Usage }>().usage);
  }
  // Streamed: the usage chunk the gateway asked for (and hid) is charged the same way.
  const streamed = await request(f.gw.url, { ca: f.gw.ca, headers: { ...bearer(key), 'x-mock-tokens': '9' }, body: chatBody({ stream: true, stream_options: { include_usage: true } }) });
  expect(streamed.status).toBe(200);
  const last = streamed.body.split('\n').filter((line) => line.startsWith('data: {')).map((line) => JSON.parse(line.slice(6)) as { usage?: Usage }).find((chunk) => chunk.usage);
  usages.push(last!.usage!);
  // A model the table does not price: served, counted, cost 0.
  expect((await request(f.gw.url, { ca: f.gw.ca, headers: bearer(key), body: chatBody({ model: 'mock/unpriced' }) })).status).toBe(200);

  const expected = usages.reduce((sum, u) => sum + u.prompt_tokens * 2000 + u.completion_tokens * 8000, 0) / 1e9;
  const accountId = (await admin('/keys')).json<{ data: Array<{ id: string; accountId: string }> }>().data.find((k) => k.id === id)!.accountId;
  const listed = await eventually(async () => {
    const answer = (await admin(`/accounts/${accountId}/usage`)).json<{ currency: string; data: Row[] }>();
    return answer.data.find((row) => row.keyId === id && row.requests === 5) ? answer : undefined;
  }, 10_000);
  expect(listed.currency).toBe('EUR');
  const row = listed.data.find((r) => r.keyId === id)!;
  expect(expected).toBeGreaterThan(0);
  expect(row.cost).toBe(expected);
  expect(JSON.stringify(listed)).not.toContain('costNanos');
});

test('a client that hangs up while a worker has its request counts as served, not as a refusal of the gateway', async () => {
  const { key, id } = await f.gw.issueKey({ name: 'impatient' });
  await new Promise<void>((resolve) => {
    const req = https.request(`${f.gw.url}/v1/chat/completions`, { method: 'POST', ca: f.gw.ca, agent: false, headers: { ...bearer(key), 'content-type': 'application/json', 'x-mock-latency-ms': '1500' } });
    req.on('error', () => resolve());
    req.end(chatBody());
    setTimeout(() => {
      req.destroy();
      resolve();
    }, 300);
  });
  // And one the gateway refuses itself, for contrast.
  expect((await request(f.gw.url, { ca: f.gw.ca, headers: bearer(key), body: JSON.stringify({ model: 'mock/echo' }) })).status).toBe(400);
  const accountId = (await admin('/keys')).json<{ data: Array<{ id: string; accountId: string }> }>().data.find((k) => k.id === id)!.accountId;
  const row = await eventually(async () => {
    const found = (await admin(`/accounts/${accountId}/usage`)).json<{ data: Row[] }>().data.find((r) => r.keyId === id);
    return found && found.requests + found.refused === 2 ? found : undefined;
  }, 10_000);
  expect(row).toMatchObject({ requests: 1, refused: 1 });
});

test('a price table the gateway cannot use is refused at start, naming the field', () => {
  const refused = (prices: unknown) => () => parseConfig({ providers: { mock: { workers: ['http://127.0.0.1:9'] } }, prices });
  expect(refused({ currency: 'USD', models: { 'mock/*': { inputPerMillion: -1, outputPerMillion: 1 } } })).toThrow(/prices\.models\.mock\/\*\.inputPerMillion/);
  expect(refused({ currency: 'dollars', models: {} })).toThrow(/prices\.currency/);
  expect(refused({ currency: 'USD', models: { 'mock/*': { inputPerMillion: 1, outputPerMillion: 1, perRequest: 0.01 } } })).toThrow(/perRequest/);
  expect(refused({ currency: 'USD', models: { 'mock/*': { inputPerMillion: 1 } } })).toThrow(/outputPerMillion/);
});

describe('prices.unpricedModels: refuse', () => {
  const refusing = gatewayWithWorker({
    models: { aliases: { mixed: { targets: [{ model: 'mock/unpriced' }, { model: 'mock/echo' }] }, dark: 'mock/unpriced' } },
    prices: { currency: 'USD', unpricedModels: 'refuse', models: { 'mock/echo': { inputPerMillion: 1, outputPerMillion: 1 } } },
  });
  const send = (model: string) => request(refusing.gw.url, { ca: refusing.gw.ca, headers: bearer(refusing.key), body: chatBody({ model }) });

  test('a model no glob names is refused 403 model_not_priced (a look-alike name included); a priced one is served', async () => {
    expect((await send('mock/echo')).status).toBe(200);
    for (const model of ['mock/unpriced', 'mock/echo ', 'mock/ECHO', 'mock/echo/../x']) {
      const refused = await send(model);
      expect({ model, status: refused.status, error: refused.json().error }).toEqual({ model, status: 403, error: expect.objectContaining({ code: 'model_not_priced', type: 'permission_error', param: 'model' }) });
    }
    expect(await refusing.worker.requests()).toHaveLength(1); // none of them reached the worker
  });

  test('an alias uses only its priced targets; one with none is refused', async () => {
    for (let i = 0; i < 10; i++) expect((await send('mixed')).status).toBe(200);
    expect((await refusing.worker.requests()).map((r) => (JSON.parse(r.body) as { model: string }).model)).toEqual(Array.from({ length: 10 }, () => 'echo'));
    expect((await send('dark')).json().error.code).toBe('model_not_priced');
  });
});
