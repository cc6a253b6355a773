/**
 * Rotation with grace in the console, in headless Chromium (playwright-core) at desktop and phone
 * sizes, against a real gateway and mock worker: the rotate dialog asks how long the current secret
 * keeps working; with "in 1 hour" the new secret is shown with the old one's end, both work, and the
 * key's row says until when the old one does; a second rotation "at once" stops both earlier
 * secrets. A key that expires within a week says so on its row. No console error, no CSP violation,
 * no sideways scrolling on the phone.
 */
import type { Page } from 'playwright-core';
import { openConsoleWindow, type ConsoleWindow } from '../helpers/console-window';
import { consoleFixture, expectNoSidewaysScroll, signIn } from '../helpers/console-fixture';
import { bearer, chatBody, request } from '../helpers/http';

const PASSWORD = 'a rotating owner password';
const chat = async (key: string) => (await request(f.gw.url, { ca: f.gw.ca, headers: bearer(key), body: chatBody() })).status;

const f = consoleFixture();
const admin = f.admin;

for (const [size, viewport] of [['desktop', { width: 1280, height: 800 }], ['phone', { width: 390, height: 844 }]] as const) {
  test(`${size}: rotating with a grace keeps the old secret working until the time shown; rotating at once stops it`, async () => {
    const owner = `rotator-${size}@example.com`;
    const account = (await admin<{ id: string }>('POST', '/accounts', { name: `Rotation ${size}` })).id;
    await admin('POST', `/accounts/${account}/members`, { email: owner, role: 'owner', password: PASSWORD });
    const { key: first } = await admin<{ key: string }>('POST', '/keys', { name: `rotated-${size}`, account });
    // And a key that expires in three and a half days: the Keys tab says so.
    await admin('POST', '/keys', { name: `expiring-${size}`, account, expiresAt: new Date(Date.now() + 3.5 * 86_400_000).toISOString() });
    let win: ConsoleWindow | undefined;
    try {
      win = await openConsoleWindow(f.browser, f.gw.url, viewport);
      const page: Page = win.page;
      await signIn(page, f.gw.url, owner, PASSWORD);
      const row = page.locator(`[data-testid="key-row"][data-key-name="rotated-${size}"]`);
      await row.waitFor();
      await expect(page.locator(`[data-testid="key-row"][data-key-name="expiring-${size}"]`).getByTestId('key-expiring').textContent()).resolves.toBe('expires in 3 days');
      await expect(row.getByTestId('key-expiring').count()).resolves.toBe(0); // no expiry: nothing to say

      await row.getByTestId('key-rotate').click();
      const dialog = page.getByTestId('confirm-dialog');
      await dialog.waitFor();
      await expect(page.getByTestId('confirm-grace').inputValue()).resolves.toBe('0'); // at once, unless chosen
      await page.getByTestId('confirm-grace').selectOption('3600');
      const asked = Date.now();
      await page.getByTestId('confirm-ok').click();
      await page.getByTestId('secret-panel').waitFor();
      const second = (await page.getByTestId('secret-value').textContent())!.trim();
      await expect(page.getByTestId('secret-grace').textContent()).resolves.toMatch(/^The old secret keeps working until .+\.$/);
      await row.getByTestId('key-previous-secret').waitFor();
      const until = Date.parse((await row.getByTestId('key-previous-secret').getAttribute('title'))!);
      expect(until - asked).toBeGreaterThan(3_500_000);
      expect(until - asked).toBeLessThanOrEqual(3_600_000 + 5000);
      expect([await chat(first), await chat(second)]).toEqual([200, 200]);
      if (size === 'phone') {
        await expectNoSidewaysScroll(page);
      }
      await page.getByTestId('secret-done').click();
      await expect(page.getByTestId('secret-grace').textContent()).resolves.toBe(''); // erased with the secret

      await row.getByTestId('key-rotate').click();
      await dialog.waitFor();
      await expect(page.getByTestId('confirm-grace').inputValue()).resolves.toBe('0'); // not the last choice
      await page.getByTestId('confirm-ok').click();
      await page.getByTestId('secret-panel').waitFor();
      const third = (await page.getByTestId('secret-value').textContent())!.trim();
      await expect(page.getByTestId('secret-grace').isVisible()).resolves.toBe(false);
      await row.getByTestId('key-previous-secret').waitFor({ state: 'detached' });
      expect([await chat(first), await chat(second), await chat(third)]).toEqual([401, 401, 200]);
      expect(win.problems).toEqual([]);
      expect(win.refusals).toEqual(['GET /console/api/session 401']); // the page's look for a session before signing in
    } finally {
      await win?.context.close();
    }
  }, 45_000);
}
