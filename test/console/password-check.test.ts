/**
 * Checking a set-password link before using it (POST /console/api/password/check), as the console's
 * page does when it opens with one: a working link is 200 and still works afterwards (the check takes
 * nothing, nor voids the person's link); a used, void or made-up one is 400 invalid_link, as setting
 * the password with it would be. No answer names whose link it is.
 */
import { gatewayWithWorker } from '../helpers/fixture';
import { request } from '../helpers/http';

const TOKEN = 'admin-token-for-the-password-check-test';
const f = gatewayWithWorker({ admin: { host: '127.0.0.1', port: 0, token: TOKEN }, auth: { createFirstKey: false } });

const admin = (method: string, path: string, body?: unknown) =>
  request(f.gw.adminUrl, { method, path: `/admin/api${path}`, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
const consoleCall = (method: string, path: string, body: unknown) =>
  request(f.gw.url, { ca: f.gw.ca, method, path: `/console/api${path}`, headers: { origin: `https://${new URL(f.gw.url).host}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
const check = (token: unknown) => consoleCall('POST', '/password/check', { token });

/** A fresh set-password link's token for a new member of a new account, and the account. */
async function linkFor(email: string): Promise<{ account: string; token: string }> {
  const account = (await admin('POST', '/accounts', { name: `checks-${email}` })).json<{ id: string }>().id;
  expect((await admin('POST', `/accounts/${account}/members`, { email, role: 'member' })).status).toBe(201);
  const link = await admin('POST', `/accounts/${account}/members/${email}/password-link`);
  expect(link.status).toBe(201);
  return { account, token: link.json<{ path: string }>().path.split('#set-password=')[1]! };
}

test('a working link checks as valid, twice, and then still sets the password; once used it checks as invalid_link', async () => {
  const email = 'checked@example.com';
  const { token } = await linkFor(email);
  for (let i = 0; i < 2; i++) {
    const checked = await check(token);
    expect(checked.status).toBe(200);
    expect(checked.json()).toEqual({ valid: true });
    expect(checked.body).not.toContain('checked@');
  }
  const set = await consoleCall('POST', '/password', { token, password: 'a password set after a check' });
  expect(set.status).toBe(200);
  expect(set.json()).toEqual({ email });

  const used = await check(token);
  expect(used.status).toBe(400);
  expect(used.json<{ error: { code: string; param: string } }>().error).toMatchObject({ code: 'invalid_link', param: 'token' });
  expect(used.body).not.toContain('checked@');
});

test('a link made void by a newer one, a made-up one and a malformed body are refused as setting would be', async () => {
  const email = 'voided@example.com';
  const { account, token: old } = await linkFor(email);
  const newer = (await admin('POST', `/accounts/${account}/members/${email}/password-link`)).json<{ path: string }>().path.split('#set-password=')[1]!;
  for (const token of [old, 'A'.repeat(43), 'x'.repeat(300), 42]) {
    const refused = await check(token);
    expect(refused.status).toBe(400);
    expect(refused.json<{ error: { code: string } }>().error.code).toBe('invalid_link');
    expect(refused.body).not.toContain('voided@');
    // Setting the password with it is refused the same way.
    const set = await consoleCall('POST', '/password', { token, password: 'a password long enough' });
    expect([set.status, set.json<{ error: { code: string } }>().error.code]).toEqual([400, 'invalid_link']);
  }
  // Checking the old one voided nothing: the newer link still works.
  expect((await check(newer)).status).toBe(200);
  expect((await consoleCall('POST', '/password', { token: newer, password: 'a password long enough' })).status).toBe(200);
  // A field the check does not know is refused, naming it.
  const extra = await consoleCall('POST', '/password/check', { token: newer, email });
  expect(extra.status).toBe(400);
  expect(extra.json<{ error: { param: string } }>().error.param).toBe('email');
});
