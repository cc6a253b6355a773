/**
 * A workload identity's use in the console (headless Chromium, a real gateway): it is no key of the
 * list, and its row on the Usage tab is named by its subject, marked as a workload, its id beneath.
 */
import { workloadKeyId } from '../../src/auth/workload-identity';
import { openConsoleWindow, type ConsoleWindow } from '../helpers/console-window';
import { consoleFixture, signIn } from '../helpers/console-fixture';

const PASSWORD = 'a workload usage owner password';
const f = consoleFixture();

test("a workload's use is shown under its subject", async () => {
  const account = (await f.admin<{ id: string }>('POST', '/accounts', { name: 'Workloads' })).id;
  await f.admin('POST', `/accounts/${account}/members`, { email: 'workload-owner@example.com', role: 'owner', password: PASSWORD });
  const subject = 'system:serviceaccount:ci:runner';
  const keyId = workloadKeyId('https://kubernetes.default.svc', account, subject);
  const now = new Date();
  await f.gw.store.recordUse([{ keyId, accountId: account, date: now.toISOString().slice(0, 10), at: now, requests: 3, refused: 0, costNanos: 0, promptTokens: 30, completionTokens: 12, model: 'mock/test-model', endUser: '' }]);
  let win: ConsoleWindow | undefined;
  try {
    win = await openConsoleWindow(f.browser, f.gw.url, { width: 1280, height: 800 });
    await signIn(win.page, f.gw.url, 'workload-owner@example.com', PASSWORD);
    await win.page.getByTestId('tab-usage').click();
    const row = win.page.locator(`[data-testid="usage-key-row"][data-key-id="${keyId}"]`);
    await row.waitFor();
    await expect(row.locator('th span').first().textContent()).resolves.toBe(`${subject} (workload)`);
    await expect(row.locator('th .sub').textContent()).resolves.toBe(keyId);
    await expect(row.locator('td').first().textContent()).resolves.toBe('3');
    expect(win.problems).toEqual([]);
  } finally {
    await win?.context.close();
  }
}, 45_000);
