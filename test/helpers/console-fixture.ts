/// <reference lib="dom" />
/**
 * The setup of the console's shorter Chromium tests in one call: a mock worker, a gateway with an
 * admin token (plus any settings given), headless Chromium; the admin API as a function; signing a
 * person in through the page (in a window of its own, on a tab: openSignedIn); and the phone's rule
 * that nothing scrolls sideways.
 */
import { chromium, type Browser, type Page } from 'playwright-core';
import { openConsoleWindow, type ConsoleWindow } from './console-window';
import { startTestGateway, type TestGateway } from './gateway';
import { request } from './http';
import { startWorker, type WorkerProcess } from './processes';

export interface ConsoleFixture {
  gw: TestGateway;
  browser: Browser;
  /** A call to the admin API; throws on an answer of 300 or above. */
  admin<T = unknown>(method: string, apiPath: string, body?: unknown): Promise<T>;
}

export function consoleFixture(settings: Record<string, unknown> = {}): ConsoleFixture {
  const token = 'admin-token-for-a-console-browser-test';
  let worker: WorkerProcess | undefined;
  const fixture = {
    async admin<T>(method: string, apiPath: string, body?: unknown): Promise<T> {
      const answer = await request(fixture.gw.adminUrl, { method, path: `/admin/api${apiPath}`, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
      if (answer.status >= 300) throw new Error(`${method} ${apiPath}: ${answer.status} ${answer.body}`);
      return answer.json<T>();
    },
  } as ConsoleFixture;
  beforeAll(async () => {
    [worker, fixture.browser] = await Promise.all([startWorker(), chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox', '--disable-gpu', '--no-first-run'] })]);
    fixture.gw = await startTestGateway({ providers: { mock: { workers: [worker.url] } }, admin: { host: '127.0.0.1', port: 0, token }, auth: { createFirstKey: false }, ...settings });
  }, 30_000);
  afterAll(async () => {
    await fixture.browser?.close();
    await fixture.gw?.stop();
    await worker?.stop();
  });
  return fixture;
}

/** A console session signed in through the API (no page): its cookie, `name=value`. */
export async function sessionCookie(gw: TestGateway, email: string, password: string): Promise<string> {
  const answer = await request(gw.url, { ca: gw.ca, path: '/console/api/session', headers: { 'content-type': 'application/json', origin: gw.url }, body: JSON.stringify({ email, password }) });
  expect(answer.status).toBe(200);
  return String(answer.headers['set-cookie']).split(';')[0]!;
}

/** Signs the person in through the page's form, from the console's address. */
export async function signIn(page: Page, origin: string, email: string, password: string): Promise<void> {
  await page.goto(`${origin}/console/`);
  await page.getByTestId('signin-email').fill(email);
  await page.getByTestId('signin-password').fill(password);
  await page.getByTestId('signin-submit').click();
}

/**
 * A window of its own (console-window.ts: its problems kept) at this size, the person signed in
 * through the page's form, and, when named, one of the console's tabs open ('keys', 'members',
 * 'usage', 'audit'). The caller closes it: `await win?.context.close()`.
 */
export async function openSignedIn(
  f: ConsoleFixture,
  viewport: { width: number; height: number },
  person: { email: string; password: string; tab?: 'keys' | 'members' | 'usage' | 'audit' },
  mayFail?: (url: URL) => boolean,
): Promise<ConsoleWindow> {
  const win = await openConsoleWindow(f.browser, f.gw.url, viewport, mayFail);
  try {
    await signIn(win.page, f.gw.url, person.email, person.password);
    await win.page.getByTestId('app-view').waitFor();
    if (person.tab) await win.page.getByTestId(`tab-${person.tab}`).click();
    return win;
  } catch (error) {
    await win.context.close();
    throw error;
  }
}

/** At a phone's width, the page must not scroll sideways. */
export async function expectNoSidewaysScroll(page: Page): Promise<void> {
  const widths = await page.evaluate(() => ({ scroll: document.documentElement.scrollWidth, inner: window.innerWidth }));
  expect(widths.scroll).toBeLessThanOrEqual(widths.inner);
}

/** Signed in as this person (a member), the Members tab shows its table and no element of this test id (an owner's form). */
export async function expectMembersTabWithout(f: ConsoleFixture, email: string, password: string, testId: string): Promise<void> {
  const ctx = await f.browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 1280, height: 800 } });
  try {
    const page = await ctx.newPage();
    await signIn(page, f.gw.url, email, password);
    await page.getByTestId('tab-members').click();
    await page.getByTestId('members-table').waitFor();
    await expect(page.getByTestId(testId).isVisible()).resolves.toBe(false);
  } finally {
    await ctx.close();
  }
}
