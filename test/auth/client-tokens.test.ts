/**
 * Client tokens (issue 52, item 4) on a real gateway over TLS, with a worker that records what it
 * is sent: a key mints one, the official openai client uses it, it is held to its parent's scope
 * narrowed by the mint, to its expiry to the millisecond, to its parent's revocation and rotation; the
 * attacker's side: a token minting, a tampered or re-signed token, a look-alike, fields a mint must not
 * take; and CORS only for the configured origins.
 */
import { createHmac } from 'node:crypto';
import http from 'node:http';
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { bearer, chatBody, openaiClient, request } from '../helpers/http';
import { listenOnLoopback } from '../helpers/net';
import { digestKey } from '../../src/auth/keys';
import { endUserDigest } from '../../src/accounts/end-users';
import { eventually, sleep } from '../helpers/time';

const ORIGIN = 'https://app.example.com';
const seen: Array<Record<string, unknown>> = [];
const worker = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    if (req.method === 'GET') return void res.end(req.url === '/v1/models' ? JSON.stringify({ object: 'list', data: [{ id: 'a', object: 'model' }, { id: 'b', object: 'model' }] }) : 'ok');
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
    seen.push({ ...body, authorization: req.headers.authorization, tracestate: req.headers.tracestate, agent: req.headers['user-agent'] });
    const usage = { prompt_tokens: 5, completion_tokens: 3, total_tokens: 8 };
    res.setHeader('content-type', 'application/json');
    if (req.url === '/v1/embeddings') return void res.end(JSON.stringify({ object: 'list', data: [{ object: 'embedding', index: 0, embedding: [0.1] }], model: body.model, usage: { prompt_tokens: 5, total_tokens: 5 } }));
    res.end(JSON.stringify({ id: 'c1', object: 'chat.completion', created: 1, model: body.model, choices: [{ index: 0, message: { role: 'assistant', content: 'hi' }, finish_reason: 'stop' }], usage }));
  });
});

let gw: TestGateway;
let workerUrl: string;
let parent: { key: string; id: string };

beforeAll(async () => {
  workerUrl = await listenOnLoopback(worker);
  gw = await startTestGateway({ providers: { mock: { workers: [workerUrl] } }, clientTokens: { allowedOrigins: [ORIGIN] }, auth: { lastUsedFlushMs: 200 } });
  parent = await gw.issueKey({ name: 'web-app', models: ['mock/*'] });
});
afterAll(async () => {
  await gw?.stop();
  worker.closeAllConnections();
  worker.close();
});

const mint = (key: string, body?: unknown) =>
  request(gw.url, { path: '/v1/client-tokens', ca: gw.ca, headers: { ...bearer(key), 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
const chat = (token: string, model = 'mock/a', extra: Record<string, unknown> = {}) => request(gw.url, { ca: gw.ca, headers: bearer(token), body: chatBody({ model, ...extra }) });
type Minted = { token: string; expiresAt: string };
type Refusal = { error: { code: string; param: string | null; type: string } };

test('a key mints a token (201, ten minutes by default) that the openai client uses as its key; its use counts to the key', async () => {
  const before = Date.now();
  const answer = await mint(parent.key, {});
  expect(answer.status).toBe(201);
  expect(answer.headers['cache-control']).toBe('no-store');
  const { token, expiresAt } = answer.json<Minted>();
  expect(token).toMatch(/^cgt_\d{8}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}$/);
  expect(Date.parse(expiresAt)).toBeGreaterThanOrEqual(before + 600_000);
  expect(Date.parse(expiresAt)).toBeLessThanOrEqual(Date.now() + 600_000);
  expect(token).not.toContain(parent.key.slice(4)); // the key is nowhere in it

  const client = openaiClient(gw.url, token, gw.ca);
  const completion = await client.chat.completions.create({ model: 'mock/a', messages: [{ role: 'user', content: 'hello' }] });
  expect(completion.choices[0]!.message.content).toBe('hi');
  expect(seen.at(-1)!.authorization).toBeUndefined(); // nothing of the token goes upstream
  expect((await client.models.list()).data.map((model) => model.id)).toEqual(['mock/a', 'mock/b']);
  // Counted to the parent key, as its own use is.
  const usage = async () => (await gw.store.get(parent.id))!.usage.requests;
  for (let waited = 0; (await usage()) < 1 && waited < 5000; waited += 100) await sleep(100);
  expect(await usage()).toBe(1);
});

test('narrowed by the mint: other models, other endpoints refused; maxTokens bounds what the worker is asked for', async () => {
  const { token } = (await mint(parent.key, { models: ['mock/a'], endpoints: ['chat'], maxTokens: 16, ttlSeconds: 60 })).json<Minted>();
  expect((await chat(token, 'mock/a', { max_tokens: 500 })).status).toBe(200);
  expect(seen.at(-1)!.max_tokens).toBe(16); // lowered, never raised
  expect((await chat(token, 'mock/a')).status).toBe(200);
  expect(seen.at(-1)!.max_tokens).toBe(16); // given when the request named none
  const other = await chat(token, 'mock/b');
  expect(other.status).toBe(403);
  expect(other.json<Refusal>().error.code).toBe('model_not_allowed');
  const embeddings = await request(gw.url, { path: '/v1/embeddings', ca: gw.ca, headers: bearer(token), body: JSON.stringify({ model: 'mock/a', input: 'x' }) });
  expect(embeddings.status).toBe(403);
  expect(embeddings.json<Refusal>().error.code).toBe('endpoint_not_allowed');
  const listed = await request(gw.url, { method: 'GET', path: '/v1/models', ca: gw.ca, headers: bearer(token) });
  expect(listed.json<{ data: Array<{ id: string }> }>().data.map((model) => model.id)).toEqual(['mock/a']);
  // The parent itself is not narrowed.
  expect((await chat(parent.key, 'mock/b')).status).toBe(200);
});

test('a mint that asks for more than its key has, or for what a mint does not take, is refused and makes nothing', async () => {
  const narrow = await gw.issueKey({ name: 'narrow', models: ['mock/a'], endpoints: ['chat'] });
  const refused = async (key: string, body: unknown) => {
    const answer = await mint(key, body);
    expect(answer.status).toBe(400);
    return answer.json<Refusal>().error.param;
  };
  expect(await refused(parent.key, { ttlSeconds: 3601 })).toBe('ttlSeconds');
  expect(await refused(parent.key, { ttlSeconds: 0 })).toBe('ttlSeconds');
  expect(await refused(parent.key, { ttlSeconds: '600' })).toBe('ttlSeconds');
  expect(await refused(parent.key, { ttlSeconds: 60, expiresAt: '2099-01-01T00:00:00Z' })).toBe('expiresAt');
  expect(await refused(parent.key, { parent: 'someone-else' })).toBe('parent');
  expect(await refused(narrow.key, { models: ['mock/b'] })).toBe('models');
  expect(await refused(narrow.key, { models: ['mock/*'] })).toBe('models'); // a glob wider than the key's
  expect(await refused(narrow.key, { endpoints: ['embeddings'] })).toBe('endpoints');
  expect(await refused(parent.key, { endpoints: ['chat', 'images'] })).toBe('endpoints');
  expect(await refused(parent.key, { models: [] })).toBe('models');
  expect(await refused(parent.key, { maxTokens: 0 })).toBe('maxTokens');
  expect((await mint(parent.key, ['ttlSeconds'])).status).toBe(400);
  const notJson = await request(gw.url, { path: '/v1/client-tokens', ca: gw.ca, headers: bearer(parent.key), body: '{"ttlSeconds": 6' });
  expect(notJson.json<Refusal>().error.code).toBe('invalid_json');
  // A key whose endpoints are narrow mints tokens no wider.
  const { token } = (await mint(narrow.key, {})).json<Minted>();
  expect((await request(gw.url, { path: '/v1/embeddings', ca: gw.ca, headers: bearer(token), body: JSON.stringify({ model: 'mock/a', input: 'x' }) })).status).toBe(403);
});

test('a token cannot mint tokens, nor be stretched, tampered with, re-signed or made up', async () => {
  const { token } = (await mint(parent.key, { ttlSeconds: 60, models: ['mock/a'] })).json<Minted>();
  const byToken = await mint(token, { ttlSeconds: 3600 });
  expect(byToken.status).toBe(403);
  expect(byToken.json<Refusal>().error.code).toBe('permission_denied');

  const [head, payload, tag] = token.split('.') as [string, string, string];
  const claims = JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')) as Record<string, unknown>;
  const widened = Buffer.from(JSON.stringify({ ...claims, m: undefined, x: Date.now() + 86_400_000 })).toString('base64url');
  const forgedTag = createHmac('sha256', 'a guessed secret').update(`${head}.${widened}`).digest('base64url');
  const tomorrow = new Date(Date.now() + 86_400_000).toISOString().slice(0, 10).replaceAll('-', '');
  const lastWeek = new Date(Date.now() - 7 * 86_400_000).toISOString().slice(0, 10).replaceAll('-', '');
  const forgeries = [
    `${head}.${widened}.${tag}`, // wider claims under the real tag
    `${head}.${widened}.${forgedTag}`, // signed with a made-up secret
    `${head}.${payload}.${tag.slice(0, -1)}${tag.endsWith('A') ? 'B' : 'A'}`, // one character off
    `cgt_${tomorrow}.${payload}.${tag}`,
    `cgt_${lastWeek}.${payload}.${tag}`,
    `${token}x`,
    `CGT_${token.slice(4)}`,
    `cgt_${'1'.repeat(8)}.${'A'.repeat(20)}.${'B'.repeat(43)}`,
  ];
  for (const forged of forgeries) {
    const answer = await chat(forged);
    expect({ forged, status: answer.status }).toEqual({ forged, status: 401 });
    expect(answer.json<Refusal>().error.code).toBe('invalid_api_key');
  }
  expect((await chat(token)).status).toBe(200); // the real one still works
});

test('it stops at its expiry to the millisecond, and at once when its key is revoked or its secret rotated', async () => {
  const minted = (await mint(parent.key, { ttlSeconds: 1 })).json<Minted>();
  expect((await chat(minted.token)).status).toBe(200);
  const expiry = Date.parse(minted.expiresAt);
  await sleep(Math.max(0, expiry - Date.now()));
  while (Date.now() < expiry) await new Promise((resolve) => setImmediate(resolve));
  const late = await chat(minted.token);
  expect(late.status).toBe(401);

  const doomed = await gw.issueKey({ name: 'doomed' });
  const { token } = (await mint(doomed.key, { ttlSeconds: 600 })).json<Minted>();
  expect((await chat(token)).status).toBe(200);
  await gw.revokeKey(doomed.id); // through the store: the gateway hears of it from its change feed
  await eventually(async () => ((await chat(token)).status === 401 ? true : undefined), 5000);

  const rotated = await gw.issueKey({ name: 'rotated' });
  const before = (await mint(rotated.key, {})).json<Minted>().token;
  expect((await chat(before)).status).toBe(200);
  expect(await gw.store.rotate(rotated.id, digestKey('cgk_another-secret'), 'cgk_anot')).toBeDefined();
  await eventually(async () => ((await chat(before)).status === 401 ? true : undefined), 5000); // the secret that minted it is gone
});

test('CORS: a configured origin may call the model endpoints (preflight and answer); no other origin, and never the mint', async () => {
  const preflight = (origin: string, path = '/v1/chat/completions') =>
    request(gw.url, { method: 'OPTIONS', path, ca: gw.ca, headers: { origin, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type, x-stainless-os' } });
  const allowed = await preflight(ORIGIN);
  expect(allowed.status).toBe(204);
  expect(allowed.headers).toMatchObject({ 'access-control-allow-origin': ORIGIN, 'access-control-allow-headers': 'authorization, content-type, x-stainless-os' });
  expect(allowed.headers['access-control-allow-credentials']).toBeUndefined();
  for (const origin of ['https://evil.example.com', 'https://app.example.com.evil.example', 'http://app.example.com', 'null']) {
    const refused = await preflight(origin);
    expect(refused.status).toBe(405);
    expect(refused.headers['access-control-allow-origin']).toBeUndefined();
  }
  expect((await preflight(ORIGIN, '/v1/client-tokens')).headers['access-control-allow-origin']).toBeUndefined();

  const { token } = (await mint(parent.key, {})).json<Minted>();
  const answer = await request(gw.url, { ca: gw.ca, headers: { ...bearer(token), origin: ORIGIN }, body: chatBody({ model: 'mock/a' }) });
  expect(answer.headers['access-control-allow-origin']).toBe(ORIGIN);
  const refusal = await request(gw.url, { ca: gw.ca, headers: { ...bearer(`${token}x`), origin: ORIGIN }, body: chatBody({ model: 'mock/a' }) });
  expect(refusal.status).toBe(401); // and the page can read why
  expect(refusal.headers['access-control-allow-origin']).toBe(ORIGIN);
  const elsewhere = await request(gw.url, { ca: gw.ca, headers: { ...bearer(token), origin: 'https://evil.example.com' }, body: chatBody({ model: 'mock/a' }) });
  expect(elsewhere.headers['access-control-allow-origin']).toBeUndefined();
});

const today = () => new Date().toISOString().slice(0, 10);
const sign = (secret: string, day: string, claims: Record<string, unknown>) => {
  const signed = `cgt_${day}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}`;
  return `${signed}.${createHmac('sha256', Buffer.from(secret, 'base64url')).update(signed).digest('base64url')}`;
};
const dayFrom = (offsetDays: number) => new Date(Date.now() + offsetDays * 86_400_000).toISOString().slice(0, 10).replaceAll('-', '');

test("a token follows its key's scope as it is at each request: endpoints the key lost since the mint are refused", async () => {
  const key = await gw.issueKey({ name: 'shrinking' });
  const asked = (await mint(key.key, { endpoints: ['chat', 'embeddings'] })).json<Minted>().token;
  const unasked = (await mint(key.key, {})).json<Minted>().token;
  for (const token of [asked, unasked]) expect((await chat(token)).status).toBe(200);
  await gw.store.update(key.id, { endpoints: ['embeddings'] });
  for (const token of [asked, unasked]) {
    await eventually(async () => ((await chat(token)).status === 403 ? true : undefined), 5000);
    expect((await chat(token)).json<Refusal>().error.code).toBe('endpoint_not_allowed');
  }
});

test('maxTokens bounds a request in all: shared by n answers, refused when they leave none; embeddings get no output bound', async () => {
  const { token } = (await mint(parent.key, { maxTokens: 10 })).json<Minted>();
  expect((await chat(token, 'mock/a', { n: 2, max_tokens: 500 })).status).toBe(200);
  expect(seen.at(-1)).toMatchObject({ n: 2, max_tokens: 5 });
  const many = await chat(token, 'mock/a', { n: 20 });
  expect(many.status).toBe(400);
  expect(many.json<Refusal>().error.code).toBe('invalid_body');
  expect((await request(gw.url, { path: '/v1/embeddings', ca: gw.ca, headers: bearer(token), body: JSON.stringify({ model: 'mock/a', input: 'x' }) })).status).toBe(200);
  expect(seen.at(-1)!.max_tokens).toBeUndefined();
});

test('the end user is the one the mint named: what browser code says of itself is not taken', async () => {
  const key = await gw.issueKey({ name: 'per-user' });
  const record = (await gw.store.get(key.id))!;
  const { token } = (await mint(key.key, { endUser: 'alice' })).json<Minted>();
  const answer = await request(gw.url, { ca: gw.ca, headers: { ...bearer(token), 'x-chatgate-end-user': 'mallory' }, body: chatBody({ model: 'mock/a', user: 'mallory', safety_identifier: 'mallory' }) });
  expect(answer.status).toBe(200);
  const users = async () => (await gw.store.usageBreakdown(record.accountId, today(), today(), { by: 'endUser', keyId: key.id, limit: 10 })).map((share) => share.group);
  await eventually(async () => ((await users()).length > 0 ? true : undefined), 5000);
  expect(await users()).toEqual([endUserDigest(record.accountId, 'alice')]);
});

test('only the last two days and the next are signing days, and only with the secret kept for that day', async () => {
  const { token } = (await mint(parent.key, {})).json<Minted>();
  const claims = JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString('utf8')) as Record<string, unknown>;
  const lasting = { ...claims, x: Date.now() + 3_600_000 };
  // Tomorrow's secret was made with today's first mint (ahead of midnight): a replica whose clock is past it may sign with it.
  const tomorrow = await gw.store.getServerSecret(`client-tokens:${dayFrom(1)}`);
  expect(tomorrow).toBeDefined();
  expect((await chat(sign(tomorrow!.secret, dayFrom(1), lasting))).status).toBe(200);
  // A week-old day's secret, were it still kept, signs nothing: such a token expired long ago.
  const old = await gw.store.putServerSecret({ id: `client-tokens:${dayFrom(-7)}`, secret: Buffer.alloc(32, 7).toString('base64url'), createdAt: new Date().toISOString() });
  expect((await chat(sign(old.secret, dayFrom(-7), lasting))).status).toBe(401);
});

test("what reaches the worker and the mint's errors holds no token or key", async () => {
  const { token } = (await mint(parent.key, {})).json<Minted>();
  const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01';
  expect((await request(gw.url, { ca: gw.ca, headers: { ...bearer(token), traceparent, tracestate: `vendor=${token}`, 'user-agent': `app ${token}` }, body: chatBody({ model: 'mock/a' }) })).status).toBe(200);
  expect(JSON.stringify(seen.at(-1))).not.toContain(token.slice(4, 40));
  const echoed = await mint(parent.key, { [parent.key]: 1 });
  expect(echoed.status).toBe(400);
  expect(echoed.body).not.toContain(parent.key.slice(4));
  const quoted = await request(gw.url, { path: '/v1/client-tokens', ca: gw.ca, headers: bearer(parent.key), body: `{"models": ["${parent.key}"` });
  expect(quoted.status).toBe(400);
  expect(quoted.body).not.toContain(parent.key.slice(4));
  const tooLong = await mint(parent.key, { models: Array.from({ length: 40 }, (_, i) => `mock/${'m'.repeat(100)}${i}`) });
  expect(tooLong.status).toBe(400);
  expect(tooLong.json<Refusal>().error.param).toBe('models');
});

test('clientTokens.enabled: false: no mint, and a token is refused like any made-up key', async () => {
  const off = await startTestGateway({ providers: { mock: { workers: [workerUrl] } }, clientTokens: { enabled: false } });
  const key = await off.issueKey({ name: 'off' });
  const tried = await request(off.url, { path: '/v1/client-tokens', ca: off.ca, headers: bearer(key.key), body: '{}' });
  expect(tried.status).toBe(404);
  const { token } = (await mint(parent.key, {})).json<Minted>();
  expect((await request(off.url, { ca: off.ca, headers: bearer(token), body: chatBody({ model: 'mock/a' }) })).status).toBe(401);
  await off.stop();
});

test("a token's expiry is never past its key's", async () => {
  const expiresAt = new Date(Date.now() + 120_000);
  const key = await gw.issueKey({ name: 'short-lived', expiresAt });
  const minted = (await mint(key.key, { ttlSeconds: 3600 })).json<Minted>();
  expect(Date.parse(minted.expiresAt)).toBe(expiresAt.getTime());
});
