/**
 * Console sessions through the real HTTPS listener, on the file store: the `__Host-` cookie, a second
 * cookie of that name planted beside the real one, signing out everywhere, a password change (one's
 * own, or by a one-time link) ending the other sessions, a removed member losing the account in every
 * session at once, and unknown fields refused in the bodies of the session routes.
 */
import { gatewayWithWorker } from '../helpers/fixture';
import { request, type RawResponse } from '../helpers/http';

const TOKEN = 'admin-token-for-the-console-sessions-test';
const PASSWORD = 'correct horse battery staple';
const f = gatewayWithWorker({ admin: { host: '127.0.0.1', port: 0, token: TOKEN } });
const COOKIE = /^__Host-chatgate_session=([A-Za-z0-9_-]{43}); Path=\/; Max-Age=\d+; HttpOnly; Secure; SameSite=Strict$/;

const admin = (method: string, path: string, body?: unknown) =>
  request(f.gw.adminUrl, { method, path: `/admin/api${path}`, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });

const call = (cookie: string | undefined, method: string, path: string, body?: unknown): Promise<RawResponse> => {
  const text = body === undefined ? undefined : JSON.stringify(body);
  return request(f.gw.url, {
    ca: f.gw.ca,
    method,
    path: `/console/api${path}`,
    // Content-Length given: Node sends a DELETE's body unframed otherwise.
    headers: { origin: `https://${new URL(f.gw.url).host}`, 'content-type': 'application/json', ...(cookie ? { cookie } : {}), ...(text ? { 'content-length': Buffer.byteLength(text) } : {}) },
    body: text,
  });
};

/** A session's Cookie header value (`name=token`). */
async function signIn(email: string, password = PASSWORD): Promise<string> {
  const response = await call(undefined, 'POST', '/session', { email, password });
  expect(response.status).toBe(200);
  const setCookie = response.headers['set-cookie'] ?? [];
  expect(setCookie).toHaveLength(1);
  expect(setCookie[0]).toMatch(COOKIE);
  return setCookie[0]!.split(';')[0]!;
}
const status = async (cookie: string, path = '/session') => (await call(cookie, 'GET', path)).status;

let team: string;
beforeAll(async () => {
  team = (await admin('POST', '/accounts', { name: 'sessions-team' })).json<{ id: string }>().id;
  for (const [email, role] of [
    ['owner@example.com', 'owner'],
    ['everywhere@example.com', 'member'],
    ['changer@example.com', 'member'],
    ['linked@example.com', 'member'],
    ['leaver@example.com', 'member'],
  ]) {
    expect((await admin('POST', `/accounts/${team}/members`, { email, role, password: PASSWORD })).status).toBe(201);
  }
});

test('the cookie is __Host-chatgate_session for the whole site, with no Domain; two of that name are no session', async () => {
  const cookie = await signIn('owner@example.com');
  expect(await status(cookie)).toBe(200);
  const token = cookie.split('=')[1]!;
  // A sibling host can set a cookie of the same name for the parent domain, sent beside the real one.
  for (const header of [`__Host-chatgate_session=${'p'.repeat(43)}; ${cookie}`, `${cookie}; __Host-chatgate_session=${'p'.repeat(43)}`, `${cookie}; ${cookie}`]) {
    const response = await call(header, 'GET', '/session');
    expect({ status: response.status, code: response.json().error.code }).toEqual({ status: 401, code: 'not_signed_in' });
  }
  // The old name is not read any more.
  expect(await status(`chatgate_session=${token}`)).toBe(401);
  expect(await status(`theme=dark; ${cookie}`)).toBe(200);
});

test('signing out everywhere ends every session of the person, this one too, clears the cookie, and is audited', async () => {
  const sessions = [await signIn('everywhere@example.com'), await signIn('everywhere@example.com'), await signIn('everywhere@example.com')];
  const someoneElse = await signIn('owner@example.com');
  const out = await call(sessions[1], 'DELETE', '/sessions');
  expect(out.status).toBe(204);
  expect(out.headers['set-cookie']).toEqual(['__Host-chatgate_session=; Path=/; Max-Age=0; HttpOnly; Secure; SameSite=Strict']);
  for (const cookie of sessions) expect(await status(cookie)).toBe(401);
  expect(await status(someoneElse)).toBe(200);
  const audit = (await admin('GET', `/accounts/${team}/audit`)).json<{ data: Array<{ action: string; actor: string; details: Record<string, unknown> }> }>().data;
  expect(audit.filter((e) => e.action === 'session.ended_everywhere')).toMatchObject([{ actor: 'everywhere@example.com', details: { sessions: 3 } }]);
  expect(JSON.stringify(audit)).not.toContain(sessions[0]!.split('=')[1]);
});

test("one's own password change needs the current password, and ends one's other sessions", async () => {
  const here = await signIn('changer@example.com');
  const elsewhere = await signIn('changer@example.com');
  const wrong = await call(here, 'PUT', '/password', { currentPassword: 'not my password at all', password: 'a brand new password' });
  expect(wrong.status).toBe(400);
  expect(wrong.json().error).toMatchObject({ code: 'invalid_body', param: 'currentPassword' });
  expect(wrong.body).not.toContain('not my password at all');
  expect(await status(elsewhere)).toBe(200);
  expect((await call(undefined, 'PUT', '/password', { currentPassword: PASSWORD, password: 'a brand new password' })).status).toBe(401);

  const changed = await call(here, 'PUT', '/password', { currentPassword: PASSWORD, password: 'a brand new password' });
  expect(changed.status).toBe(204);
  expect(await status(here)).toBe(200);
  expect(await status(elsewhere)).toBe(401);
  expect((await call(undefined, 'POST', '/session', { email: 'changer@example.com', password: PASSWORD })).status).toBe(401);
  await signIn('changer@example.com', 'a brand new password');
});

test('a password set by a one-time link ends every session of the person; the link works once', async () => {
  const sessions = [await signIn('linked@example.com'), await signIn('linked@example.com')];
  const link = await admin('POST', `/accounts/${team}/members/linked@example.com/password-link`);
  expect(link.status).toBe(201);
  const token = link.json<{ path: string }>().path.split('#set-password=')[1]!;
  const set = await call(undefined, 'POST', '/password', { token, password: 'the password from the link' });
  expect(set.status).toBe(200);
  for (const cookie of sessions) expect(await status(cookie)).toBe(401);
  expect((await call(undefined, 'POST', '/password', { token, password: 'the password from the link' })).json().error.code).toBe('invalid_link');
  await signIn('linked@example.com', 'the password from the link');
});

test('a removed member loses the account in every session at once', async () => {
  const owner = await signIn('owner@example.com');
  const first = await signIn('leaver@example.com');
  const second = await signIn('leaver@example.com');
  for (const cookie of [first, second]) expect(await status(cookie, '/keys')).toBe(200);
  expect((await call(owner, 'DELETE', '/members/leaver@example.com')).status).toBe(204);
  for (const cookie of [first, second]) {
    const keys = await call(cookie, 'GET', '/keys');
    expect([403, 404]).toContain(keys.status);
    expect((await call(cookie, 'GET', '/session')).json<{ account: unknown; accounts: unknown[] }>()).toMatchObject({ account: null, accounts: [] });
  }
});

test('the session routes refuse unknown fields, naming the field', async () => {
  const owner = await signIn('owner@example.com');
  for (const [cookie, method, path, body, param] of [
    [undefined, 'POST', '/session', { email: 'owner@example.com', password: PASSWORD, remember: true }, 'remember'],
    [undefined, 'POST', '/password', { token: 'x', password: 'a long enough password', email: 'owner@example.com' }, 'email'],
    [owner, 'PUT', '/password', { currentPassword: PASSWORD, password: 'a long enough password', confirm: 'a long enough password' }, 'confirm'],
    [owner, 'DELETE', '/sessions', { all: true }, 'all'],
    [owner, 'DELETE', '/session', { everywhere: true }, 'everywhere'],
  ] as const) {
    const response = await call(cookie, method, path, body);
    expect({ path, method, status: response.status, code: response.json().error.code, param: response.json().error.param }).toEqual({ path, method, status: 400, code: 'invalid_body', param });
  }
  // Nothing happened: the session lives, the password is as it was.
  expect(await status(owner)).toBe(200);
  await signIn('owner@example.com');
});
