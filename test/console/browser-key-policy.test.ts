/**
 * The key lifetime policy in the console, in headless Chromium against a real gateway: an owner sets
 * "keys live at most 30 days" on the Members tab (audited); a key made without an expiry then gets one
 * 30 days on, shown on its row; clearing the field lifts the policy. A member sees no such form, and
 * the console API refuses them (403) as it refuses fields it does not know, a look-alike of the policy
 * and days out of range (400, naming the field), changing nothing.
 */
import type { Page } from 'playwright-core';
import { openConsoleWindow, type ConsoleWindow } from '../helpers/console-window';
import { consoleFixture, expectMembersTabWithout, expectNoSidewaysScroll, sessionCookie, signIn } from '../helpers/console-fixture';
import { request } from '../helpers/http';

const PASSWORD = 'a key policy owner password';
const f = consoleFixture();
const admin = f.admin;
type Account = { id: string; keyPolicy: { maxLifetimeDays: number } | null };

const cookieOf = (email: string) => sessionCookie(f.gw, email, PASSWORD);
const patchAccount = async (cookie: string, body: unknown) =>
  request(f.gw.url, { ca: f.gw.ca, method: 'PATCH', path: '/console/api/account', headers: { cookie, origin: f.gw.url, 'content-type': 'application/json' }, body: JSON.stringify(body) });

for (const [size, viewport] of [['desktop', { width: 1280, height: 800 }], ['phone', { width: 390, height: 844 }]] as const) {
  test(`${size}: an owner sets the key lifetime; a key made without an expiry gets one within it; cleared, keys may live for ever`, async () => {
    const owner = `policy-owner-${size}@example.com`;
    const account = (await admin<Account>('POST', '/accounts', { name: `Policy ${size}` })).id;
    await admin('POST', `/accounts/${account}/members`, { email: owner, role: 'owner', password: PASSWORD });
    let win: ConsoleWindow | undefined;
    try {
      win = await openConsoleWindow(f.browser, f.gw.url, viewport);
      const page: Page = win.page;
      await signIn(page, f.gw.url, owner, PASSWORD);
      await page.getByTestId('tab-members').click();
      await page.getByTestId('policy-form').waitFor();
      await expect(page.getByTestId('policy-days').inputValue()).resolves.toBe('');
      await page.getByTestId('policy-days').fill('0');
      await page.getByTestId('policy-submit').click();
      await expect(page.getByTestId('policy-error').textContent()).resolves.toMatch(/whole number of days from 1 to 3650/);
      await page.getByTestId('policy-days').fill('30');
      await page.getByTestId('policy-submit').click();
      await page.getByText('now live at most 30 days').waitFor();
      expect((await admin<Account>('GET', `/accounts/${account}`)).keyPolicy).toEqual({ maxLifetimeDays: 30 });

      await page.getByTestId('tab-keys').click();
      await page.getByTestId('new-key-button').click();
      await page.getByTestId('key-form-name').fill(`bounded-${size}`);
      const made = Date.now();
      await page.getByTestId('key-form-submit').click();
      await page.getByTestId('secret-panel').waitFor();
      await page.getByTestId('secret-done').click();
      const expires = await page.locator(`[data-testid="key-row"][data-key-name="bounded-${size}"]`).getByTestId('key-expires').getAttribute('title');
      expect(Date.parse(expires!) - made).toBeGreaterThan(30 * 86_400_000 - 60_000);
      expect(Date.parse(expires!) - made).toBeLessThanOrEqual(30 * 86_400_000 + 60_000);
      if (size === 'phone') await expectNoSidewaysScroll(page);

      // Reloaded, the form shows the policy; emptied and saved, the policy is gone.
      await page.reload();
      await page.getByTestId('tab-members').click();
      await expect(page.getByTestId('policy-days').inputValue()).resolves.toBe('30');
      await page.getByTestId('policy-days').fill('');
      await page.getByTestId('policy-submit').click();
      await page.getByText('may now live for ever').waitFor();
      expect((await admin<Account>('GET', `/accounts/${account}`)).keyPolicy).toBeNull();
      const audit = await admin<{ data: Array<{ action: string; actor: string; details: { to: unknown } }> }>('GET', `/accounts/${account}/audit`);
      expect(audit.data.filter((event) => event.action === 'key_policy.changed').map((event) => [event.actor, event.details.to])).toEqual([
        [owner, null],
        [owner, { maxLifetimeDays: 30 }],
      ]);
      expect(win.problems).toEqual([]);
    } finally {
      await win?.context.close();
    }
  }, 45_000);
}

test('a member sees no key policy form and is refused by the API; hostile bodies are refused, naming the field, and change nothing', async () => {
  const account = (await admin<Account>('POST', '/accounts', { name: 'Policy hostile', keyPolicy: { maxLifetimeDays: 90 } })).id;
  await admin('POST', `/accounts/${account}/members`, { email: 'policy-member@example.com', role: 'member', password: PASSWORD });
  await admin('POST', `/accounts/${account}/members`, { email: 'policy-boss@example.com', role: 'owner', password: PASSWORD });
  const member = await cookieOf('policy-member@example.com');
  const refused = await patchAccount(member, { keyPolicy: null });
  expect(refused.status).toBe(403);
  expect(refused.json<{ error: { code: string } }>().error.code).toBe('permission_denied');

  const owner = await cookieOf('policy-boss@example.com');
  for (const [body, param] of [
    [{ keyPolicy: { maxLifetimeDays: 0 } }, 'keyPolicy.maxLifetimeDays'],
    [{ keyPolicy: { maxLifetimeDays: 3651 } }, 'keyPolicy.maxLifetimeDays'],
    [{ keyPolicy: { maxLifetimeDays: 1.5 } }, 'keyPolicy.maxLifetimeDays'],
    [{ keyPolicy: { maxLifetimeDays: '30' } }, 'keyPolicy.maxLifetimeDays'],
    [{ keyPolicy: { maxLifetimeDays: 30, maxLifetimeDay: 3650 } }, 'keyPolicy.maxLifetimeDay'],
    [{ keyPolicy: [30] }, 'keyPolicy'],
    [{ keypolicy: null }, 'keypolicy'],
    [{ keyPolicy: null, quota: { tokensPerDay: null } }, 'quota'],
    [{}, 'keyPolicy'],
  ] as const) {
    const answer = await patchAccount(owner, body);
    expect([answer.status, answer.json<{ error: { param: string; type: string } }>().error.param]).toEqual([400, param]);
  }
  expect((await admin<Account>('GET', `/accounts/${account}`)).keyPolicy).toEqual({ maxLifetimeDays: 90 });

  await expectMembersTabWithout(f, 'policy-member@example.com', PASSWORD, 'policy-form');
}, 45_000);
