/// <reference lib="dom" />
/**
 * What a new person's walk through the console met, in headless Chromium against a real gateway, at
 * desktop (1280×800) and phone (390×844) sizes: the Usage tab's tables scroll sideways in their own
 * box, the hidden side faded, no cell cut and the page never wider than the window; idle days are
 * one row per run, not rows of zeros, and the totals are the same; the page says how often its
 * figures are updated; the key dialog, full of fields, keeps Save in the window; a used or made-up
 * set-password link is reported as the page opens, before any password is typed. Screenshots go to
 * artifacts/console-walk/.
 */
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import type { Page } from 'playwright-core';
import { openConsoleWindow, type ConsoleWindow } from '../helpers/console-window';
import { consoleFixture, expectNoSidewaysScroll, openSignedIn } from '../helpers/console-fixture';

const PASSWORD = 'a walking owner password';
const ARTIFACTS = path.join(__dirname, '..', '..', 'artifacts', 'console-walk');
const DAY_MS = 86_400_000;
// Usage written every 3 s, not the default 10: the page must say what this gateway does.
const f = consoleFixture({ auth: { createFirstKey: false, lastUsedFlushMs: 3000 } });

const VIEWPORTS = [['desktop', { width: 1280, height: 800 }], ['phone', { width: 390, height: 844 }]] as const;
const dayAgo = (days: number) => new Date(Date.now() - days * DAY_MS).toISOString().slice(0, 10);
const shot = (page: Page, name: string) => page.screenshot({ path: path.join(ARTIFACTS, `${name}.png`), fullPage: true });

beforeAll(() => mkdirSync(ARTIFACTS, { recursive: true }));

/** A new account with an owner (by password) and one key: their ids and the owner's email. */
async function ownerWithKey(name: string, keyName: string): Promise<{ account: string; keyId: string; owner: string }> {
  const account = (await f.admin<{ id: string }>('POST', '/accounts', { name })).id;
  const owner = `${name.toLowerCase().replace(/[^a-z0-9]+/g, '-')}@example.com`;
  await f.admin('POST', `/accounts/${account}/members`, { email: owner, role: 'owner', password: PASSWORD });
  const keyId = (await f.admin<{ id: string }>('POST', '/keys', { name: keyName, account })).id;
  return { account, keyId, owner };
}

/** Each usage table's box, as the page lays it out. */
function tableBoxes(page: Page) {
  return page.evaluate(() =>
    Array.from(document.querySelectorAll<HTMLElement>('#panel-usage .table-wrap.scroll')).map((wrap) => {
      const table = wrap.querySelector('table')!;
      return {
        id: table.id,
        boxWidth: wrap.clientWidth,
        scrollWidth: wrap.scrollWidth,
        tableWidth: table.getBoundingClientRect().width,
        boxRight: wrap.getBoundingClientRect().right,
        overflowX: getComputedStyle(wrap).overflowX,
        moreRight: wrap.classList.contains('more-right'),
        // A cell whose text runs past its own edge is cut.
        cutCells: Array.from(table.querySelectorAll<HTMLElement>('th, td')).filter((cell) => cell.scrollWidth > cell.clientWidth + 1).map((cell) => cell.textContent),
      };
    }),
  );
}

for (const [size, viewport] of VIEWPORTS) {
  test(`${size}: usage tables scroll in their own box with a cue; idle days are one row each run; the update interval is said`, async () => {
    const { account, keyId, owner } = await ownerWithKey(`Walk usage ${size}`, `a rather long key name for the ${size} walk`);
    const use = (days: number, requests: number, endUser: string) => ({ keyId, accountId: account, date: dayAgo(days), at: new Date(Date.now() - days * DAY_MS), requests, refused: 0, costNanos: 0, promptTokens: requests * 10, completionTokens: requests * 4, model: 'mock/test-model', endUser });
    // Today's and five days ago; an end user's digest is wide: its table is wider than a phone.
    await f.gw.store.recordUse([use(0, 3, 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'), use(5, 2, '')]);
    let win: ConsoleWindow | undefined;
    try {
      win = await openSignedIn(f, viewport, { email: owner, password: PASSWORD, tab: 'usage' });
      const page = win.page;
      await page.locator('[data-testid="usage-row"]').first().waitFor();
      await page.locator('[data-testid="usage-end-user-row"]').first().waitFor();

      // Two days of use, and two runs of idle days between and before them: four rows, not thirty.
      await expect(page.getByTestId('usage-row').evaluateAll((rows) => rows.map((row) => row.getAttribute('data-date')))).resolves.toEqual([dayAgo(0), dayAgo(5)]);
      const idle = page.getByTestId('usage-idle-row');
      await expect(idle.evaluateAll((rows) => rows.map((row) => [row.getAttribute('data-from'), row.getAttribute('data-to'), row.textContent]))).resolves.toEqual([
        [dayAgo(4), dayAgo(1), `${dayAgo(4)} – ${dayAgo(1)}no use`],
        [dayAgo(29), dayAgo(6), `${dayAgo(29)} – ${dayAgo(6)}no use`],
      ]);
      await expect(page.getByTestId('total-requests').textContent()).resolves.toBe('5');
      await expect(page.getByTestId('total-tokens').textContent()).resolves.toBe('70');
      await expect(page.locator('#tokens-chart svg g.day').count()).resolves.toBe(30); // the chart keeps every day

      const lag = page.getByTestId('usage-lag');
      await expect(lag.isVisible()).resolves.toBe(true);
      await expect(lag.textContent()).resolves.toMatch(/may take up to 4 seconds to show/) // 3 s between flushes, and their spread;

      // Every table can be scrolled to its end inside its box, which stays in the window; no cell is cut;
      // a box with more to its right says so.
      await page.waitForFunction(() => Array.from(document.querySelectorAll<HTMLElement>('#panel-usage .table-wrap.scroll')).every((wrap) => wrap.classList.contains('more-right') === wrap.scrollWidth > wrap.clientWidth + 1));
      const boxes = await tableBoxes(page);
      expect(boxes.map((box) => box.id).sort()).toEqual(['usage-by-end-user', 'usage-by-key', 'usage-by-model', 'usage-table']);
      for (const box of boxes) {
        expect(box.scrollWidth).toBeGreaterThanOrEqual(Math.floor(box.tableWidth));
        expect(box.boxRight).toBeLessThanOrEqual(viewport.width);
        expect(['auto', 'scroll']).toContain(box.overflowX);
        expect([box.id, box.cutCells]).toEqual([box.id, []]);
        expect([box.id, box.moreRight]).toEqual([box.id, box.tableWidth > box.boxWidth + 1]);
      }
      await expectNoSidewaysScroll(page);
      await shot(page, `${size}-usage`);
      if (size === 'phone') {
        // The end users' digests are wider than a phone: that box scrolls, and its cue follows the scroll.
        expect(boxes.find((box) => box.id === 'usage-by-end-user')!.moreRight).toBe(true);
        const wrap = page.locator('#usage-by-end-user').locator('xpath=..');
        await wrap.evaluate((box) => box.scrollTo({ left: box.scrollWidth }));
        await page.waitForFunction(() => document.getElementById('usage-by-end-user')!.parentElement!.classList.contains('more-left'));
        await expect(wrap.evaluate((box) => box.classList.contains('more-right'))).resolves.toBe(false);
      }
      expect(win.problems).toEqual([]);
    } finally {
      await win?.context.close();
    }
  }, 45_000);

  test(`${size}: the key dialog, full of fields, keeps its Save button in the window`, async () => {
    const { owner } = await ownerWithKey(`Walk edit ${size}`, `edited-${size}`);
    let win: ConsoleWindow | undefined;
    try {
      win = await openSignedIn(f, viewport, { email: owner, password: PASSWORD });
      const page = win.page;
      const row = page.locator(`[data-testid="key-row"][data-key-name="edited-${size}"]`);
      await row.getByTestId('key-edit').click();
      await page.getByTestId('key-dialog').waitFor();
      for (const [id, value] of [['models', 'mock/*, other/model-a, other/model-b'], ['allowed-ips', '10.0.0.0/8, 192.168.1.1'], ['expires', '2040-01-31'], ['rpm', '60'], ['tpm', '100000'], ['concurrent', '4'], ['per-day', '500000'], ['per-month', '10000000'], ['budget-day', '5'], ['budget-month', '100']]) {
        await page.getByTestId(`key-form-${id}`).fill(value!);
      }
      for (const endpoint of ['chat', 'embeddings']) await page.getByTestId(`key-form-endpoint-${endpoint}`).check();
      await page.getByTestId('key-form-models').focus(); // at the top of the form, as one starts
      const layout = await page.evaluate(() => {
        const dialog = document.getElementById('key-dialog')!;
        const save = document.getElementById('key-form-submit')!.getBoundingClientRect();
        const top = document.elementFromPoint(save.left + save.width / 2, save.top + save.height / 2);
        return { fieldsHeight: dialog.scrollHeight, saveBottom: save.bottom, saveOnTop: top?.id === 'key-form-submit' || top?.closest('#key-form-submit') !== null, dialogBottom: dialog.getBoundingClientRect().bottom };
      });
      if (size === 'desktop') expect(layout.fieldsHeight).toBeGreaterThan(viewport.height - 32); // the form is taller than the dialog may be
      expect(layout.saveBottom).toBeLessThanOrEqual(viewport.height);
      expect(layout.saveBottom).toBeLessThanOrEqual(layout.dialogBottom);
      expect(layout.saveOnTop).toBe(true); // seen, not under a field
      await shot(page, `${size}-edit-dialog`);
      await expect(page.getByTestId('key-form-submit').textContent()).resolves.toBe('Save');
      await page.getByTestId('key-form-submit').click();
      await page.getByTestId('key-dialog').waitFor({ state: 'hidden' });
      await expect(row.getByTestId('key-models').textContent()).resolves.toBe('mock/*, other/model-a, other/model-b');
      expect(win.problems).toEqual([]);
    } finally {
      await win?.context.close();
    }
  }, 45_000);
}

test('phone: a used or made-up set-password link is reported as the page opens, before any typing; a good one is not', async () => {
  const { account } = await ownerWithKey('Walk link', 'unused');
  const email = 'walk-invitee@example.com';
  await f.admin('POST', `/accounts/${account}/members`, { email, role: 'member' });
  const { path: linkPath } = await f.admin<{ path: string }>('POST', `/accounts/${account}/members/${email}/password-link`);
  let win: ConsoleWindow | undefined;
  try {
    // Leaving the page for the next link may cut its icon's load short: no fault of the page.
    win = await openConsoleWindow(f.browser, f.gw.url, { width: 390, height: 844 }, (url) => url.pathname === '/console/favicon.svg');
    const page = win.page;
    const error = page.getByTestId('set-password-error');

    // A working link: checked, nothing said, and it still sets the password.
    const checked = page.waitForResponse((response) => response.url().endsWith('/console/api/password/check'));
    await page.goto(`${f.gw.url}${linkPath}`);
    await expect((await checked).status()).toBe(200);
    await expect(error.isVisible()).resolves.toBe(false);
    await page.getByTestId('new-password').fill('a password for the walk');
    await page.getByTestId('new-password-again').fill('a password for the walk');
    await page.getByTestId('set-password-submit').click();
    await page.getByTestId('signin-view').waitFor();

    // The same link again, and one never made: said at once, nothing typed.
    for (const link of [linkPath, `/console/#set-password=${'A'.repeat(43)}`]) {
      await page.goto('about:blank');
      await page.goto(`${f.gw.url}${link}`);
      await page.getByTestId('set-password-view').waitFor();
      await error.waitFor();
      await expect(error.textContent()).resolves.toMatch(/^This link is not valid: it was used already, it expired, or it was never made/);
      await expect(page.getByTestId('new-password').inputValue()).resolves.toBe('');
    }
    await shot(page, 'phone-used-link');
    expect(win.problems).toEqual([]);
    expect(win.refusals).toEqual(['POST /console/api/password/check 400', 'POST /console/api/password/check 400']);
  } finally {
    await win?.context.close();
  }
}, 45_000);
