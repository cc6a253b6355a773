/**
 * Changing a member's role (PATCH /console/api/members/:email, and the admin API's
 * PATCH /admin/api/accounts/:id/members/:email), on a real gateway: owners only, roles the code has,
 * no other field, an email matched as chatgate keys it (never a look-alike), the last owner kept,
 * and every change in the audit trail.
 */
import { gatewayWithWorker } from '../helpers/fixture';
import { request, type RawResponse } from '../helpers/http';

const TOKEN = 'admin-token-for-the-member-roles-test';
const PASSWORD = 'correct horse battery staple';
const f = gatewayWithWorker({ admin: { host: '127.0.0.1', port: 0, token: TOKEN }, auth: { createFirstKey: false } });

const admin = (method: string, path: string, body?: unknown) =>
  request(f.gw.adminUrl, { method, path: `/admin/api${path}`, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });

type Call = (method: string, path: string, body?: unknown) => Promise<RawResponse>;

async function signIn(email: string): Promise<Call> {
  const signedIn = await request(f.gw.url, { ca: f.gw.ca, method: 'POST', path: '/console/api/session', headers: { origin: `https://${new URL(f.gw.url).host}`, 'content-type': 'application/json' }, body: JSON.stringify({ email, password: PASSWORD }) });
  expect(signedIn.status).toBe(200);
  const cookie = String(signedIn.headers['set-cookie']).split(';')[0]!;
  return (method, path, body) =>
    request(f.gw.url, {
      ca: f.gw.ca,
      method,
      path: `/console/api${path}`,
      headers: { origin: `https://${new URL(f.gw.url).host}`, 'content-type': 'application/json', cookie },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
}

/** The client error in the OpenAI shape, and nothing else. */
function refused(response: RawResponse, status: number, code: string, param: string | null) {
  expect(response.status).toBe(status);
  const body = response.json<{ error: Record<string, unknown> }>();
  expect(Object.keys(body)).toEqual(['error']);
  expect(Object.keys(body.error).sort()).toEqual(['code', 'message', 'param', 'type']);
  expect(body.error).toMatchObject({ code, param });
  expect(String(body.error.message).length).toBeGreaterThan(10);
}

let account: string;
let owner: Call;
let member: Call;
const roles = async () => Object.fromEntries((await admin('GET', `/accounts/${account}/members`)).json<{ data: { email: string; role: string }[] }>().data.map((m) => [m.email, m.role]));

beforeAll(async () => {
  account = (await admin('POST', '/accounts', { name: 'roles' })).json<{ id: string }>().id;
  for (const [email, role] of [['boss@example.com', 'owner'], ['dev@example.com', 'member'], ['ops@example.com', 'member']] as const) {
    expect((await admin('POST', `/accounts/${account}/members`, { email, role, password: PASSWORD })).status).toBe(201);
  }
  owner = await signIn('boss@example.com');
  member = await signIn('dev@example.com');
});

test("an owner makes a member owner and back: the answer is the membership, added when and by whom it was, and the audit says so", async () => {
  const before = (await owner('GET', '/members')).json<{ data: { email: string; addedAt: string; addedBy: string }[] }>().data.find((m) => m.email === 'ops@example.com')!;
  const promoted = await owner('PATCH', '/members/ops@example.com', { role: 'owner' });
  expect(promoted.status).toBe(200);
  expect(promoted.json()).toEqual({ email: 'ops@example.com', role: 'owner', addedAt: before.addedAt, addedBy: before.addedBy });
  const same = await owner('PATCH', '/members/ops@example.com', { role: 'owner' });
  expect(same.status).toBe(200);
  expect((await owner('PATCH', '/members/ops@example.com', { role: 'member' })).json()).toMatchObject({ role: 'member' });
  const audit = (await owner('GET', '/audit')).json<{ data: { action: string; actor: string; target: string; details: unknown }[] }>().data.filter((event) => event.action === 'member.role_changed');
  // Newest first; the same role again changed nothing and said nothing.
  expect(audit.map(({ actor, target, details }) => ({ actor, target, details }))).toEqual([
    { actor: 'boss@example.com', target: 'ops@example.com', details: { from: 'owner', role: 'member' } },
    { actor: 'boss@example.com', target: 'ops@example.com', details: { from: 'member', role: 'owner' } },
  ]);
});

test('refused: an unknown field, a role the code does not have, none, a body that is no object; nothing changes', async () => {
  const before = await roles();
  refused(await owner('PATCH', '/members/dev@example.com', { role: 'owner', admin: true }), 400, 'invalid_body', 'admin');
  refused(await owner('PATCH', '/members/dev@example.com', { role: 'admin' }), 400, 'invalid_body', 'role');
  refused(await owner('PATCH', '/members/dev@example.com', { role: 'Owner' }), 400, 'invalid_body', 'role');
  refused(await owner('PATCH', '/members/dev@example.com', {}), 400, 'invalid_body', 'role');
  refused(await owner('PATCH', '/members/dev@example.com', ['owner']), 400, 'invalid_body', null);
  refused(await admin('PATCH', `/accounts/${account}/members/dev@example.com`, { role: 'owner', password: 'chosen by the admin' }), 400, 'invalid_body', 'password');
  refused(await admin('PATCH', `/accounts/${account}/members/dev@example.com`, { role: 'viewer' }), 400, 'invalid_body', 'role');
  expect(await roles()).toEqual(before);
});

test('a member may change no role, not even their own, nor demote the last owner', async () => {
  const before = await roles();
  refused(await member('PATCH', '/members/dev@example.com', { role: 'owner' }), 403, 'permission_denied', null);
  refused(await member('PATCH', '/members/boss@example.com', { role: 'member' }), 403, 'permission_denied', null);
  expect(await roles()).toEqual(before);
});

test('the last owner stays one, however their email is written; a look-alike email is no member', async () => {
  for (const written of ['boss@example.com', 'BOSS@Example.COM', encodeURIComponent('  Boss@example.com ')]) {
    refused(await owner('PATCH', `/members/${written}`, { role: 'member' }), 409, 'last_owner', 'email');
    refused(await admin('PATCH', `/accounts/${account}/members/${written}`, { role: 'member' }), 409, 'last_owner', 'email');
  }
  // Case and whitespace are how chatgate keys an email: the same member.
  expect((await owner('PATCH', `/members/${encodeURIComponent(' DEV@example.com ')}`, { role: 'member' })).json()).toMatchObject({ email: 'dev@example.com', role: 'member' });
  // A Kelvin sign for the k, full-width letters: another address, and nobody here.
  refused(await owner('PATCH', `/members/${encodeURIComponent('\u212Aate@example.com')}`, { role: 'owner' }), 404, 'member_not_found', 'email');
  refused(await owner('PATCH', `/members/${encodeURIComponent('ｄｅｖ@example.com')}`, { role: 'owner' }), 404, 'member_not_found', 'email');
  refused(await owner('PATCH', '/members/stranger@example.com', { role: 'owner' }), 404, 'member_not_found', 'email');
  refused(await admin('PATCH', `/accounts/${account}/members/stranger@example.com`, { role: 'owner' }), 404, 'member_not_found', 'email');
  refused(await admin('PATCH', '/accounts/acc_nope/members/dev@example.com', { role: 'owner' }), 404, 'account_not_found', 'id');
  expect(await roles()).toEqual({ 'boss@example.com': 'owner', 'dev@example.com': 'member', 'ops@example.com': 'member' });
  // With a second owner, the first may step down (and then no longer manage members).
  expect((await admin('PATCH', `/accounts/${account}/members/ops@example.com`, { role: 'owner' })).status).toBe(200);
  expect((await owner('PATCH', '/members/boss@example.com', { role: 'member' })).json()).toMatchObject({ role: 'member' });
  refused(await owner('PATCH', '/members/boss@example.com', { role: 'owner' }), 403, 'permission_denied', null);
  const audit = (await admin('GET', `/accounts/${account}/audit`)).json<{ data: { action: string; actor: string; target: string }[] }>().data;
  expect(audit.find((event) => event.action === 'member.role_changed' && event.target === 'ops@example.com')).toMatchObject({ actor: 'admin-token' });
});
