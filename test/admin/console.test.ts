/**
 * The key console as a person uses it, in headless Chromium (Debian's, driven by playwright-core):
 * sign in, create a key, use it for a real chat completion, revoke it, see the next request refused.
 * A screenshot of the key list is saved under artifacts/ (git-ignored).
 */
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { chromium, type Browser } from 'playwright-core';
import { gatewayWithWorker } from '../helpers/fixture';
import { bearer, chatBody, request } from '../helpers/http';

const TOKEN = 'console-admin-token-0123456789';
const ARTIFACTS = path.join(__dirname, '..', '..', 'artifacts');
const f = gatewayWithWorker({ admin: { host: '127.0.0.1', port: 0, token: TOKEN } });
let browser: Browser;

beforeAll(async () => {
  browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
});
afterAll(() => browser?.close());

test('sign in, create a key, use it, revoke it, and the next request is refused', async () => {
  const page = await browser.newPage();
  page.on('dialog', (dialog) => void dialog.accept()); // the revoke confirmation
  await page.goto(`${f.gw.adminUrl}/admin/`);

  await page.getByLabel('Admin token').fill('not the token at all');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByText('That admin token is not right.').waitFor();

  await page.getByLabel('Admin token').fill(TOKEN);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'API keys' }).waitFor();

  await page.getByLabel('Name').fill('from the console');
  await page.getByLabel('Allowed models').fill('mock/*');
  await page.getByRole('button', { name: 'Create key' }).click();
  await page.locator('#new-key').waitFor();
  const key = (await page.locator('#new-key-value').textContent())!.trim();
  expect(key).toMatch(/^cgk_[A-Za-z0-9_-]{43}$/);
  const row = page.locator('#keys tbody tr', { hasText: 'from the console' });
  await row.waitFor();
  await expect(row.locator('td').nth(4).textContent()).resolves.toBe('active');
  await expect(row.locator('td').nth(5).textContent()).resolves.toBe('mock/*');

  const answer = await request(f.gw.url, { ca: f.gw.ca, headers: bearer(key), body: chatBody() });
  expect(answer.status).toBe(200);

  mkdirSync(ARTIFACTS, { recursive: true });
  await page.screenshot({ path: path.join(ARTIFACTS, 'console-keys.png'), fullPage: true });
  expect(await page.content()).not.toContain(f.key); // other keys are never shown

  await row.getByRole('button', { name: 'Revoke key from the console' }).click();
  await page.getByText('Revoked "from the console".').waitFor();
  await row.getByText('revoked').waitFor();
  await expect(row.locator('td').nth(4).textContent()).resolves.toBe('revoked');

  const refused = await request(f.gw.url, { ca: f.gw.ca, headers: bearer(key), body: chatBody() });
  expect(refused.status).toBe(401);
  expect(refused.json().error.code).toBe('invalid_api_key');

  // The key was shown once; after a reload it is gone from the page.
  await page.reload();
  await page.getByRole('heading', { name: 'API keys' }).waitFor();
  expect(await page.content()).not.toContain(key);
  await page.close();
});
