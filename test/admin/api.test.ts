/** The admin API on the admin listener: token guard, key lifecycle, validation, and never a digest. */
import { gatewayWithWorker } from '../helpers/fixture';
import { startTestGateway } from '../helpers/gateway';
import { bearer, chatBody, request, type RawResponse } from '../helpers/http';
import { cuttableStore } from '../helpers/postgres';
import { eventually } from '../helpers/time';

const TOKEN = 'admin-token-for-tests-0123456789';
const f = gatewayWithWorker({ admin: { host: '127.0.0.1', port: 0, token: TOKEN }, auth: { createFirstKey: false, lastUsedFlushMs: 100 } });

const admin = (method: string, path: string, body?: unknown, token: string | null = TOKEN) =>
  request(f.gw.adminUrl, {
    method,
    path: `/admin/api${path}`,
    headers: { ...(token === null ? {} : { authorization: `Bearer ${token}` }), 'content-type': 'application/json' },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });

const chat = (key: string) => request(f.gw.url, { ca: f.gw.ca, headers: bearer(key), body: chatBody() });

function noSecrets(response: RawResponse) {
  expect(response.body).not.toMatch(/"digest"/);
}

test('a missing, wrong or Basic token gets 401; the right one gets in', async () => {
  for (const token of [null, 'wrong-token-wrong-token', TOKEN.slice(0, -1), '']) {
    const response = await admin('GET', '/keys', undefined, token);
    expect(response.status).toBe(401);
    expect(response.json().error.code).toBe('invalid_admin_token');
  }
  const basic = await request(f.gw.adminUrl, { method: 'GET', path: '/admin/api/keys', headers: { authorization: `Basic ${Buffer.from(`${TOKEN}:`).toString('base64')}` } });
  expect(basic.status).toBe(401);
  expect((await admin('GET', '/keys')).status).toBe(200);
});

test('the admin API is not on the public listener', async () => {
  const response = await request(f.gw.url, { ca: f.gw.ca, method: 'GET', path: '/admin/api/keys', headers: { authorization: `Bearer ${TOKEN}` } });
  expect(response.status).toBe(404);
});

test('create (the key once), get, list, patch, rotate, revoke: each takes effect on the public listener', async () => {
  const created = await admin('POST', '/keys', { name: 'ci bot', models: ['mock/*'], expiresAt: '2099-12-31T00:00:00Z' });
  expect(created.status).toBe(201);
  const record = created.json<{ id: string; key: string; name: string; models: string[]; expiresAt: string; prefix: string }>();
  expect(record).toMatchObject({ name: 'ci bot', models: ['mock/*'], expiresAt: '2099-12-31T00:00:00.000Z' });
  expect(record.key.startsWith(record.prefix)).toBe(true);
  noSecrets(created);
  expect((await chat(record.key)).status).toBe(200);

  const fetched = await admin('GET', `/keys/${record.id}`);
  expect(fetched.json<{ key?: string }>().key).toBeUndefined();
  expect(fetched.body).not.toContain(record.key);
  const listed = await admin('GET', '/keys');
  expect(listed.json<{ data: Array<{ id: string }> }>().data.map((k) => k.id)).toContain(record.id);
  expect(listed.body).not.toContain(record.key);
  noSecrets(listed);

  const patched = await admin('PATCH', `/keys/${record.id}`, { models: ['other/*'] });
  expect(patched.json<{ models: string[] }>().models).toEqual(['other/*']);
  expect((await chat(record.key)).status).toBe(403); // takes effect at once: the change left the cache

  const rotated = await admin('POST', `/keys/${record.id}/rotate`);
  const fresh = rotated.json<{ id: string; key: string; models: string[] }>();
  expect(fresh).toMatchObject({ id: record.id, models: ['other/*'] });
  await admin('PATCH', `/keys/${record.id}`, { models: [] });
  expect((await chat(record.key)).status).toBe(401);
  expect((await chat(fresh.key)).status).toBe(200);

  const revoked = await admin('POST', `/keys/${record.id}/revoke`);
  expect(revoked.json<{ revokedAt: string | null }>().revokedAt).not.toBeNull();
  expect((await chat(fresh.key)).status).toBe(401);
});

test('last use is recorded in batches and shown', async () => {
  const { key, id } = (await admin('POST', '/keys', { name: 'used' })).json<{ key: string; id: string }>();
  expect((await admin('GET', `/keys/${id}`)).json<{ lastUsedAt: string | null }>().lastUsedAt).toBeNull();
  await chat(key);
  const lastUsedAt = await eventually(async () => (await admin('GET', `/keys/${id}`)).json<{ lastUsedAt: string | null }>().lastUsedAt ?? undefined);
  expect(Date.parse(lastUsedAt)).toBeGreaterThan(Date.now() - 60_000);
});

test.each([
  ['a body that is not JSON', 'POST', '/keys', '{"name":', 400, 'invalid_json', null],
  ['no name', 'POST', '/keys', {}, 400, 'invalid_body', 'name'],
  ['models not a list', 'POST', '/keys', { name: 'x', models: 'mock/*' }, 400, 'invalid_body', 'models'],
  ['a date that is not one', 'POST', '/keys', { name: 'x', expiresAt: 'soon' }, 400, 'invalid_body', 'expiresAt'],
  // A newline or an escape in a name would forge rows in `chatgate keys list` and terminals.
  ['a name with a newline', 'POST', '/keys', { name: 'ok\nkey_forged\tcgk_AAAA…\tadmin\tactive' }, 400, 'invalid_body', 'name'],
  ['a name with an ANSI escape', 'POST', '/keys', { name: 'red\u001b[31m' }, 400, 'invalid_body', 'name'],
  ['a name with a direction override', 'POST', '/keys', { name: 'txt.\u202eexe' }, 400, 'invalid_body', 'name'],
  ['a limit past what the store can hold', 'POST', '/keys', { name: 'x', rateLimit: { requestsPerMinute: 99999999999 } }, 400, 'invalid_body', 'rateLimit.requestsPerMinute'],
  ['an unknown id', 'GET', '/keys/key_nope', undefined, 404, 'key_not_found', 'id'],
  ['revoking an unknown id', 'POST', '/keys/key_nope/revoke', undefined, 404, 'key_not_found', 'id'],
  ['an unknown route', 'GET', '/nothing', undefined, 404, 'not_found', null],
])('%s', async (_name, method, path, body, status, code, param) => {
  const response = await admin(method, path, body);
  expect({ status: response.status, code: response.json().error.code, param: response.json().error.param }).toEqual({ status, code, param });
});

test('with no admin token configured, the admin API and console are off, not open', async () => {
  const closed = await startTestGateway({ providers: { mock: { workers: ['http://127.0.0.1:9'] } }, upstream: { health: { enabled: false } } });
  try {
    for (const path of ['/admin/api/keys', '/admin/']) {
      const response = await request(closed.adminUrl, { method: 'GET', path });
      expect(response.status).toBe(404);
      expect(response.json().error.code).toBe('admin_api_disabled');
    }
  } finally {
    await closed.stop();
  }
});

test('the store unreachable: the admin API answers 503 key_store_unavailable, with a request id', async () => {
  const store = await cuttableStore();
  const gw = await startTestGateway({ admin: { host: '127.0.0.1', port: 0, token: TOKEN }, providers: { mock: { workers: [f.worker.url] } }, keyStore: store.keyStore });
  try {
    store.cut();
    const response = await fetch(`${gw.adminUrl}/admin/api/keys`, { headers: { authorization: `Bearer ${TOKEN}` } });
    const body = (await response.json()) as { error: { code: string } };
    expect(response.status).toBe(503);
    expect(body.error.code).toBe('key_store_unavailable');
    expect(response.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/);
    expect(response.headers.get('retry-after')).toBe('1');
  } finally {
    await gw.stop();
    await store.drop();
  }
});

test('adding a member again with the same role changes nothing and says nothing; a new role is one audit event', async () => {
  const account = (await admin('POST', '/accounts', { name: 'members-again' })).json<{ id: string }>().id;
  const first = await admin('POST', `/accounts/${account}/members`, { email: 'dev@example.com', role: 'member' });
  expect(first.status).toBe(201);
  const again = await admin('POST', `/accounts/${account}/members`, { email: 'dev@example.com', role: 'member' });
  expect(again.status).toBe(201);
  expect(again.json<{ addedAt: string }>().addedAt).toBe(first.json<{ addedAt: string }>().addedAt);
  expect((await admin('POST', `/accounts/${account}/members`, { email: 'dev@example.com', role: 'owner' })).json()).toMatchObject({ role: 'owner', addedAt: first.json<{ addedAt: string }>().addedAt });
  const audit = (await admin('GET', `/accounts/${account}/audit`)).json<{ data: { action: string; target: string; details?: unknown }[] }>().data;
  const events = audit.filter((event) => event.target === 'dev@example.com' && event.action.startsWith('member.'));
  expect(events.map((event) => [event.action, event.details]).sort()).toEqual([
    ['member.added', { role: 'member' }],
    ['member.role_changed', { from: 'member', role: 'owner' }],
  ]);
});

test("making a person a platform admin keeps their password (and their sign-in)", async () => {
  const account = (await admin('POST', '/accounts', { name: 'admins-test' })).json<{ id: string }>().id;
  const password = 'a password long enough';
  expect((await admin('POST', `/accounts/${account}/members`, { email: 'ops@example.com', role: 'owner', password })).status).toBe(201);
  const patched = await admin('PATCH', '/people/ops@example.com', { admin: true });
  expect(patched.json()).toMatchObject({ email: 'ops@example.com', admin: true });
  const signIn = await request(f.gw.url, {
    ca: f.gw.ca,
    method: 'POST',
    path: '/console/api/session',
    headers: { origin: `https://${new URL(f.gw.url).host}`, 'content-type': 'application/json' },
    body: JSON.stringify({ email: 'ops@example.com', password }),
  });
  expect(signIn.status).toBe(200);
});

test('a key limited to some endpoints: 403 endpoint_not_allowed elsewhere; the field is shown, changed and checked', async () => {
  const created = await admin('POST', '/keys', { name: 'chat only', endpoints: ['chat'] });
  expect(created.status).toBe(201);
  const { key, id, endpoints } = created.json<{ key: string; id: string; endpoints: string[] }>();
  expect(endpoints).toEqual(['chat']);
  expect((await chat(key)).status).toBe(200);
  const embeddings = await request(f.gw.url, { ca: f.gw.ca, path: '/v1/embeddings', headers: bearer(key), body: JSON.stringify({ model: 'mock/echo', input: 'hello' }) });
  expect(embeddings.status).toBe(403);
  expect(embeddings.json().error).toMatchObject({ type: 'permission_error', code: 'endpoint_not_allowed' });
  expect(embeddings.json().error.message).toContain('/v1/embeddings');

  expect((await admin('PATCH', `/keys/${id}`, { endpoints: [] })).json<{ endpoints: string[] }>().endpoints).toEqual([]);
  expect((await request(f.gw.url, { ca: f.gw.ca, path: '/v1/embeddings', headers: bearer(key), body: JSON.stringify({ model: 'mock/echo', input: 'hello' }) })).status).toBe(200);

  for (const bad of [['chat', 'images'], 'chat', [1]]) {
    const refused = await admin('PATCH', `/keys/${id}`, { endpoints: bad });
    expect(refused.status).toBe(400);
    expect(refused.json().error.param).toBe('endpoints');
  }
});

test('an account name is one account: creating or renaming to a taken name is 409 account_name_taken and changes nothing', async () => {
  const first = (await admin('POST', '/accounts', { name: 'named-once' })).json<{ id: string }>().id;
  const second = (await admin('POST', '/accounts', { name: 'named-twice' })).json<{ id: string }>().id;
  const again = await admin('POST', '/accounts', { name: 'named-once' });
  expect(again.status).toBe(409);
  expect(again.json<{ error: { code: string } }>().error.code).toBe('account_name_taken');
  const renamed = await admin('PATCH', `/accounts/${second}`, { name: 'named-once' });
  expect(renamed.status).toBe(409);
  expect(renamed.json<{ error: { code: string } }>().error.code).toBe('account_name_taken');
  const names = (await admin('GET', '/accounts')).json<{ data: { id: string; name: string }[] }>().data.filter((a) => a.id === first || a.id === second);
  expect(names.map((a) => a.name).sort()).toEqual(['named-once', 'named-twice']);
});

test('a taken name that reads like a store outage is still 409, never a 503 that says the store is down', async () => {
  for (const name of ['Connection terminated unexpectedly', 'Client was closed']) {
    expect((await admin('POST', '/accounts', { name })).status).toBe(201);
    const again = await admin('POST', '/accounts', { name });
    expect(again.status).toBe(409);
    expect(again.json<{ error: { code: string } }>().error.code).toBe('account_name_taken');
  }
  expect((await request(f.gw.adminUrl, { method: 'GET', path: '/readyz' })).status).toBe(200);
});

describe('unknown fields are refused, naming the field, and nothing changes', () => {
  let account: string;
  let keyId: string;
  beforeAll(async () => {
    account = (await admin('POST', '/accounts', { name: 'strict-bodies' })).json<{ id: string }>().id;
    keyId = (await admin('POST', '/keys', { name: 'strict', account })).json<{ id: string }>().id;
    expect((await admin('POST', `/accounts/${account}/members`, { email: 'strict@example.com', role: 'owner' })).status).toBe(201);
  });
  const keysNow = async () => (await admin('GET', '/keys')).json<{ data: { id: string; name: string; models: string[] }[] }>().data;

  test("a misspelt 'models' would have made a key allowed on every model: 400, no key", async () => {
    const before = (await keysNow()).length;
    const refused = await admin('POST', '/keys', { name: 'x', modles: ['a/*'] });
    expect(refused.status).toBe(400);
    expect(refused.json().error).toMatchObject({ code: 'invalid_body', param: 'modles', type: 'invalid_request_error' });
    expect(refused.json().error.message).toContain("'modles'");
    expect((await keysNow()).length).toBe(before);
  });

  test("'accountId' (not the field's name) would have landed the key in default: 400, no key", async () => {
    const before = (await keysNow()).length;
    const refused = await admin('POST', '/keys', { name: 'x', accountId: account });
    expect(refused.json().error).toMatchObject({ code: 'invalid_body', param: 'accountId' });
    expect((await keysNow()).length).toBe(before);
    // `account` is the account's id; a name, or anything not a string, is not one.
    expect((await admin('POST', '/keys', { name: 'x', account: 'strict-bodies' })).json().error).toMatchObject({ code: 'account_not_found', param: 'id' });
    expect((await admin('POST', '/keys', { name: 'x', account: { id: account } })).json().error).toMatchObject({ code: 'invalid_body', param: 'account' });
    const made = await admin('POST', '/keys', { name: 'in account', account });
    expect(made.json<{ accountId: string }>().accountId).toBe(account);
  });

  test.each([
    ['POST', '/keys', { name: 'x', __proto__x: 1 }, '__proto__x'],
    ['PATCH', '/keys/{key}', { models: ['mock/*'], modles: [] }, 'modles'],
    ['PATCH', '/keys/{key}', { account: 'acc_default' }, 'account'],
    ['POST', '/keys/{key}/rotate', { secret: 'mine' }, 'secret'],
    ['POST', '/keys/{key}/revoke', { at: '2000-01-01' }, 'at'],
    ['POST', '/accounts', { name: 'y', quotas: {} }, 'quotas'],
    ['PATCH', '/accounts/{account}', { name: 'renamed', owner: 'me' }, 'owner'],
    ['POST', '/accounts/{account}/members', { email: 'n@example.com', role: 'member', admin: true }, 'admin'],
    ['POST', '/accounts/{account}/members/strict@example.com/password-link', { email: 'attacker@example.com' }, 'email'],
    ['PATCH', '/people/strict@example.com', { admin: false, isAdmin: true }, 'isAdmin'],
    ['POST', '/keys', { name: 'x', rateLimit: { requestsPerMinute: 5, rpm: 1 } }, 'rateLimit.rpm'],
    ['PATCH', '/accounts/{account}', { quota: { tokensPerDay: 5, tokensPerWeek: 1 } }, 'quota.tokensPerWeek'],
  ])('%s %s with an unknown field', async (method, template, body, param) => {
    const path = template.replace('{key}', keyId).replace('{account}', account);
    const auditBefore = (await admin('GET', `/accounts/${account}/audit`)).json<{ data: unknown[] }>().data.length;
    const refused = await admin(method, path, body);
    expect({ status: refused.status, code: refused.json().error.code, param: refused.json().error.param }).toEqual({ status: 400, code: 'invalid_body', param });
    expect((await admin('GET', `/accounts/${account}/audit`)).json<{ data: unknown[] }>().data.length).toBe(auditBefore);
    expect((await admin('GET', `/keys/${keyId}`)).json()).toMatchObject({ name: 'strict', models: [], revokedAt: null });
  });

  test('a raw __proto__ member is a field like any other: refused, and no prototype is touched', async () => {
    const refused = await admin('POST', '/keys', '{"name":"x","__proto__":{"models":["evil/*"]}}');
    expect(refused.json().error).toMatchObject({ code: 'invalid_body', param: '__proto__' });
  });
});

test('PATCH /people/:email sets whether an IdP-bound person may use a password: audited, unknown fields refused', async () => {
  const account = (await admin('POST', '/accounts', { name: 'pwd-oidc' })).json<{ id: string }>().id;
  expect((await admin('POST', `/accounts/${account}/members`, { email: 'bound@example.com', role: 'member' })).status).toBe(201);
  const on = await admin('PATCH', '/people/bound@example.com', { passwordWithOidc: true });
  expect(on.json()).toMatchObject({ email: 'bound@example.com', admin: false, passwordWithOidc: true });
  expect((await admin('PATCH', '/people/bound@example.com', { passwordWithOidc: true })).status).toBe(200); // no change: no event
  expect((await admin('PATCH', '/people/bound@example.com', { passwordWithOidc: 'yes' })).json().error).toMatchObject({ code: 'invalid_body', param: 'passwordWithOidc' });
  expect((await admin('PATCH', '/people/bound@example.com', {})).json().error.code).toBe('invalid_body');
  const events = (await f.gw.store.listAudit(null, 1000)).filter((event) => event.target === 'bound@example.com' && event.action === 'password_with_oidc.changed');
  expect(events.map((event) => [event.actor, event.details])).toEqual([['admin-token', { from: false, to: true }]]);
  expect((await admin('PATCH', '/people/bound@example.com', { passwordWithOidc: false })).json()).toMatchObject({ passwordWithOidc: false });
});

describe('a member who leaves: the keys they made in the account stop working at once', () => {
  const PASSWORD = 'a leaver password, long enough';
  const origin = () => `https://${new URL(f.gw.url).host}`;
  async function keyMadeBy(email: string, name: string): Promise<{ id: string; key: string }> {
    const signIn = await request(f.gw.url, { ca: f.gw.ca, path: '/console/api/session', headers: { origin: origin(), 'content-type': 'application/json' }, body: JSON.stringify({ email, password: PASSWORD }) });
    expect(signIn.status).toBe(200);
    const cookie = String(signIn.headers['set-cookie']).split(';')[0]!;
    const made = await request(f.gw.url, { ca: f.gw.ca, path: '/console/api/keys', headers: { origin: origin(), cookie, 'content-type': 'application/json' }, body: JSON.stringify({ name }) });
    expect(made.status).toBe(201);
    return made.json<{ id: string; key: string }>();
  }
  let account: string;
  beforeAll(async () => {
    account = (await admin('POST', '/accounts', { name: 'leavers' })).json<{ id: string }>().id;
    for (const [email, role] of [['lead@example.com', 'owner'], ['second-owner@example.com', 'owner'], ['gone@example.com', 'member'], ['moved@example.com', 'member']]) {
      expect((await admin('POST', `/accounts/${account}/members`, { email, role, password: PASSWORD })).status).toBe(201);
    }
  });

  test('removed: each of their keys answers 401 right after, and each revocation is audited with the reason', async () => {
    const first = await keyMadeBy('gone@example.com', 'gone 1');
    const second = await keyMadeBy('gone@example.com', 'gone 2');
    const others = await keyMadeBy('lead@example.com', 'the lead keeps this');
    for (const made of [first, second, others]) expect((await chat(made.key)).status).toBe(200); // cached as good
    expect((await admin('DELETE', `/accounts/${account}/members/gone@example.com`)).status).toBe(204);
    for (const made of [first, second]) {
      const refused = await chat(made.key);
      expect({ status: refused.status, code: refused.json().error.code }).toEqual({ status: 401, code: 'invalid_api_key' });
    }
    expect((await chat(others.key)).status).toBe(200);
    const audit = (await admin('GET', `/accounts/${account}/audit`)).json<{ data: { action: string; target: string; actor: string; details: unknown }[] }>().data;
    expect(audit.filter((event) => event.action === 'key.revoked').map((event) => [event.target, event.actor, event.details]).sort()).toEqual(
      [first.id, second.id].sort().map((id) => [id, 'admin-token', { reason: 'member_removed', member: 'gone@example.com' }]),
    );
  });

  test('transferKeysTo an owner: the keys keep working, now theirs (audited); a non-owner or nobody is 400 and nothing changes', async () => {
    const made = await keyMadeBy('moved@example.com', 'moved');
    for (const heir of ['moved@example.com', 'nobody@example.com', 'not an email', 'gone@example.com']) {
      const refused = await admin('DELETE', `/accounts/${account}/members/moved@example.com?transferKeysTo=${encodeURIComponent(heir)}`);
      expect({ status: refused.status, param: refused.json().error.param }).toEqual({ status: 400, param: 'transferKeysTo' });
    }
    const twice = await admin('DELETE', `/accounts/${account}/members/moved@example.com?transferKeysTo=lead@example.com&transferKeysTo=second-owner@example.com`);
    expect({ status: twice.status, param: twice.json().error.param }).toEqual({ status: 400, param: 'transferKeysTo' });
    expect((await admin('GET', `/accounts/${account}/members`)).json<{ data: { email: string }[] }>().data.map((m) => m.email)).toContain('moved@example.com');
    expect((await chat(made.key)).status).toBe(200);

    // The admin token may hand them to any owner, not only itself.
    expect((await admin('DELETE', `/accounts/${account}/members/moved@example.com?transferKeysTo=Second-Owner@example.com`)).status).toBe(204);
    expect((await chat(made.key)).status).toBe(200);
    expect((await admin('GET', `/keys/${made.id}`)).json()).toMatchObject({ createdBy: 'second-owner@example.com', revokedAt: null });
    const audit = (await admin('GET', `/accounts/${account}/audit`)).json<{ data: { action: string; target: string; details: unknown }[] }>().data;
    expect(audit.filter((event) => event.target === made.id).map((event) => [event.action, event.details])).toEqual([
      ['key.transferred', { from: 'moved@example.com', to: 'second-owner@example.com' }],
      ['key.created', { name: 'moved' }],
    ]);
  });
});
