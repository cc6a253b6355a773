/**
 * An account's key policy (keyPolicy.maxLifetimeDays) through a real gateway: set and cleared with
 * the admin API (bad values refused, naming the field; the change audited); a key made without an
 * expiry gets the longest the policy allows, through the admin API and the console alike; one asked
 * to live longer, or an edit that would make it live longer or for ever, is refused 400 and changes
 * nothing; keys expiring within a week are listed by GET /admin/api/keys?expiringWithinDays=7.
 */
import { gatewayWithWorker } from '../helpers/fixture';
import { request } from '../helpers/http';

const TOKEN = 'admin-token-for-key-policy-0123456789';
const DAY = 86_400_000;
const f = gatewayWithWorker({ admin: { host: '127.0.0.1', port: 0, token: TOKEN }, auth: { createFirstKey: false } });

const admin = (method: string, apiPath: string, body?: unknown) =>
  request(f.gw.adminUrl, { method, path: `/admin/api${apiPath}`, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
const refusal = (answer: { status: number; json<T>(): T }) => ({ status: answer.status, param: answer.json<{ error: { param: string | null } }>().error.param });
const inDays = (days: number) => new Date(Date.now() + days * DAY).toISOString();

test('set with the admin API, refused when malformed, audited; shown as null when none', async () => {
  const made = (await admin('POST', '/accounts', { name: 'policy set' })).json<{ id: string; keyPolicy: unknown }>();
  expect(made.keyPolicy).toBeNull();
  for (const [keyPolicy, param] of [
    [{ maxLifetimeDays: 0 }, 'keyPolicy.maxLifetimeDays'],
    [{ maxLifetimeDays: 3651 }, 'keyPolicy.maxLifetimeDays'],
    [{ maxLifetimeDays: 1.5 }, 'keyPolicy.maxLifetimeDays'],
    [{ maxLifetimeDays: '30' }, 'keyPolicy.maxLifetimeDays'],
    [{ maxLifetimeDays: 30, maxIdleDays: 3 }, 'keyPolicy.maxIdleDays'],
    [30, 'keyPolicy'],
    [[30], 'keyPolicy'],
  ] as const) {
    expect({ keyPolicy, ...refusal(await admin('PATCH', `/accounts/${made.id}`, { keyPolicy })) }).toEqual({ keyPolicy, status: 400, param });
  }
  expect((await admin('PATCH', `/accounts/${made.id}`, { keyPolicy: { maxLifetimeDays: 30 } })).json<{ keyPolicy: unknown }>().keyPolicy).toEqual({ maxLifetimeDays: 30 });
  expect((await admin('GET', `/accounts/${made.id}`)).json<{ keyPolicy: unknown }>().keyPolicy).toEqual({ maxLifetimeDays: 30 });
  const audit = (await admin('GET', `/accounts/${made.id}/audit`)).json<{ data: Array<{ action: string; details: unknown }> }>().data;
  expect(audit.find((event) => event.action === 'key_policy.changed')?.details).toEqual({ from: null, to: { maxLifetimeDays: 30 } });
  expect((await admin('PATCH', `/accounts/${made.id}`, { keyPolicy: null })).json<{ keyPolicy: unknown }>().keyPolicy).toBeNull();
});

test('a key made without an expiry gets the longest allowed; a longer one is refused; edits keep within it', async () => {
  const account = (await admin('POST', '/accounts', { name: 'policy held', keyPolicy: { maxLifetimeDays: 30 } })).json<{ id: string }>().id;
  const plain = (await admin('POST', '/keys', { name: 'no expiry asked', account })).json<{ id: string; createdAt: string; expiresAt: string }>();
  expect(Date.parse(plain.expiresAt) - Date.parse(plain.createdAt)).toBe(30 * DAY);
  expect(refusal(await admin('POST', '/keys', { name: 'too long', account, expiresAt: inDays(31) }))).toEqual({ status: 400, param: 'expiresAt' });
  const never = await admin('POST', '/keys', { name: 'for ever', account, expiresAt: null }); // null at creation: the policy's longest
  expect(never.status).toBe(201);
  expect(Date.parse(never.json<{ expiresAt: string }>().expiresAt)).toBeGreaterThan(Date.now() + 29 * DAY);
  const short = (await admin('POST', '/keys', { name: 'short', account, expiresAt: inDays(10) })).json<{ id: string; expiresAt: string }>();
  expect(Date.parse(short.expiresAt)).toBeGreaterThan(Date.now() + 9 * DAY);
  expect(refusal(await admin('PATCH', `/keys/${short.id}`, { expiresAt: null }))).toEqual({ status: 400, param: 'expiresAt' });
  expect(refusal(await admin('PATCH', `/keys/${short.id}`, { expiresAt: inDays(31) }))).toEqual({ status: 400, param: 'expiresAt' });
  expect((await admin('GET', `/keys/${short.id}`)).json<{ expiresAt: string }>().expiresAt).toBe(short.expiresAt); // nothing changed
  expect((await admin('PATCH', `/keys/${short.id}`, { expiresAt: inDays(20) })).status).toBe(200);
  expect((await admin('PATCH', `/keys/${short.id}`, { name: 'renamed' })).status).toBe(200); // an edit that leaves the expiry alone
});

test('the console makes keys under the policy too', async () => {
  const account = (await admin('POST', '/accounts', { name: 'policy in console', keyPolicy: { maxLifetimeDays: 7 } })).json<{ id: string }>().id;
  await admin('POST', `/accounts/${account}/members`, { email: 'policy-member@example.com', role: 'member', password: 'a policy member password' });
  const origin = `https://${new URL(f.gw.url).host}`;
  const signedIn = await request(f.gw.url, { ca: f.gw.ca, path: '/console/api/session', headers: { origin, 'content-type': 'application/json' }, body: JSON.stringify({ email: 'policy-member@example.com', password: 'a policy member password' }) });
  const cookie = String(signedIn.headers['set-cookie']).split(';')[0]!;
  const consoleKey = (body: unknown) => request(f.gw.url, { ca: f.gw.ca, path: '/console/api/keys', headers: { cookie, origin, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const made = (await consoleKey({ name: 'from the console' })).json<{ createdAt: string; expiresAt: string }>();
  expect(Date.parse(made.expiresAt) - Date.parse(made.createdAt)).toBe(7 * DAY);
  expect(refusal(await consoleKey({ name: 'too long', expiresAt: inDays(8) }))).toEqual({ status: 400, param: 'expiresAt' });
});

test('keys expiring within a week are listed, soonest first; a revoked one and a later one are not', async () => {
  const account = (await admin('POST', '/accounts', { name: 'expiring soon' })).json<{ id: string }>().id;
  const later = (await admin('POST', '/keys', { name: 'in five days', account, expiresAt: inDays(5) })).json<{ id: string }>().id;
  const sooner = (await admin('POST', '/keys', { name: 'in two days', account, expiresAt: inDays(2) })).json<{ id: string }>().id;
  await admin('POST', '/keys', { name: 'in a month', account, expiresAt: inDays(30) });
  const revoked = (await admin('POST', '/keys', { name: 'revoked', account, expiresAt: inDays(1) })).json<{ id: string }>().id;
  await admin('POST', `/keys/${revoked}/revoke`);
  const listed = (await admin('GET', `/keys?account=${account}&expiringWithinDays=7`)).json<{ data: Array<{ id: string }> }>().data;
  expect(listed.map((key) => key.id)).toEqual([sooner, later]);
  for (const bad of ['0', '-1', '1.5', 'week', '3651']) expect(refusal(await admin('GET', `/keys?expiringWithinDays=${bad}`))).toEqual({ status: 400, param: 'expiringWithinDays' });
});

test('keys made before the policy: an edit may give them an expiry within the policy from now, or bring one closer; never a later one', async () => {
  const account = (await admin('POST', '/accounts', { name: 'policy after keys' })).json<{ id: string }>().id;
  const forever = (await admin('POST', '/keys', { name: 'made without expiry', account })).json<{ id: string; expiresAt: string | null }>();
  expect(forever.expiresAt).toBeNull();
  const far = (await admin('POST', '/keys', { name: 'made with a far expiry', account, expiresAt: inDays(300) })).json<{ id: string }>().id;
  await admin('PATCH', `/accounts/${account}`, { keyPolicy: { maxLifetimeDays: 30 } });
  expect(refusal(await admin('PATCH', `/keys/${forever.id}`, { expiresAt: inDays(40) }))).toEqual({ status: 400, param: 'expiresAt' });
  expect((await admin('PATCH', `/keys/${forever.id}`, { expiresAt: inDays(20) })).status).toBe(200); // brought under the policy
  expect((await admin('PATCH', `/keys/${far}`, { expiresAt: inDays(200) })).status).toBe(200); // closer than it was
  expect(refusal(await admin('PATCH', `/keys/${far}`, { expiresAt: inDays(250) }))).toEqual({ status: 400, param: 'expiresAt' }); // later again: no
  expect(refusal(await admin('PATCH', `/keys/${far}`, { expiresAt: null }))).toEqual({ status: 400, param: 'expiresAt' });
});
