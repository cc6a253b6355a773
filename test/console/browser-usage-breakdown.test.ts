/**
 * Usage by model and by end user in the console, in headless Chromium against a real gateway: an
 * owner sees this month's models and end users (digests, the largest first; last month's: none), looks one up by the id
 * the application sends, and downloads the end users as CSV; at a phone's width nothing scrolls
 * sideways. Another account's owner sees none of it, and the API refuses a query field it does not take.
 */
import { endUserDigest } from '../../src/accounts/end-users';
import type { ConsoleWindow } from '../helpers/console-window';
import { consoleFixture, expectNoSidewaysScroll, openSignedIn, sessionCookie } from '../helpers/console-fixture';
import { bearer, chatBody, request } from '../helpers/http';

const PASSWORD = 'a usage breakdown owner password';
const f = consoleFixture({ auth: { createFirstKey: false, lastUsedFlushMs: 100 } });

const cookieOf = (email: string) => sessionCookie(f.gw, email, PASSWORD);

/** An account with an owner, and a key of it that served requests for alice (3, two models) and bob (1). */
async function accountWithUse(name: string) {
  const owner = `${name.toLowerCase().replace(/\W+/g, '-')}@example.com`;
  const account = (await f.admin<{ id: string }>('POST', '/accounts', { name })).id;
  await f.admin('POST', `/accounts/${account}/members`, { email: owner, role: 'owner', password: PASSWORD });
  const { key } = await f.admin<{ key: string }>('POST', '/keys', { name: `${name} key`, account });
  for (const [user, model] of [['alice', 'mock/echo'], ['alice', 'mock/echo'], ['alice', 'mock/other'], ['bob', 'mock/echo']]) {
    expect((await request(f.gw.url, { ca: f.gw.ca, headers: bearer(key), body: chatBody({ user, model }) })).status).toBe(200);
  }
  // One the gateway refuses (no such provider): counted apart, under no model, and never billed.
  expect((await request(f.gw.url, { ca: f.gw.ca, headers: bearer(key), body: chatBody({ user: 'bob', model: 'nope/x' }) })).status).toBe(404);
  return { account, owner };
}

for (const [size, viewport] of [['desktop', { width: 1280, height: 800 }], ['phone', { width: 390, height: 844 }]] as const) {
  test(`${size}: the usage tab shows the models and end users, looks one up by id, and gives the end users as CSV`, async () => {
    const { account, owner } = await accountWithUse(`Breakdown ${size}`);
    const [alice, bob] = ['alice', 'bob'].map((id) => endUserDigest(account, id));
    let win: ConsoleWindow | undefined;
    try {
      win = await openSignedIn(f, viewport, { email: owner, password: PASSWORD, tab: 'usage' });
      const page = win.page;
      // Usage is written every lastUsedFlushMs: refresh until both end users are there.
      const users = page.getByTestId('usage-end-user-row');
      for (let tries = 0; (await users.count()) < 2 && tries < 50; tries++) {
        await page.waitForTimeout(100);
        await page.getByTestId('usage-refresh').click();
      }
      expect(await users.evaluateAll((rows) => rows.map((row) => row.getAttribute('data-end-user')))).toEqual([alice, bob]);
      await expect(users.first().locator('td').first().textContent()).resolves.toBe('3');
      const models = await page.getByTestId('usage-model-row').evaluateAll((rows) => rows.map((row) => [row.getAttribute('data-model'), row.querySelector('td')?.textContent, row.querySelector('[data-testid=refused]')?.textContent]));
      expect(models).toEqual([['mock/echo', '3', '0'], ['mock/other', '1', '0'], ['', '0', '1']]);
      await expect(users.nth(1).getByTestId('refused').textContent()).resolves.toBe('1');

      // Last month: nothing (the requests are this month's); back to this month for the lookup.
      await page.getByTestId('breakdown-month').selectOption('last');
      await page.locator('#usage-by-end-user-body').getByText('No usage in this period.').waitFor();
      await page.getByTestId('breakdown-month').selectOption('this');
      await users.first().waitFor();
      const asked: string[] = [];
      page.on('request', (sent) => asked.push(sent.url()));
      await page.getByTestId('end-user-id').fill('alice');
      await page.getByTestId('end-user-submit').click();
      await page.getByTestId('end-user-model-row').first().waitFor();
      expect(await page.getByTestId('end-user-model-row').evaluateAll((rows) => rows.map((row) => [row.getAttribute('data-model'), row.querySelector('td')?.textContent]))).toEqual([
        ['mock/echo', '2'],
        ['mock/other', '1'],
      ]);
      await page.getByTestId('end-user-id').fill('nobody-here');
      await page.getByTestId('end-user-submit').click();
      await page.getByTestId('end-user-none').waitFor();
      // The ids typed were made into digests in the page: neither left it.
      expect(asked.filter((url) => url.includes('/usage/breakdown'))).toHaveLength(2);
      expect(asked.join(' ')).not.toMatch(/alice|nobody-here/);
      if (size === 'phone') await expectNoSidewaysScroll(page);

      const csvPath = await page.getByTestId('usage-end-users-csv').getAttribute('href');
      const csv = await request(f.gw.url, { ca: f.gw.ca, method: 'GET', path: csvPath!, headers: { cookie: await cookieOf(owner) } });
      expect(csv.status).toBe(200);
      expect(csv.headers['content-type']).toMatch(/^text\/csv/);
      const lines = csv.body.trim().split('\r\n');
      expect(lines[0]).toBe('endUser,requests,refused,promptTokens,completionTokens,cost');
      expect(lines.slice(1).map((line) => line.split(',').slice(0, 2))).toEqual([[alice, '3'], [bob, '1']]);
      expect(csv.body).not.toMatch(/alice|bob/);
      expect(win.problems).toEqual([]);
    } finally {
      await win?.context.close();
    }
  }, 45_000);
}

test("another account's owner sees none of it; a query field the API does not take is refused", async () => {
  const { account } = await accountWithUse('Breakdown seen');
  const stranger = 'breakdown-stranger@example.com';
  const theirs = (await f.admin<{ id: string }>('POST', '/accounts', { name: 'Breakdown stranger' })).id;
  await f.admin('POST', `/accounts/${theirs}/members`, { email: stranger, role: 'owner', password: PASSWORD });
  const cookie = await cookieOf(stranger);
  const ask = (query: string) => request(f.gw.url, { ca: f.gw.ca, method: 'GET', path: `/console/api/usage/breakdown?${query}`, headers: { cookie } });
  expect((await ask('by=endUser')).json<{ data: unknown[] }>().data).toEqual([]);
  expect((await ask(`by=model&endUser=${endUserDigest(account, 'alice')}`)).json<{ data: unknown[] }>().data).toEqual([]);
  const refused = await ask(`by=endUser&accountId=${account}`);
  expect(refused.status).toBe(400);
  expect(refused.json<{ error: { param: string } }>().error.param).toBe('accountId');
});
