/**
 * Members within the platform's limits: a key's own rate limits set in the console by someone who is
 * not a platform admin (an owner or a member) stay within the operator's defaults (config rateLimit):
 * more, or 0 (no limit), is 400 naming the limit, and no key is made or changed. A platform admin (in
 * the console, or the admin token) may set anything. The defaults are read as a reload leaves them.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { gatewayWithWorker } from '../helpers/fixture';
import { bearer, chatBody, request, type RawResponse } from '../helpers/http';

const TOKEN = 'admin-token-for-the-limits-test';
const PASSWORD = 'a password for the limits test';
// The operator's defaults: 5 requests and 1000 tokens a minute per key; concurrency unlimited.
const f = gatewayWithWorker({ admin: { host: '127.0.0.1', port: 0, token: TOKEN }, rateLimit: { requestsPerMinute: 5, tokensPerMinute: 1000 } });

const admin = (method: string, apiPath: string, body?: unknown) =>
  request(f.gw.adminUrl, { method, path: `/admin/api${apiPath}`, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });

type Call = (method: string, apiPath: string, body?: unknown) => Promise<RawResponse>;
async function signIn(email: string): Promise<Call> {
  const origin = `https://${new URL(f.gw.url).host}`;
  const signedIn = await request(f.gw.url, { ca: f.gw.ca, path: '/console/api/session', headers: { origin, 'content-type': 'application/json' }, body: JSON.stringify({ email, password: PASSWORD }) });
  expect(signedIn.status).toBe(200);
  const cookie = String(signedIn.headers['set-cookie']).split(';')[0]!;
  return (method, apiPath, body) =>
    request(f.gw.url, { ca: f.gw.ca, method, path: `/console/api${apiPath}`, headers: { origin, cookie, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
}

let account: string;
let owner: Call;
let member: Call;
let platformAdmin: Call;
beforeAll(async () => {
  account = (await admin('POST', '/accounts', { name: 'limited' })).json<{ id: string }>().id;
  for (const [email, role] of [['owner@limits.test', 'owner'], ['member@limits.test', 'member'], ['ops@limits.test', 'member']]) {
    expect((await admin('POST', `/accounts/${account}/members`, { email, role, password: PASSWORD })).status).toBe(201);
  }
  expect((await admin('PATCH', '/people/ops@limits.test', { admin: true })).status).toBe(200);
  [owner, member, platformAdmin] = await Promise.all([signIn('owner@limits.test'), signIn('member@limits.test'), signIn('ops@limits.test')]);
});

const keyCount = async () => (await admin('GET', `/keys?account=${account}`)).json<{ data: unknown[] }>().data.length;

test.each([
  ['more requests a minute than the platform allows', { requestsPerMinute: 1000 }, 'rateLimit.requestsPerMinute'],
  ['no request limit at all (0) where the platform has one', { requestsPerMinute: 0 }, 'rateLimit.requestsPerMinute'],
  ['one request more than the platform allows', { requestsPerMinute: 6 }, 'rateLimit.requestsPerMinute'],
  ['more tokens a minute', { requestsPerMinute: 5, tokensPerMinute: 1001 }, 'rateLimit.tokensPerMinute'],
  ['no token limit (0)', { tokensPerMinute: 0 }, 'rateLimit.tokensPerMinute'],
])('a member or an owner asking for %s: 400 naming the limit, no key made', async (_name, rateLimit, param) => {
  for (const person of [member, owner]) {
    const before = await keyCount();
    const refused = await person('POST', '/keys', { name: 'greedy', rateLimit });
    expect({ status: refused.status, code: refused.json().error.code, param: refused.json().error.param }).toEqual({ status: 400, code: 'invalid_body', param });
    expect(refused.json().error.message).toMatch(/platform/);
    expect(await keyCount()).toBe(before);
  }
});

test('within the limits: the default (null), a lower number, or any concurrency (the platform sets none)', async () => {
  for (const rateLimit of [{ requestsPerMinute: null, tokensPerMinute: null }, { requestsPerMinute: 5, tokensPerMinute: 1000 }, { requestsPerMinute: 1 }, { maxConcurrent: 0 }, { maxConcurrent: 500 }]) {
    const made = await member('POST', '/keys', { name: 'modest', rateLimit });
    expect({ rateLimit, status: made.status }).toEqual({ rateLimit, status: 201 });
  }
});

test("a member's key with a request limit of 1000 cannot be had by editing either; the key stays as it was", async () => {
  const made = (await member('POST', '/keys', { name: 'edited', rateLimit: { requestsPerMinute: 2 } })).json<{ id: string; key: string }>();
  for (const rateLimit of [{ requestsPerMinute: 1000 }, { requestsPerMinute: 0 }]) {
    const refused = await member('PATCH', `/keys/${made.id}`, { rateLimit });
    expect({ status: refused.status, param: refused.json().error.param }).toEqual({ status: 400, param: 'rateLimit.requestsPerMinute' });
  }
  expect((await admin('GET', `/keys/${made.id}`)).json()).toMatchObject({ rateLimit: { requestsPerMinute: 2 } });
  // ... and the limit it has holds on the request path: the third request in the minute is 429.
  const statuses = [];
  for (let i = 0; i < 3; i++) statuses.push((await request(f.gw.url, { ca: f.gw.ca, headers: bearer(made.key), body: chatBody() })).status);
  expect(statuses).toEqual([200, 200, 429]);
});

test('a platform admin (in the console, or the admin token) may set any limit, 0 included', async () => {
  const inConsole = await platformAdmin('POST', '/keys', { name: 'ops unlimited', rateLimit: { requestsPerMinute: 0, tokensPerMinute: 100000 } });
  expect(inConsole.status).toBe(201);
  expect(inConsole.json()).toMatchObject({ rateLimit: { requestsPerMinute: 0, tokensPerMinute: 100000 } });
  const byToken = await admin('POST', '/keys', { name: 'token unlimited', account, rateLimit: { requestsPerMinute: 1000 } });
  expect(byToken.status).toBe(201);
  // An owner may still edit other fields of that key without touching its limits.
  const id = byToken.json<{ id: string }>().id;
  expect((await owner('PATCH', `/keys/${id}`, { name: 'renamed by the owner' })).status).toBe(200);
  expect((await admin('GET', `/keys/${id}`)).json()).toMatchObject({ name: 'renamed by the owner', rateLimit: { requestsPerMinute: 1000 } });
});

test('the limits are the ones in force: after a reload that raises the default, more is allowed', async () => {
  const configFile = path.join(f.gw.dir, 'config.yaml');
  const kept = readFileSync(configFile, 'utf8');
  const document = YAML.parse(kept) as { rateLimit: Record<string, number> };
  try {
    expect((await member('POST', '/keys', { name: 'ten', rateLimit: { requestsPerMinute: 10 } })).status).toBe(400);
    writeFileSync(configFile, YAML.stringify({ ...document, rateLimit: { ...document.rateLimit, requestsPerMinute: 10 } }));
    expect(await f.gw.gateway.reload()).toBe(true);
    expect((await member('POST', '/keys', { name: 'ten', rateLimit: { requestsPerMinute: 10 } })).status).toBe(201);
    expect((await member('POST', '/keys', { name: 'eleven', rateLimit: { requestsPerMinute: 11 } })).status).toBe(400);
  } finally {
    writeFileSync(configFile, kept);
    await f.gw.gateway.reload();
  }
});
