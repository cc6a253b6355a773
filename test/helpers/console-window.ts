/// <reference lib="dom" />
/**
 * A browser window on the console for one person, for the Chromium tests: its own cookies, the
 * clipboard allowed, and every problem the page meets kept for the test to check.
 */
import type { Browser, BrowserContext, Page } from 'playwright-core';

export interface ConsoleWindow {
  context: BrowserContext;
  page: Page;
  /** Console errors (CSP violations are logged as errors), page errors, failed loads, answers of 400 and above from anything but the console API. */
  problems: string[];
  /** Console API answers of 400 and above, as "METHOD /path status", to compare with the ones the steps expect. */
  refusals: string[];
}

export async function openConsoleWindow(
  browser: Browser,
  /** The gateway's origin, e.g. https://127.0.0.1:8443 */
  origin: string,
  viewport: { width: number; height: number },
  /** A request the test lets fail (a download it does not read to the end). */
  mayFail: (url: URL) => boolean = () => false,
): Promise<ConsoleWindow> {
  // Self-signed certificates: the gateway's, and an identity provider's if the test runs one.
  const context = await browser.newContext({ viewport, ignoreHTTPSErrors: true, locale: 'en-US', timezoneId: 'UTC' });
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin });
  context.setDefaultTimeout(10_000);
  context.setDefaultNavigationTimeout(10_000);
  const page = await context.newPage();
  const problems: string[] = [];
  const refusals: string[] = [];
  // Reported besides Chromium's own console message, in case a violation is ever not logged.
  await page.addInitScript(() => {
    document.addEventListener('securitypolicyviolation', (event) => console.error(`CSP violation: ${event.violatedDirective} blocked ${event.blockedURI}`));
  });
  const isConsoleApi = (url: URL) => url.origin === origin && url.pathname.startsWith('/console/api/');
  page.on('console', (message) => {
    if (message.type() !== 'error') return;
    const url = message.location().url;
    // The browser logs every API answer of 400 and above as an error: those are checked as refusals.
    if (/^Failed to load resource: the server responded with a status of 4\d\d/.test(message.text()) && url.startsWith(`${origin}/console/api/`)) return;
    problems.push(`${message.text()} (${url})`);
  });
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  page.on('response', (response) => {
    if (response.status() < 400) return;
    const url = new URL(response.url());
    if (isConsoleApi(url)) refusals.push(`${response.request().method()} ${url.pathname} ${response.status()}`);
    else problems.push(`${response.status()} for ${url.origin}${url.pathname}`);
  });
  page.on('requestfailed', (failed) => {
    const url = new URL(failed.url());
    if (!mayFail(url)) problems.push(`request failed: ${url.origin}${url.pathname} ${failed.failure()?.errorText}`);
  });
  return { context, page, problems, refusals };
}
