/**
 * The account console in a real browser (headless Chromium through playwright-core), against a real
 * gateway and mock worker, at desktop (1280×800) and phone (375×667) sizes: signing in (and a wrong
 * password refused), creating a key (copied with the Copy button, the clipboard read back and the key
 * used), editing, rotating and revoking it (confirmed in the page's own dialog), inviting a member
 * (the one-time link opened in another browser, the password set, the member signed in), usage (the
 * chart, the totals, the CSV), the audit trail, signing out (the old session refused) and signing out
 * everywhere (a session on another device ends too). The page
 * runs under its strict CSP: any console error (a CSP violation among them) or page error fails it.
 * Screenshots of each screen go to artifacts/console/.
 */
import { mkdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { chromium, type Browser, type Locator, type Page } from 'playwright-core';
import { displayPrefix } from '../../src/auth/keys';
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { openConsoleWindow, type ConsoleWindow } from '../helpers/console-window';
import { bearer, chatBody, request } from '../helpers/http';
import { startWorker, type WorkerProcess } from '../helpers/processes';
import { sleep } from '../helpers/time';

/** The few browser globals the functions run in the page use (the project's tsconfig has no DOM library). */
declare const document: {
  documentElement: { scrollWidth: number; outerHTML: string };
  getElementById(id: string): { textContent: string | null } | null;
  querySelector(selector: string): { textContent: string | null } | null;
  addEventListener(type: 'securitypolicyviolation', listener: (event: { violatedDirective: string; blockedURI: string }) => void): void;
};
declare const window: { innerWidth: number };
declare const navigator: { clipboard: { writeText(text: string): Promise<void>; readText(): Promise<string> } };

const TOKEN = 'admin-token-for-the-console-browser-test';
const PASSWORD = 'correct horse battery staple';
const MEMBER_PASSWORD = 'a member password that is long';
const ARTIFACTS = path.join(__dirname, '..', '..', 'artifacts', 'console');
const CHROMIUM = '/usr/bin/chromium';
const STEP_MS = 45_000;

let worker: WorkerProcess;
let gw: TestGateway;
let browser: Browser;

const admin = async <T = { id: string }>(method: string, apiPath: string, body?: unknown): Promise<T> => {
  const response = await request(gw.adminUrl, {
    method,
    path: `/admin/api${apiPath}`,
    headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status >= 300) throw new Error(`${method} ${apiPath}: ${response.status} ${response.body}`);
  return response.json<T>();
};

/** Successful chat requests' usage, as the worker reported it, per key id. */
const sent = new Map<string, { requests: number; promptTokens: number; completionTokens: number }>();

async function chat(key: string, keyId?: string): Promise<number> {
  const response = await request(gw.url, { ca: gw.ca, headers: bearer(key), body: chatBody() });
  if (response.status === 200 && keyId) {
    const usage = response.json<{ usage: { prompt_tokens: number; completion_tokens: number } }>().usage;
    const tally = sent.get(keyId) ?? { requests: 0, promptTokens: 0, completionTokens: 0 };
    tally.requests += 1;
    tally.promptTokens += usage.prompt_tokens;
    tally.completionTokens += usage.completion_tokens;
    sent.set(keyId, tally);
  }
  return response.status;
}

const consoleApi = (cookie: string, apiPath: string) =>
  request(gw.url, { ca: gw.ca, method: 'GET', path: `/console/api${apiPath}`, headers: { cookie, origin: `https://${new URL(gw.url).host}` } });

beforeAll(async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  [worker, browser] = await Promise.all([
    startWorker(),
    chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'] }),
  ]);
  gw = await startTestGateway({
    providers: { mock: { workers: [worker.url] } },
    admin: { host: '127.0.0.1', port: 0, token: TOKEN },
    auth: { createFirstKey: false, lastUsedFlushMs: 100 },
  });
}, 30_000);

afterAll(async () => {
  await browser?.close();
  await gw?.stop();
  await worker?.stop();
});

/** A browser window for one person: its own cookies, the clipboard allowed, every problem it logs kept. */
type Window = ConsoleWindow;

// A download the test does not keep reading may be cut short; nothing else should fail.
const openWindow = (viewport: { width: number; height: number }) => openConsoleWindow(browser, gw.url, viewport, (url) => url.pathname.endsWith('/usage.csv'));

/** The locator's text once it is `text`, or its last text after a bound (the page updates after its answers come). */
async function settledText(locator: Locator, text: string, bound = 10_000): Promise<string | null> {
  const until = Date.now() + bound;
  for (;;) {
    const now = await locator.textContent();
    if (now === text || Date.now() > until) return now;
    await sleep(50);
  }
}

const SIZES = [
  { size: 'desktop', viewport: { width: 1280, height: 800 } },
  { size: 'phone', viewport: { width: 375, height: 667 } },
] as const;

describe.each(SIZES)('the console at $size size ($viewport.width×$viewport.height)', ({ size, viewport }) => {
  const owner = `owner-${size}@example.com`;
  const newcomer = `newcomer-${size}@example.com`;
  const keyName = `ci-${size} <i>tools</i>`;
  const usageKeyName = `usage-${size}`;
  let accountId: string;
  let sideAccountId: string | undefined;
  let win: Window;
  let page: Page;
  let key: string;
  let keyId: string;
  let rotated: string;
  let passwordLink: string;
  let usageKey: string;

  const shot = async (name: string, target: Page = page) => {
    await target.screenshot({ path: path.join(ARTIFACTS, `${size}-${name}.png`), fullPage: true });
    if (size === 'phone') {
      const widths = await target.evaluate(() => ({ scroll: document.documentElement.scrollWidth, inner: window.innerWidth }));
      expect({ screen: name, ...widths, scrollsSideways: widths.scroll > widths.inner }).toEqual({ screen: name, ...widths, scrollsSideways: false });
    }
  };
  const row = (name: string, target: Page = page) => target.locator(`[data-testid="key-row"][data-key-name="${name.replace(/"/g, '\\"')}"]`);
  const secretShown = async () => {
    const panel = page.getByTestId('secret-panel');
    await panel.waitFor({ state: 'visible' });
    await expect(panel.textContent()).resolves.toContain('will not be shown again');
    return (await page.getByTestId('secret-value').textContent())!.trim();
  };
  const copyAndRead = async (button: 'secret-copy' | 'invite-copy') => {
    const said = page.locator(`#${button}-state`);
    await page.evaluate((id) => {
      document.getElementById(id)!.textContent = '';
      return navigator.clipboard.writeText('nothing copied yet');
    }, `${button}-state`);
    await page.getByTestId(button).click();
    await page.waitForFunction((id) => document.getElementById(id)?.textContent === 'Copied to the clipboard.', `${button}-state`);
    expect(await said.isVisible()).toBe(true);
    return page.evaluate(() => navigator.clipboard.readText());
  };
  const signInForm = (target: Page = page) => target.getByTestId('signin-form');
  const createForm = () => page.getByTestId('key-form');
  /** Reloads the keys (by going to another tab and back) until `check` holds. */
  const keysUntil = async (check: () => Promise<boolean>) => {
    const until = Date.now() + 5000;
    while (!(await check())) {
      if (Date.now() > until) throw new Error('the keys never showed what was expected');
      await page.waitForTimeout(100);
      await page.getByTestId('tab-members').click();
      await page.getByTestId('tab-keys').click();
    }
  };
  const pageHolds = (text: string) => page.evaluate((secret) => document.documentElement.outerHTML.includes(secret), text);

  beforeAll(async () => {
    accountId = (await admin('POST', '/accounts', { name: `Team ${size}` })).id;
    await admin('POST', `/accounts/${accountId}/members`, { email: owner, role: 'owner', password: PASSWORD });
    if (size === 'desktop') {
      // A second account, so the account switcher shows.
      sideAccountId = (await admin('POST', '/accounts', { name: 'Side project' })).id;
      await admin('POST', `/accounts/${sideAccountId}/members`, { email: owner, role: 'member', password: PASSWORD });
    }
    win = await openWindow(viewport);
    page = win.page;
  }, 30_000);

  afterAll(async () => {
    await win?.context.close();
  });

  test('1. signing in: a wrong password is refused with its message, the right one opens the console', async () => {
    await page.goto(`${gw.url}/console/`);
    await page.getByTestId('signin-view').waitFor();
    await expect(signInForm().getByLabel('Email').isVisible()).resolves.toBe(true);
    await shot('01-sign-in');

    await signInForm().getByLabel('Email').fill(owner);
    await signInForm().getByLabel('Password').fill('not the password at all');
    await page.getByTestId('signin-submit').click();
    const refused = page.getByTestId('signin-error');
    await refused.waitFor();
    await expect(refused.textContent()).resolves.toBe('The email or the password is not right.');
    await expect(page.getByTestId('app-view').isVisible()).resolves.toBe(false);
    await shot('02-sign-in-refused');

    await signInForm().getByLabel('Password').fill(PASSWORD);
    await page.getByTestId('signin-submit').click();
    await page.getByTestId('app-view').waitFor();
    await expect(page.getByTestId('signed-in-email').textContent()).resolves.toBe(owner);
    await page.getByTestId('keys-empty').waitFor();

    if (sideAccountId) {
      // Two accounts: the switcher, and the keys of the one chosen.
      const switcher = page.getByTestId('account-switcher');
      await switcher.waitFor();
      await switcher.selectOption(sideAccountId);
      await page.getByTestId('tab-audit').waitFor({ state: 'hidden' }); // a member there
      await page.getByTestId('keys-role-note').waitFor();
      await shot('03-account-switcher');
      await switcher.selectOption(accountId);
      await page.getByTestId('tab-audit').waitFor();
      await expect(switcher.inputValue()).resolves.toBe(accountId);
    } else {
      await expect(page.getByTestId('account-name').textContent()).resolves.toContain(`Team ${size}`);
    }
    await shot('03-keys-empty');
  }, STEP_MS);

  test('2. creating a key: shown once, copied by the Copy button, it works; listed without the clear key; edited', async () => {
    await page.getByTestId('new-key-button').click();
    await createForm().getByLabel('Name').fill(keyName);
    await shot('04-create-key-form');
    await page.getByTestId('key-form-submit').click();
    key = await secretShown();
    expect(key).toMatch(/^cgk_[A-Za-z0-9]{49}$/);
    await expect(page.getByTestId('keys-table').textContent()).resolves.not.toContain(key);
    await shot('05-key-created');

    expect(await copyAndRead('secret-copy')).toBe(key);
    keyId = (await row(keyName).getAttribute('data-key-id'))!;
    expect(keyId).toMatch(/^key_/);
    expect(await chat(key, keyId)).toBe(200);

    await page.getByTestId('secret-done').click();
    await page.getByTestId('secret-panel').waitFor({ state: 'hidden' });
    expect(await pageHolds(key)).toBe(false);
    const listed = row(keyName);
    // The name is text (its markup is not made into elements); the key shows as its prefix only.
    await expect(listed.getByTestId('key-name').textContent()).resolves.toBe(keyName);
    await expect(listed.locator('i').count()).resolves.toBe(0);
    await expect(listed.getByTestId('key-prefix').textContent()).resolves.toBe(`${displayPrefix(key)}…`);
    await expect(listed.getByTestId('key-status').textContent()).resolves.toBe('active');
    await expect(listed.getByTestId('key-created-by').textContent()).resolves.toBe(`by ${owner}`);
    await expect(listed.getByTestId('key-models').textContent()).resolves.toBe('all');

    // Editing: models, endpoints, client addresses and a limit.
    await listed.getByTestId('key-edit').click();
    const dialog = page.getByTestId('key-dialog');
    await dialog.waitFor();
    await dialog.getByLabel('Allowed models').fill('mock/*, other/model');
    await dialog.getByLabel('Requests / minute').fill('120');
    await dialog.getByTestId('key-form-endpoint-chat').check();
    await dialog.getByLabel('Allowed client addresses').fill('127.0.0.0/8, 2001:DB8::/32');
    const expiryYear = new Date().getUTCFullYear() + 1;
    await dialog.getByLabel('Expires on (UTC)').fill(`${expiryYear}-01-31`);
    await shot('06-edit-key');
    await dialog.getByTestId('key-form-submit').click();
    await dialog.waitFor({ state: 'hidden' });
    expect(await settledText(row(keyName).getByTestId('key-models'), 'mock/*, other/model')).toBe('mock/*, other/model');
    await page.waitForFunction((id) => document.querySelector(`[data-key-id="${id}"]`)?.textContent?.includes('120 req/min'), keyId);
    await expect(row(keyName).getByTestId('key-endpoints').textContent()).resolves.toBe('only chat');
    await expect(row(keyName).getByTestId('key-allowed-ips').textContent()).resolves.toBe('from 127.0.0.0/8, 2001:db8::/32');
    await expect(row(keyName).getByTestId('key-expires').textContent()).resolves.toBe(`Jan 31, ${expiryYear} (UTC)`);
    // The last use is written within lastUsedFlushMs: the list shows it once reloaded.
    await keysUntil(async () => (await row(keyName).getByTestId('key-last-used').textContent()) !== 'never');
    expect(await chat(key, keyId)).toBe(200);

    // A budget: listed with the key; with no price table here, what its requests cost cannot be
    // counted, so they are refused (403 model_not_priced) until it is cleared.
    await row(keyName).getByTestId('key-edit').click();
    await dialog.waitFor();
    await dialog.getByLabel('Budget / day').fill('2.5');
    await dialog.getByTestId('key-form-submit').click();
    await dialog.waitFor({ state: 'hidden' });
    await page.waitForFunction((id) => document.querySelector(`[data-key-id="${id}"]`)?.textContent?.includes('budget 2.50/day'), keyId);
    expect(await chat(key, keyId)).toBe(403);
    await row(keyName).getByTestId('key-edit').click();
    await dialog.waitFor();
    await expect(dialog.getByLabel('Budget / day').inputValue()).resolves.toBe('2.5');
    await dialog.getByLabel('Budget / day').fill('');
    await dialog.getByTestId('key-form-submit').click();
    await dialog.waitFor({ state: 'hidden' });
    await page.waitForFunction((id) => !document.querySelector(`[data-key-id="${id}"]`)?.textContent?.includes('budget'), keyId);
    expect(await chat(key, keyId)).toBe(200);
  }, STEP_MS);

  test('3. rotating the key (confirmed first): the new secret works, the old one gets 401', async () => {
    await row(keyName).getByTestId('key-rotate').click();
    const confirm = page.getByTestId('confirm-dialog');
    await confirm.waitFor();
    await expect(confirm.textContent()).resolves.toContain('stops working');
    await shot('07-rotate-confirm');
    // Cancelling changes nothing.
    await page.getByTestId('confirm-cancel').click();
    await confirm.waitFor({ state: 'hidden' });
    await expect(page.getByTestId('secret-panel').isVisible()).resolves.toBe(false);
    expect(await chat(key, keyId)).toBe(200);

    await row(keyName).getByTestId('key-rotate').click();
    await confirm.waitFor();
    await page.getByTestId('confirm-ok').click();
    rotated = await secretShown();
    expect(rotated).not.toBe(key);
    expect(await copyAndRead('secret-copy')).toBe(rotated);
    await shot('08-key-rotated');
    expect(await chat(rotated, keyId)).toBe(200);
    expect(await chat(key)).toBe(401);
    await page.getByTestId('secret-done').click();
    expect(await pageHolds(rotated)).toBe(false);
    expect(await settledText(row(keyName).getByTestId('key-prefix'), `${displayPrefix(rotated)}…`)).toBe(`${displayPrefix(rotated)}…`);
  }, STEP_MS);

  test('4. revoking the key (confirmed first): it gets 401 and shows as revoked', async () => {
    await row(keyName).getByTestId('key-revoke').click();
    const confirm = page.getByTestId('confirm-dialog');
    await confirm.waitFor();
    await expect(page.getByTestId('confirm-text').textContent()).resolves.toContain('cannot be undone');
    await page.getByTestId('confirm-ok').click();
    await confirm.waitFor({ state: 'hidden' });
    await page.waitForFunction((id) => document.querySelector(`[data-key-id="${id}"] [data-testid="key-status"]`)?.textContent === 'revoked', keyId);
    expect(await chat(rotated)).toBe(401);
    await expect(row(keyName).getByTestId('key-rotate').count()).resolves.toBe(0);

    // A second key, for the member to see and for usage.
    await page.getByTestId('new-key-button').click();
    await createForm().getByLabel('Name').fill(usageKeyName);
    await createForm().getByLabel('Allowed models').fill('mock/*');
    await page.getByTestId('key-form-submit').click();
    usageKey = await secretShown();
    await page.getByTestId('secret-done').click();
    await row(usageKeyName).waitFor();
    await shot('09-keys');
  }, STEP_MS);

  test('5. inviting a member: the one-time link, opened in their browser, sets a password; they sign in and see the keys', async () => {
    await page.getByTestId('tab-members').click();
    await page.locator(`[data-testid="member-row"][data-email="${owner}"]`).waitFor();
    const invite = page.getByTestId('invite-form');
    await invite.getByLabel('Email').fill(newcomer);
    await invite.getByLabel('Role').selectOption('member');
    await page.getByTestId('invite-submit').click();
    await page.getByTestId('invite-panel').waitFor();
    passwordLink = (await page.getByTestId('invite-link').textContent())!;
    expect(passwordLink).toMatch(new RegExp(`^${gw.url.replace(/[.]/g, '\\.')}/console/#set-password=[A-Za-z0-9_-]+$`));
    expect(await copyAndRead('invite-copy')).toBe(passwordLink);
    await page.locator(`[data-testid="member-row"][data-email="${newcomer}"]`).waitFor();
    await shot('10-members-invited');

    const theirs = await openWindow(viewport);
    try {
      const them = theirs.page;
      await them.goto(passwordLink);
      await them.getByTestId('set-password-view').waitFor();
      await them.getByLabel('New password').fill('too short');
      await them.getByLabel('Repeat the password').fill('too short');
      await them.getByTestId('set-password-submit').click();
      await expect(them.getByTestId('set-password-error').textContent()).resolves.toContain('at least 12 characters');
      await them.getByLabel('New password').fill(MEMBER_PASSWORD);
      await them.getByLabel('Repeat the password').fill(MEMBER_PASSWORD);
      await shot('11-set-password', them);
      await them.getByTestId('set-password-submit').click();
      await them.getByTestId('signin-view').waitFor();
      expect(new URL(them.url()).hash).toBe('');
      await expect(signInForm(them).getByLabel('Email').inputValue()).resolves.toBe(newcomer);
      await signInForm(them).getByLabel('Password').fill(MEMBER_PASSWORD);
      await them.getByTestId('signin-submit').click();
      await them.getByTestId('app-view').waitFor();
      await expect(them.getByTestId('signed-in-email').textContent()).resolves.toBe(newcomer);
      await row(usageKeyName, them).waitFor();
      await row(keyName, them).waitFor();
      // A member: the owner's keys are theirs to see, not to change; no audit trail.
      await expect(row(usageKeyName, them).getByTestId('key-rotate').count()).resolves.toBe(0);
      await expect(them.getByTestId('tab-audit').isVisible()).resolves.toBe(false);
      await expect(them.getByTestId('keys-role-note').isVisible()).resolves.toBe(true);
      await shot('12-member-keys', them);
      expect(theirs.problems).toEqual([]);
      expect(theirs.refusals).toEqual([]);
    } finally {
      await theirs.context.close();
    }
    // The link is spent.
    const again = await request(gw.url, { ca: gw.ca, method: 'POST', path: '/console/api/password', headers: { origin: `https://${new URL(gw.url).host}`, 'content-type': 'application/json' }, body: JSON.stringify({ token: passwordLink.split('#set-password=')[1], password: 'another long password' }) });
    expect(again.status).toBe(400);
    await page.getByTestId('invite-done').click();
    expect(await pageHolds(passwordLink)).toBe(false);
  }, STEP_MS);

  test('6. usage: the chart, per day and per key, the right totals, and the CSV', async () => {
    const usageKeyId = (await row(usageKeyName).getAttribute('data-key-id'))!;
    for (let i = 0; i < 3; i++) expect(await chat(usageKey, usageKeyId)).toBe(200);
    // One the gateway refuses itself (no messages): shown as refused, not among the requests (with
    // the key's request refused under its budget in step 2).
    expect((await request(gw.url, { ca: gw.ca, headers: bearer(usageKey), body: JSON.stringify({ model: 'mock/echo' }) })).status).toBe(400);
    const mine = [sent.get(keyId)!, sent.get(usageKeyId)!];
    const expected = {
      requests: mine.reduce((n, t) => n + t.requests, 0),
      promptTokens: mine.reduce((n, t) => n + t.promptTokens, 0),
      completionTokens: mine.reduce((n, t) => n + t.completionTokens, 0),
      refused: 2,
    };
    expect(expected.requests).toBe(sent.get(keyId)!.requests + 3);
    const digits = (text: string | null) => Number((text ?? '').replace(/[^\d]/g, ''));
    const totals = async () => ({
      requests: digits(await page.getByTestId('total-requests').textContent()),
      promptTokens: digits(await page.getByTestId('total-prompt').textContent()),
      completionTokens: digits(await page.getByTestId('total-completion').textContent()),
      refused: digits(await page.getByTestId('stat-refused').textContent()),
    });

    await page.getByTestId('tab-usage').click();
    // Usage is written every 100 ms (a request is counted when admitted, its tokens once its answer is read): refresh until all of it is there.
    const until = Date.now() + 10_000;
    for (;;) {
      await page.locator('#usage-refresh:not([disabled])').waitFor();
      const shown = await totals();
      if (JSON.stringify(shown) === JSON.stringify(expected) || Date.now() > until) {
        expect(shown).toEqual(expected);
        break;
      }
      await page.waitForTimeout(150);
      await page.getByTestId('usage-refresh').click();
    }
    await expect(page.getByTestId('total-tokens').textContent()).resolves.toBe((expected.promptTokens + expected.completionTokens).toLocaleString('en-US'));
    await expect(page.getByTestId('stat-requests').textContent()).resolves.toBe(String(expected.requests));
    await expect(page.getByTestId('stat-cost').textContent()).resolves.toBe('0.00 USD'); // no price table here: nothing costs
    await expect(page.getByTestId('stat-budget').textContent()).resolves.toBe('none'); // nor has the account a budget

    const today = new Date().toISOString().slice(0, 10);
    // 30 days: today's with the usage; the 29 idle days before it are one row in the table, zeros in the chart.
    await expect(page.getByTestId('usage-row').count()).resolves.toBe(1);
    const todayRow = page.locator(`[data-testid="usage-row"][data-date="${today}"]`);
    await expect(todayRow.locator('td').first().textContent()).resolves.toBe(String(expected.requests));
    const monthAgo = new Date(Date.now() - 29 * 86_400_000).toISOString().slice(0, 10);
    const yesterday = new Date(Date.now() - 86_400_000).toISOString().slice(0, 10);
    await expect(page.locator(`[data-testid="usage-idle-row"][data-from="${monthAgo}"]`).getAttribute('data-to')).resolves.toBe(yesterday);
    const tokensChart = page.locator('#tokens-chart svg');
    await expect(tokensChart.locator('g.day').count()).resolves.toBe(30);
    await expect(tokensChart.locator(`g.day[data-date="${today}"]`).getAttribute('data-total')).resolves.toBe(String(expected.promptTokens + expected.completionTokens));
    await expect(tokensChart.locator(`g.day[data-date="${today}"] rect.bar`).count()).resolves.toBe(2); // prompt and completion, stacked
    await expect(tokensChart.locator(`g.day[data-date="${monthAgo}"] rect.bar`).count()).resolves.toBe(0);
    const height = Number(await tokensChart.locator(`g.day[data-date="${today}"] rect.bar-prompt`).getAttribute('height'));
    expect(height).toBeGreaterThan(10);
    await expect(page.locator(`#requests-chart svg g.day[data-date="${today}"]`).getAttribute('data-total')).resolves.toBe(String(expected.requests));
    await expect(page.locator(`[data-testid="usage-key-row"][data-key-id="${usageKeyId}"] td`).first().textContent()).resolves.toBe('3');
    await shot('13-usage');

    // One key.
    await page.getByTestId('usage-key').selectOption(usageKeyId);
    await page.waitForFunction(() => document.querySelector('[data-testid="total-requests"]')?.textContent === '3');
    const forKey = sent.get(usageKeyId)!;
    expect(await totals()).toEqual({ requests: 3, promptTokens: forKey.promptTokens, completionTokens: forKey.completionTokens, refused: 1 }); // the refused one was this key's
    await shot('14-usage-one-key');

    // The CSV: a plain link, downloaded by the browser with the session cookie.
    const link = page.getByTestId('usage-csv');
    expect(new URL((await link.getAttribute('href'))!, gw.url).pathname).toBe('/console/api/usage.csv');
    await expect(link.getAttribute('download')).resolves.toBe('');
    const [download] = await Promise.all([page.waitForEvent('download'), link.click()]);
    expect(download.suggestedFilename()).toMatch(/^usage-Team_.+\.csv$/);
    const csv = readFileSync((await download.path())!, 'utf8');
    expect(csv.split('\r\n')[0]).toBe('date,keyId,keyName,requests,promptTokens,completionTokens,refused,cost');
    expect(csv).toContain(`${today},${usageKeyId},${usageKeyName},3,${forKey.promptTokens},${forKey.completionTokens}`);
  }, STEP_MS);

  test('7. the audit trail: the key made, rotated and revoked, the member added', async () => {
    await page.getByTestId('tab-audit').click();
    await page.locator('[data-testid="audit-row"][data-action="member.added"]').first().waitFor();
    const actions = await page.getByTestId('audit-action').allTextContents();
    expect(actions).toEqual(expect.arrayContaining(['key.created', 'key.rotated', 'key.revoked', 'member.added', 'session.created']));
    const created = page.locator('[data-testid="audit-row"][data-action="key.created"]').filter({ hasText: keyId });
    await expect(created.textContent()).resolves.toContain(owner);
    await expect(created.textContent()).resolves.toContain(keyName);
    expect(await pageHolds(key)).toBe(false);
    expect(await pageHolds(rotated)).toBe(false);
    await shot('15-audit');
  }, STEP_MS);

  test('8. signing out: the sign-in form again, and the old session is refused', async () => {
    const cookie = (await win.context.cookies(`${gw.url}/console/`)).find((c) => c.name === '__Host-chatgate_session');
    expect(cookie).toBeDefined();
    const session = `__Host-chatgate_session=${cookie!.value}`;
    expect((await consoleApi(session, '/keys')).status).toBe(200);
    await page.getByTestId('sign-out').click();
    await page.getByTestId('signin-view').waitFor();
    await expect(page.getByTestId('session-bar').isVisible()).resolves.toBe(false);
    // Nothing of the account is left in the page.
    await expect(page.locator('#keys-body').textContent()).resolves.toBe('');
    expect(await pageHolds(usageKeyName)).toBe(false);
    const refused = await consoleApi(session, '/keys');
    expect(refused.status).toBe(401);
    expect(refused.json().error.code).toBe('not_signed_in');
    expect((await win.context.cookies(`${gw.url}/console/`)).find((c) => c.name === '__Host-chatgate_session')).toBeUndefined();
    await shot('16-signed-out');
  }, STEP_MS);

  test('9. signing out everywhere: a session on another device ends too', async () => {
    await signInForm().getByLabel('Email').fill(owner);
    await signInForm().getByLabel('Password').fill(PASSWORD);
    await page.getByTestId('signin-submit').click();
    await page.getByTestId('app-view').waitFor();
    // The same person signed in elsewhere (another device: the API, its own cookie).
    const elsewhere = await request(gw.url, {
      ca: gw.ca,
      method: 'POST',
      path: '/console/api/session',
      headers: { 'content-type': 'application/json', origin: `https://${new URL(gw.url).host}` },
      body: JSON.stringify({ email: owner, password: PASSWORD }),
    });
    expect(elsewhere.status).toBe(200);
    const other = String(elsewhere.headers['set-cookie']).split(';')[0]!;
    expect((await consoleApi(other, '/keys')).status).toBe(200);
    await shot('17-before-sign-out-everywhere');
    await page.getByTestId('sign-out-everywhere').click();
    await page.getByTestId('signin-view').waitFor();
    await expect(page.getByTestId('banner').textContent()).resolves.toContain('signed out everywhere');
    expect((await consoleApi(other, '/keys')).status).toBe(401);
    expect((await win.context.cookies(`${gw.url}/console/`)).find((c) => c.name === '__Host-chatgate_session')).toBeUndefined();
  }, STEP_MS);

  test('no console errors (no CSP violation among them), and only the refusals the steps asked for', () => {
    expect(win.problems).toEqual([]);
    expect(win.refusals).toEqual(['GET /console/api/session 401', 'POST /console/api/session 401']);
  });
});
