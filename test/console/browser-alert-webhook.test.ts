/**
 * An account's own alert webhook in the console, in headless Chromium against a real gateway: an
 * owner sets it on the Members tab (an http URL is refused in the page; the API sees only https),
 * the page then shows its host and never the URL (a secret), the admin API shows the host only, the
 * audit names the host only; "Use the platform's" clears it. A member sees no form and the API
 * refuses them; hostile URLs (plain http, credentials, loopback, the metadata address, IPv6 forms)
 * and look-alike fields are 400 naming the field, change nothing, and never echo the URL.
 */
import type { Page } from 'playwright-core';
import { openConsoleWindow, type ConsoleWindow } from '../helpers/console-window';
import { consoleFixture, expectMembersTabWithout, expectNoSidewaysScroll, sessionCookie, signIn } from '../helpers/console-fixture';
import { request } from '../helpers/http';

const PASSWORD = 'an alert webhook owner password';
const SECRET = 'T0001/B0001/hooksecretXXXXXXXX';
const f = consoleFixture();
const admin = f.admin;
type Account = { id: string; alertWebhook: string | null; alertWebhookUrl?: string };

const patchAccount = async (cookie: string, body: unknown) =>
  request(f.gw.url, { ca: f.gw.ca, method: 'PATCH', path: '/console/api/account', headers: { cookie, origin: f.gw.url, 'content-type': 'application/json' }, body: JSON.stringify(body) });

for (const [size, viewport] of [['desktop', { width: 1280, height: 800 }], ['phone', { width: 390, height: 844 }]] as const) {
  test(`${size}: an owner sends the account's alerts to a webhook of its own, sees only its host, and goes back to the platform's`, async () => {
    const owner = `hook-owner-${size}@example.com`;
    const account = (await admin<Account>('POST', '/accounts', { name: `Hooks ${size}` })).id;
    await admin('POST', `/accounts/${account}/members`, { email: owner, role: 'owner', password: PASSWORD });
    let win: ConsoleWindow | undefined;
    try {
      win = await openConsoleWindow(f.browser, f.gw.url, viewport);
      const page: Page = win.page;
      await signIn(page, f.gw.url, owner, PASSWORD);
      await page.getByTestId('tab-members').click();
      await page.getByTestId('webhook-form').waitFor();
      await expect(page.getByTestId('webhook-hint').textContent()).resolves.toMatch(/platform's webhook/);
      await expect(page.getByTestId('webhook-clear').isVisible()).resolves.toBe(false);

      await page.getByTestId('webhook-url').fill(`http://hooks.example.com/services/${SECRET}`);
      await page.getByTestId('webhook-submit').click();
      await expect(page.getByTestId('webhook-error').textContent()).resolves.toMatch(/https/);
      await page.getByTestId('webhook-url').fill(`https://hooks.example.com/services/${SECRET}`);
      await page.getByTestId('webhook-submit').click();
      await page.getByText(`now go to hooks.example.com`).waitFor();
      await expect(page.getByTestId('webhook-url').inputValue()).resolves.toBe('');
      const shown = await admin<Account>('GET', `/accounts/${account}`);
      expect(shown.alertWebhook).toBe('hooks.example.com');
      expect(JSON.stringify(shown)).not.toContain(SECRET);
      if (size === 'phone') await expectNoSidewaysScroll(page);

      await page.reload();
      await page.getByTestId('tab-members').click();
      await expect(page.getByTestId('webhook-hint').textContent()).resolves.toMatch(/go to hooks\.example\.com/);
      expect(await page.content()).not.toContain(SECRET);
      await page.getByTestId('webhook-clear').click();
      await page.getByText("now go to the platform's webhook").waitFor();
      expect((await admin<Account>('GET', `/accounts/${account}`)).alertWebhook).toBeNull();

      const audit = await admin<{ data: Array<{ action: string; actor: string; details: unknown }> }>('GET', `/accounts/${account}/audit`);
      expect(audit.data.filter((event) => event.action === 'alert_webhook.changed').map((event) => [event.actor, event.details])).toEqual([
        [owner, { from: 'hooks.example.com', to: null }],
        [owner, { from: null, to: 'hooks.example.com' }],
      ]);
      expect(JSON.stringify(audit)).not.toContain(SECRET);
      expect(win.problems).toEqual([]);
    } finally {
      await win?.context.close();
    }
  }, 45_000);
}

test('a member sees no webhook form and is refused; hostile URLs and look-alike fields are 400 naming the field, change nothing, and are not echoed', async () => {
  const account = (await admin<Account>('POST', '/accounts', { name: 'Hooks hostile' })).id;
  await admin('PATCH', `/accounts/${account}`, { alertWebhookUrl: `https://chat.example.com/hooks/${SECRET}` });
  await admin('POST', `/accounts/${account}/members`, { email: 'hook-member@example.com', role: 'member', password: PASSWORD });
  await admin('POST', `/accounts/${account}/members`, { email: 'hook-boss@example.com', role: 'owner', password: PASSWORD });
  const member = await sessionCookie(f.gw, 'hook-member@example.com', PASSWORD);
  const refused = await patchAccount(member, { alertWebhookUrl: null });
  expect(refused.status).toBe(403);

  const owner = await sessionCookie(f.gw, 'hook-boss@example.com', PASSWORD);
  for (const [body, param] of [
    [{ alertWebhookUrl: `http://hooks.example.com/${SECRET}` }, 'alertWebhookUrl'],
    [{ alertWebhookUrl: `https://me:pw@hooks.example.com/${SECRET}` }, 'alertWebhookUrl'],
    [{ alertWebhookUrl: `https://127.0.0.1:9464/admin/api/${SECRET}` }, 'alertWebhookUrl'],
    [{ alertWebhookUrl: `https://169.254.169.254/latest/meta-data/${SECRET}` }, 'alertWebhookUrl'],
    [{ alertWebhookUrl: `https://[::ffff:a9fe:a9fe]/${SECRET}` }, 'alertWebhookUrl'],
    [{ alertWebhookUrl: `https://[fd00::1]/${SECRET}` }, 'alertWebhookUrl'],
    [{ alertWebhookUrl: 42 }, 'alertWebhookUrl'],
    [{ alertWebhookUrl: [`https://hooks.example.com/${SECRET}`] }, 'alertWebhookUrl'],
    [{ alertWebhookURL: `https://hooks.example.com/${SECRET}` }, 'alertWebhookURL'],
    [{ alertWebhookUrl: null, webhookUrl: `https://hooks.example.com/${SECRET}` }, 'webhookUrl'],
  ] as const) {
    const answer = await patchAccount(owner, body);
    expect([answer.status, answer.json<{ error: { param: string } }>().error.param]).toEqual([400, param]);
    expect(answer.body).not.toContain(SECRET);
  }
  expect((await admin<Account>('GET', `/accounts/${account}`)).alertWebhook).toBe('chat.example.com');

  await expectMembersTabWithout(f, 'hook-member@example.com', PASSWORD, 'webhook-form');
}, 45_000);
