/// <reference lib="dom" />
/**
 * Changing a member's role in the console's Members tab, in headless Chromium against a real
 * gateway, at desktop and phone sizes: the only owner cannot step down (the API's last_owner said in
 * the banner, the control back as it was); an owner makes a member owner; then steps down themself,
 * and the page, told again by the session, shows them as a member without the owners' controls.
 */
import type { ConsoleWindow } from '../helpers/console-window';
import { consoleFixture, expectNoSidewaysScroll, openSignedIn } from '../helpers/console-fixture';

const PASSWORD = 'a role changing owner password';
const f = consoleFixture();

interface Member {
  email: string;
  role: string;
}

for (const [size, viewport] of [['desktop', { width: 1280, height: 800 }], ['phone', { width: 390, height: 844 }]] as const) {
  test(`${size}: an owner changes roles in the members table; the last owner stays one`, async () => {
    const account = (await f.admin<{ id: string }>('POST', '/accounts', { name: `Roles ${size}` })).id;
    const [owner, dev] = [`role-owner-${size}@example.com`, `role-dev-${size}@example.com`];
    await f.admin('POST', `/accounts/${account}/members`, { email: owner, role: 'owner', password: PASSWORD });
    await f.admin('POST', `/accounts/${account}/members`, { email: dev, role: 'member', password: PASSWORD });
    const roles = async () => Object.fromEntries((await f.admin<{ data: Member[] }>('GET', `/accounts/${account}/members`)).data.map((m) => [m.email, m.role]));
    let win: ConsoleWindow | undefined;
    try {
      win = await openSignedIn(f, viewport, { email: owner, password: PASSWORD, tab: 'members' });
      const page = win.page;
      const roleOf = (email: string) => page.locator(`[data-testid="member-row"][data-email="${email}"]`).getByTestId('member-role');
      await roleOf(dev).waitFor();
      await expect(roleOf(dev).inputValue()).resolves.toBe('member');
      await expect(roleOf(owner).getAttribute('aria-label')).resolves.toBe(`Role of ${owner}`);

      // The only owner steps down: refused, said, and the control shows the role kept.
      await roleOf(owner).selectOption('member');
      await page.getByTestId('banner-text').filter({ hasText: 'An account keeps at least one owner' }).waitFor();
      await expect(roleOf(owner).inputValue()).resolves.toBe('owner');
      await expect(roles()).resolves.toEqual({ [owner]: 'owner', [dev]: 'member' });

      // A member made owner.
      await roleOf(dev).selectOption('owner');
      await page.getByTestId('banner-text').filter({ hasText: `${dev} is now an owner of the account.` }).waitFor();
      await expect(roles()).resolves.toEqual({ [owner]: 'owner', [dev]: 'owner' });
      await expect(roleOf(dev).inputValue()).resolves.toBe('owner');
      if (size === 'phone') await expectNoSidewaysScroll(page);

      // Now the first owner may step down; the page follows the session: no owners' controls.
      await roleOf(owner).selectOption('member');
      await page.getByTestId('members-role-note').waitFor();
      await expect(roles()).resolves.toEqual({ [owner]: 'member', [dev]: 'owner' });
      await expect(page.getByTestId('member-role').count()).resolves.toBe(0);
      await expect(page.locator(`[data-testid="member-row"][data-email="${dev}"] .role-badge`).textContent()).resolves.toBe('owner');
      await expect(page.getByTestId('invite-form').isVisible()).resolves.toBe(false);
      await expect(page.getByTestId('account-name').textContent()).resolves.toContain('member');

      const audit = (await f.admin<{ data: Array<{ action: string; actor: string; target: string; details: unknown }> }>('GET', `/accounts/${account}/audit`)).data.filter((event) => event.action === 'member.role_changed');
      expect(audit.map(({ actor, target, details }) => ({ actor, target, details }))).toEqual([
        { actor: owner, target: owner, details: { from: 'owner', role: 'member' } },
        { actor: owner, target: dev, details: { from: 'member', role: 'owner' } },
      ]);
      expect(win.problems).toEqual([]);
      // The page opens signed out (401), then the one refusal it showed.
      expect(win.refusals).toEqual(['GET /console/api/session 401', `PATCH /console/api/members/${encodeURIComponent(owner)} 409`]);
    } finally {
      await win?.context.close();
    }
  }, 45_000);
}
