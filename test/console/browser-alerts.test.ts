/**
 * The alerts banner in the console, in headless Chromium at desktop and phone sizes, against a real
 * gateway and mock worker: once an account's daily token quota and a key's daily budget pass their
 * thresholds, a signed-in owner sees one line per limit (its highest threshold reached) above the
 * tabs, naming the key by its name; once the key is reported leaked, that comes first; no console
 * error, no sideways scrolling on the phone.
 */
import type { ConsoleWindow } from '../helpers/console-window';
import { consoleFixture, expectNoSidewaysScroll, openSignedIn } from '../helpers/console-fixture';
import { bearer, chatBody, request } from '../helpers/http';
import { eventually } from '../helpers/time';

const PASSWORD = 'an alerted owner password';

const f = consoleFixture({
  quota: { syncMs: 100 },
  prices: { currency: 'EUR', models: { 'mock/*': { inputPerMillion: 1000, outputPerMillion: 1000 } } },
});
const admin = f.admin;

for (const [size, viewport] of [['desktop', { width: 1280, height: 800 }], ['phone', { width: 390, height: 844 }]] as const) {
  test(`${size}: the limits past a threshold are shown above the tabs, one line each`, async () => {
    const owner = `alerted-${size}@example.com`;
    const account = (await admin<{ id: string }>('POST', '/accounts', { name: `Alerts ${size}`, quota: { tokensPerDay: 1000 } })).id;
    await admin('POST', `/accounts/${account}/members`, { email: owner, role: 'owner', password: PASSWORD });
    // 1,000 EUR a million tokens: 0.001 EUR a token, so about 0.60 EUR of a 1.00 EUR budget.
    const { key } = await admin<{ key: string }>('POST', '/keys', { name: `spender-${size}`, account, budget: { perDay: 1 } });
    for (let i = 0; i < 6; i++) expect((await request(f.gw.url, { ca: f.gw.ca, headers: { ...bearer(key), 'x-mock-tokens': '90' }, body: chatBody({ max_tokens: 90 }) })).status).toBe(200);
    await eventually(async () => ((await admin<{ data: Array<{ threshold: number; keyId: string | null }> }>('GET', `/accounts/${account}/alerts`)).data.length >= 2 ? true : undefined), 10_000);
    let win: ConsoleWindow | undefined;
    try {
      win = await openSignedIn(f, viewport, { email: owner, password: PASSWORD });
      const page = win.page;
      await page.getByTestId('alerts-banner').waitFor();
      const lines = await page.getByTestId('alert-item').allTextContents();
      expect(lines).toContainEqual(expect.stringMatching(/^This account has used 50% of its daily token quota: [\d,]+ tokens of 1,000 tokens \(\d{4}-\d{2}-\d{2}, UTC\)\.$/));
      expect(lines).toContainEqual(expect.stringMatching(new RegExp(`^Key “spender-${size}” has used 50% of its daily budget: 0\\.\\d\\d EUR of 1\\.00 EUR`)));
      expect(lines).toHaveLength(2);
      if (size === 'phone') {
        await expectNoSidewaysScroll(page);
      }
      // The key leaks: reported, revoked, and said first.
      await admin('POST', '/keys/leaked', { keys: [key] });
      await page.reload();
      await page.locator('[data-testid="alert-item"][data-kind="leak"]').waitFor();
      expect((await page.getByTestId('alert-item').allTextContents())[0]).toMatch(new RegExp(`^Key “spender-${size}” was found in public on \\d{4}-\\d{2}-\\d{2} and is revoked`));
      await page.getByTestId('sign-out').click();
      await page.getByTestId('signin-view').waitFor();
      await expect(page.getByTestId('alerts-banner').isVisible()).resolves.toBe(false);
      expect(win.problems).toEqual([]);
    } finally {
      await win?.context.close();
    }
  }, 45_000);
}
