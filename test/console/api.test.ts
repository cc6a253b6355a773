/**
 * The console's API on the public HTTPS listener, on the file store: two accounts, their owners and
 * a member, every endpoint tried across accounts and roles (owner, member, another account's owner,
 * no session, an ended session, a foreign Origin) with the status each must give.
 */
import { gatewayWithWorker } from '../helpers/fixture';
import { bearer, chatBody, request, type RawResponse } from '../helpers/http';
import { eventually } from '../helpers/time';

const TOKEN = 'admin-token-for-the-console-api-test';
const PASSWORD = 'correct horse battery staple';
const f = gatewayWithWorker({ admin: { host: '127.0.0.1', port: 0, token: TOKEN }, auth: { createFirstKey: false, lastUsedFlushMs: 100 } });

const admin = (method: string, path: string, body?: unknown) =>
  request(f.gw.adminUrl, { method, path: `/admin/api${path}`, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });

/** A person's view of the console API: their cookie, the console's own Origin. */
interface Person {
  email: string;
  cookie: string;
  call(method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<RawResponse>;
}

const origin = () => `https://${new URL(f.gw.url).host}`;
const consoleCall = (cookie: string | undefined, method: string, path: string, body?: unknown, headers: Record<string, string> = {}) =>
  request(f.gw.url, {
    ca: f.gw.ca,
    method,
    path: `/console/api${path}`,
    headers: { origin: origin(), 'content-type': 'application/json', ...(cookie ? { cookie } : {}), ...headers },
    body: body === undefined ? undefined : JSON.stringify(body),
  });

async function signIn(email: string, password = PASSWORD): Promise<Person> {
  const response = await consoleCall(undefined, 'POST', '/session', { email, password });
  expect(response.status).toBe(200);
  const setCookie = String(response.headers['set-cookie']);
  expect(setCookie).toMatch(/^__Host-chatgate_session=[A-Za-z0-9_-]{43}; Path=\/; Max-Age=\d+; HttpOnly; Secure; SameSite=Strict$/);
  const cookie = setCookie.split(';')[0]!;
  return { email, cookie, call: (method, path, body, headers) => consoleCall(cookie, method, path, body, headers) };
}

let teamA: string;
let teamB: string;
let ownerA: Person;
let memberA: Person;
let ownerB: Person;

beforeAll(async () => {
  teamA = (await admin('POST', '/accounts', { name: 'team-a' })).json<{ id: string }>().id;
  teamB = (await admin('POST', '/accounts', { name: 'team-b' })).json<{ id: string }>().id;
  for (const [account, email, role] of [
    [teamA, 'owner-a@example.com', 'owner'],
    [teamA, 'member-a@example.com', 'member'],
    [teamB, 'owner-b@example.com', 'owner'],
  ] as const) {
    expect((await admin('POST', `/accounts/${account}/members`, { email, role, password: PASSWORD })).status).toBe(201);
  }
  ownerA = await signIn('owner-a@example.com');
  memberA = await signIn('member-a@example.com');
  ownerB = await signIn('owner-b@example.com');
});

test('a wrong password or an unknown email: 401 and no cookie; the session says who and where', async () => {
  for (const [email, password] of [
    ['owner-a@example.com', 'not the password at all'],
    ['nobody@example.com', PASSWORD],
  ]) {
    const refused = await consoleCall(undefined, 'POST', '/session', { email, password });
    expect(refused.status).toBe(401);
    expect(refused.json().error.code).toBe('invalid_credentials');
    expect(refused.headers['set-cookie']).toBeUndefined();
  }
  const me = (await ownerA.call('GET', '/session')).json<{ email: string; account: { id: string; role: string }; accounts: unknown[] }>();
  expect(me).toMatchObject({ email: 'owner-a@example.com', account: { id: teamA, name: 'team-a', role: 'owner' }, accounts: [{ id: teamA, name: 'team-a', role: 'owner' }] });
});

test('no cookie, or a made-up one: 401 not_signed_in on every endpoint that needs a session', async () => {
  for (const cookie of [undefined, `__Host-chatgate_session=${'x'.repeat(43)}`]) {
    for (const [method, path] of [
      ['GET', '/session'],
      ['GET', '/keys'],
      ['POST', '/keys'],
      ['GET', '/members'],
      ['GET', '/usage'],
      ['GET', '/audit'],
      ['DELETE', '/session'],
    ]) {
      const response = await consoleCall(cookie, method!, path!, method === 'POST' ? { name: 'x' } : undefined);
      expect({ method, path, status: response.status, code: response.json().error.code }).toEqual({ method, path, status: 401, code: 'not_signed_in' });
    }
  }
});

test('a foreign Origin (or none) on a change: 403 origin_not_allowed, and nothing changes', async () => {
  const before = (await ownerA.call('GET', '/keys')).json<{ data: unknown[] }>().data.length;
  for (const headers of [{ origin: 'https://evil.example' }, { origin: 'null' }, { origin: `http://${new URL(f.gw.url).host}` }]) {
    const response = await ownerA.call('POST', '/keys', { name: 'forged' }, headers);
    expect(response.status).toBe(403);
    expect(response.json().error.code).toBe('origin_not_allowed');
  }
  const signInFromElsewhere = await consoleCall(undefined, 'POST', '/session', { email: 'owner-a@example.com', password: PASSWORD }, { origin: 'https://evil.example' });
  expect(signInFromElsewhere.status).toBe(403);
  expect((await ownerA.call('GET', '/keys')).json<{ data: unknown[] }>().data).toHaveLength(before);
});

test('an owner creates a key (shown once), it works, and it is listed without the key or its digest', async () => {
  const created = await ownerA.call('POST', '/keys', { name: 'ci', models: ['mock/*'] });
  expect(created.status).toBe(201);
  const { id, key } = created.json<{ id: string; key: string; accountId: string; createdBy: string }>();
  expect(created.json()).toMatchObject({ accountId: teamA, createdBy: 'owner-a@example.com' });
  expect((await request(f.gw.url, { ca: f.gw.ca, headers: bearer(key), body: chatBody() })).status).toBe(200);
  const listed = await ownerA.call('GET', '/keys');
  expect(listed.body).not.toContain(key);
  expect(listed.body).not.toContain('"digest"');
  expect(listed.json<{ data: Array<{ id: string }> }>().data.map((k) => k.id)).toContain(id);
  // The other account sees none of it, and its ids answer 404 there.
  expect((await ownerB.call('GET', '/keys')).json<{ data: Array<{ id: string }> }>().data.map((k) => k.id)).not.toContain(id);
  for (const [method, path] of [
    ['PATCH', `/keys/${id}`],
    ['POST', `/keys/${id}/revoke`],
    ['POST', `/keys/${id}/rotate`],
  ]) {
    const response = await ownerB.call(method!, path!, method === 'PATCH' ? { name: 'stolen' } : undefined);
    expect({ path, status: response.status, code: response.json().error.code }).toEqual({ path, status: 404, code: 'key_not_found' });
  }
  expect((await request(f.gw.url, { ca: f.gw.ca, headers: bearer(key), body: chatBody() })).status).toBe(200);
});

test("a member creates, rotates and revokes their own keys, and may not touch an owner's or manage members", async () => {
  const ownersKey = (await ownerA.call('POST', '/keys', { name: 'owner-made' })).json<{ id: string }>().id;
  const mine = await memberA.call('POST', '/keys', { name: 'member-made' });
  expect(mine.status).toBe(201);
  const mineId = mine.json<{ id: string }>().id;
  expect((await memberA.call('PATCH', `/keys/${mineId}`, { name: 'renamed' })).status).toBe(200);
  const rotated = await memberA.call('POST', `/keys/${mineId}/rotate`);
  expect(rotated.status).toBe(200);
  expect((await request(f.gw.url, { ca: f.gw.ca, headers: bearer(rotated.json<{ key: string }>().key), body: chatBody() })).status).toBe(200);
  expect((await memberA.call('POST', `/keys/${mineId}/revoke`)).status).toBe(200);
  for (const [method, path, body] of [
    ['PATCH', `/keys/${ownersKey}`, { name: 'x' }],
    ['POST', `/keys/${ownersKey}/revoke`, undefined],
    ['POST', `/keys/${ownersKey}/rotate`, undefined],
    ['POST', '/members', { email: 'friend@example.com', role: 'owner' }],
    ['DELETE', '/members/owner-a@example.com', undefined],
    ['GET', '/audit', undefined],
  ] as const) {
    const response = await memberA.call(method, path, body);
    expect({ path, status: response.status, code: response.json().error.code }).toEqual({ path, status: 403, code: 'permission_denied' });
  }
  // ... but sees the account's keys and usage.
  expect((await memberA.call('GET', '/keys')).status).toBe(200);
  expect((await memberA.call('GET', '/usage')).status).toBe(200);
});

test('the session says what the person may do in the account, and the API holds to it', async () => {
  const permissionsOf = async (person: Person) => (await person.call('GET', '/session')).json<{ account: { permissions: unknown } }>().account.permissions;
  expect(await permissionsOf(ownerA)).toEqual({ createKeys: true, manageKeys: 'all', manageMembers: true, setPolicy: true, readAudit: true });
  expect(await permissionsOf(memberA)).toEqual({ createKeys: true, manageKeys: 'own', manageMembers: false, setPolicy: false, readAudit: false });
  // What the page is told is what the API does.
  for (const [person, may] of [[ownerA, true], [memberA, false]] as const) {
    expect((await person.call('GET', '/audit')).status).toBe(may ? 200 : 403);
    expect((await person.call('GET', '/members')).status).toBe(200);
    expect((await person.call('PATCH', '/account', { keyPolicy: null })).status).toBe(may ? 200 : 403);
  }
});

test('an owner invites a member (a one-time link to set the password) and removes them; the last owner stays', async () => {
  const invited = await ownerA.call('POST', '/members', { email: 'New.Person@Example.com', role: 'member' });
  expect(invited.status).toBe(201);
  const { email, passwordLink } = invited.json<{ email: string; passwordLink: string }>();
  expect(email).toBe('new.person@example.com');
  const token = passwordLink.split('#set-password=')[1]!;
  const set = await consoleCall(undefined, 'POST', '/password', { token, password: 'a new password that is long' });
  expect(set.status).toBe(200);
  expect((await consoleCall(undefined, 'POST', '/password', { token, password: 'another long password' })).status).toBe(400); // spent
  const newcomer = await signIn('new.person@example.com', 'a new password that is long');
  expect((await newcomer.call('GET', '/keys')).status).toBe(200);
  expect((await ownerA.call('DELETE', '/members/new.person@example.com')).status).toBe(204);
  expect((await newcomer.call('GET', '/keys')).status).toBe(403); // still signed in, but in no account
  const lastOwner = await ownerA.call('DELETE', '/members/owner-a@example.com');
  expect(lastOwner.status).toBe(409);
  expect(lastOwner.json().error.code).toBe('last_owner');
});

test("adding a person who already exists gives no password link and keeps their password: no owner can sign in as another account's people", async () => {
  // owner-b exists (an owner of team-b, with a password). Owner A adds them to team-a.
  const added = await ownerA.call('POST', '/members', { email: 'owner-b@example.com', role: 'member' });
  expect(added.status).toBe(201);
  expect(added.json<{ passwordLink?: string }>().passwordLink).toBeUndefined();
  await signIn('owner-b@example.com'); // the password still works
  // Someone invited by team-b and not yet signed in, then added by team-a: only team-b's invitation holds a link.
  const invited = await ownerB.call('POST', '/members', { email: 'pending@example.com', role: 'member' });
  expect(invited.json<{ passwordLink?: string }>().passwordLink).toMatch(/#set-password=/);
  const again = await ownerA.call('POST', '/members', { email: 'pending@example.com', role: 'owner' });
  expect(again.status).toBe(201);
  expect(again.json<{ passwordLink?: string }>().passwordLink).toBeUndefined();
  for (const email of ['owner-b@example.com', 'pending@example.com']) expect((await ownerA.call('DELETE', `/members/${email}`)).status).toBe(204);
});

test('usage per day and key, and its CSV; the audit trail of the account', async () => {
  const { key, id } = (await ownerA.call('POST', '/keys', { name: 'counted' })).json<{ key: string; id: string }>();
  for (let i = 0; i < 3; i++) expect((await request(f.gw.url, { ca: f.gw.ca, headers: bearer(key), body: chatBody() })).status).toBe(200);
  // Refused by the gateway itself (no messages; a provider it does not have): counted apart, never as requests.
  expect((await request(f.gw.url, { ca: f.gw.ca, headers: bearer(key), body: JSON.stringify({ model: 'mock/echo' }) })).status).toBe(400);
  expect((await request(f.gw.url, { ca: f.gw.ca, headers: bearer(key), body: chatBody({ model: 'nowhere/x' }) })).status).toBe(404);
  const today = new Date().toISOString().slice(0, 10);
  const row = await eventually(async () => {
    const usage = (await ownerA.call('GET', `/usage?keyId=${id}`)).json<{ data: Array<{ date: string; keyId: string; requests: number; refused: number; promptTokens: number; completionTokens: number }> }>();
    return usage.data.find((day) => day.requests === 3 && day.refused === 2);
  });
  expect(row).toMatchObject({ date: today, keyId: id, requests: 3, refused: 2 });
  // A keyId that cannot be a key's: 400 naming it, never passed to the store (nor a 5xx).
  for (const bad of ['%00', 'key_%00', `key_${'x'.repeat(65)}`, 'acc_default', '']) {
    const refused = await ownerA.call('GET', `/usage?keyId=${bad}`);
    expect({ bad, status: refused.status, param: refused.json().error?.param }).toEqual({ bad, status: 400, param: 'keyId' });
  }
  expect(row.promptTokens).toBeGreaterThan(0);
  const csv = await ownerA.call('GET', '/usage.csv');
  expect(csv.headers['content-type']).toBe('text/csv; charset=utf-8');
  expect(csv.body.split('\r\n')[0]).toBe('date,keyId,keyName,requests,promptTokens,completionTokens,refused,cost');
  expect(csv.body).toContain(`${today},${id},counted,3,`);
  // The CSV of one key holds that key's rows only.
  const oneKey = (await ownerA.call('GET', `/usage.csv?keyId=nokey`)).body.split('\r\n').filter(Boolean);
  expect(oneKey).toEqual(['date,keyId,keyName,requests,promptTokens,completionTokens,refused,cost']);
  expect((await ownerA.call('GET', `/usage.csv?keyId=${id}`)).body).toContain(`${today},${id},counted,3,`);
  expect((await ownerA.call('GET', `/usage.csv?keyId=${id}`)).body).toMatch(new RegExp(`^${today},${id},counted,3,\\d+,\\d+,2,0\r$`, 'm'));
  const audit = (await ownerA.call('GET', '/audit')).json<{ data: Array<{ actor: string; action: string; target: string }> }>().data;
  expect(audit.map((event) => event.action)).toEqual(expect.arrayContaining(['key.created', 'key.revoked', 'key.rotated', 'member.added', 'member.removed', 'session.created']));
  expect(audit.find((event) => event.action === 'key.created' && event.target === id)).toMatchObject({ actor: 'owner-a@example.com' });
  expect(JSON.stringify(audit)).not.toContain(key);
  // Another account's trail holds none of it.
  expect(JSON.stringify((await ownerB.call('GET', '/audit')).json())).not.toContain(id);
});

test('signing out ends the session: the same cookie gets 401 at once', async () => {
  const person = await signIn('owner-b@example.com');
  const out = await person.call('DELETE', '/session');
  expect(out.status).toBe(204);
  expect(String(out.headers['set-cookie'])).toMatch(/^__Host-chatgate_session=; Path=\/; Max-Age=0; HttpOnly; Secure; SameSite=Strict$/);
  expect((await person.call('GET', '/keys')).status).toBe(401);
  expect((await ownerB.call('GET', '/keys')).status).toBe(200); // another session of the same person lives on
});

test('repeated wrong passwords for one email: 429 for a while, whoever asks, even with the right password', async () => {
  const email = 'member-a@example.com';
  const statuses = [];
  for (let i = 0; i < 6; i++) statuses.push((await consoleCall(undefined, 'POST', '/session', { email, password: `wrong guess ${i}` })).status);
  expect(statuses).toEqual([401, 401, 401, 401, 401, 429]);
  const right = await consoleCall(undefined, 'POST', '/session', { email, password: PASSWORD });
  expect(right.status).toBe(429);
  expect(right.json().error.code).toBe('too_many_failed_attempts');
  // Until the fixed 15-minute window ends (near its end, that may be seconds away).
  expect(Number(right.headers['retry-after'])).toBeGreaterThan(0);
  expect(Number(right.headers['retry-after'])).toBeLessThanOrEqual(900);
  expect((await memberA.call('GET', '/keys')).status).toBe(200); // a session made before is not touched
});

test('the console page is served with a strict Content-Security-Policy', async () => {
  const page = await request(f.gw.url, { ca: f.gw.ca, method: 'GET', path: '/console/' });
  expect(page.status).toBe(200);
  expect(page.headers['content-type']).toMatch(/^text\/html/);
  const csp = String(page.headers['content-security-policy']);
  expect(csp).toContain("script-src 'self'");
  expect(csp).toContain("frame-ancestors 'none'");
  expect(csp).not.toContain('unsafe-inline');
  expect((await request(f.gw.url, { ca: f.gw.ca, method: 'GET', path: '/console' })).status).toBe(301);
});

test('a made-up password link is refused as invalid_link, and sets nothing', async () => {
  const refused = await consoleCall(undefined, 'POST', '/password', { token: 'A'.repeat(43), password: 'a password long enough' });
  expect(refused.status).toBe(400);
  expect(refused.json<{ error: { code: string; param: string } }>().error).toMatchObject({ code: 'invalid_link', param: 'token' });
});

test("switching to an account one is not a member of is 404, as if it did not exist; one's own stays current", async () => {
  const refused = await ownerA.call('PUT', '/session/account', { account: teamB });
  expect(refused.status).toBe(404);
  expect(refused.json<{ error: { code: string } }>().error.code).toBe('account_not_found');
  expect((await ownerA.call('GET', '/session')).json<{ account: { id: string } }>().account.id).toBe(teamA);
});

test('keys and members bodies refuse a field they do not know, naming it; nothing is made', async () => {
  const keys = async () => (await ownerA.call('GET', '/keys')).json<{ data: unknown[] }>().data.length;
  const before = await keys();
  const made = (await ownerA.call('POST', '/keys', { name: 'strict' })).json<{ id: string }>().id;
  for (const [method, path, body, param] of [
    ['POST', '/keys', { name: 'x', modles: ['a/*'] }, 'modles'],
    ['POST', '/keys', { name: 'x', account: teamB }, 'account'],
    ['POST', '/keys', { name: 'x', createdBy: 'member-a@example.com' }, 'createdBy'],
    ['PATCH', `/keys/${made}`, { name: 'y', accountId: teamB }, 'accountId'],
    ['POST', `/keys/${made}/rotate`, { key: 'mine' }, 'key'],
    ['POST', `/keys/${made}/revoke`, { soft: true }, 'soft'],
    ['POST', '/members', { email: 'x@example.com', role: 'member', password: 'chosen by the inviter' }, 'password'],
    ['POST', '/members', { email: 'x@example.com', role: 'member', admin: true }, 'admin'],
  ] as const) {
    const refused = await ownerA.call(method, path, body);
    expect({ path, status: refused.status, code: refused.json().error.code, param: refused.json().error.param }).toEqual({ path, status: 400, code: 'invalid_body', param });
  }
  expect(await keys()).toBe(before + 1);
  expect((await ownerA.call('GET', '/members')).json<{ data: { email: string }[] }>().data.map((m) => m.email)).not.toContain('x@example.com');
  expect((await admin('GET', `/keys/${made}`)).json()).toMatchObject({ name: 'strict', revokedAt: null });
});

test("removing a member revokes the keys they made here at once (401 on the API), audited with the reason; other accounts' keys stay", async () => {
  expect((await admin('POST', `/accounts/${teamA}/members`, { email: 'leaver@example.com', role: 'member', password: PASSWORD })).status).toBe(201);
  expect((await admin('POST', `/accounts/${teamB}/members`, { email: 'leaver@example.com', role: 'member' })).status).toBe(201);
  const leaver = await signIn('leaver@example.com');
  const here = (await leaver.call('POST', '/keys', { name: 'leaver in a' })).json<{ id: string; key: string }>();
  expect((await leaver.call('PUT', '/session/account', { account: teamB })).status).toBe(200);
  const there = (await leaver.call('POST', '/keys', { name: 'leaver in b' })).json<{ id: string; key: string }>();
  const chat = (key: string) => request(f.gw.url, { ca: f.gw.ca, headers: bearer(key), body: chatBody() });
  expect((await chat(here.key)).status).toBe(200);

  expect((await ownerA.call('DELETE', '/members/leaver@example.com')).status).toBe(204);
  const refused = await chat(here.key);
  expect({ status: refused.status, code: refused.json().error.code }).toEqual({ status: 401, code: 'invalid_api_key' });
  expect((await chat(there.key)).status).toBe(200); // their key in team-b is team-b's business
  const audit = (await ownerA.call('GET', '/audit')).json<{ data: { actor: string; action: string; target: string; details: unknown }[] }>().data;
  expect(audit.find((event) => event.target === here.id && event.action === 'key.revoked')).toMatchObject({ actor: 'owner-a@example.com', details: { reason: 'member_removed', member: 'leaver@example.com' } });
});

test('an owner who removes a member may take over their keys (?transferKeysTo=themself), never hand them to someone else', async () => {
  expect((await admin('POST', `/accounts/${teamA}/members`, { email: 'handover@example.com', role: 'member', password: PASSWORD })).status).toBe(201);
  expect((await admin('POST', `/accounts/${teamA}/members`, { email: 'co-owner@example.com', role: 'owner' })).status).toBe(201);
  const leaving = await signIn('handover@example.com');
  const made = (await leaving.call('POST', '/keys', { name: 'handed over' })).json<{ id: string; key: string }>();
  for (const heir of ['co-owner@example.com', 'member-a@example.com', 'handover@example.com', 'owner-b@example.com']) {
    const refused = await ownerA.call('DELETE', `/members/handover@example.com?transferKeysTo=${encodeURIComponent(heir)}`);
    expect({ heir, status: refused.status, param: refused.json().error.param }).toEqual({ heir, status: 400, param: 'transferKeysTo' });
  }
  expect((await leaving.call('GET', '/keys')).status).toBe(200); // still a member: nothing happened
  expect((await ownerA.call('DELETE', '/members/handover@example.com?transferKeysTo=Owner-A@example.com')).status).toBe(204);
  expect((await request(f.gw.url, { ca: f.gw.ca, headers: bearer(made.key), body: chatBody() })).status).toBe(200);
  expect((await admin('GET', `/keys/${made.id}`)).json()).toMatchObject({ createdBy: 'owner-a@example.com', revokedAt: null });
  // Now the owner's, as if they had made it: a member may no longer manage it.
  const audit = (await ownerA.call('GET', '/audit')).json<{ data: { action: string; target: string; details: unknown }[] }>().data;
  expect(audit.find((event) => event.target === made.id && event.action === 'key.transferred')).toMatchObject({ details: { from: 'handover@example.com', to: 'owner-a@example.com' } });
  expect((await admin('DELETE', `/accounts/${teamA}/members/co-owner@example.com`)).status).toBe(204);
});
