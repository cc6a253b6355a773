/**
 * `chatgate accounts` and `chatgate members` as an operator runs them (the built CLI, real processes)
 * on a running gateway's store: accounts and members made and listed, one-time password links, a
 * member removed with their keys revoked or handed over.
 */
import { issueKey } from '../../src/auth/issue';
import { cliGateway, cli } from '../helpers/cli';
import { bearer, chatBody, request } from '../helpers/http';
import { eventually } from '../helpers/time';

const f = cliGateway();

test('accounts and members from the CLI: made, listed, and a key made in the account; the same refusals as the admin API', async () => {
  const config = ['--config', f.configFile];
  const created = await cli(['accounts', 'create', '--name', 'team-cli', '--tokens-per-day', '50000', '--budget-per-month', '250.5', '--json', ...config]);
  expect(created.status).toBe(0);
  const account = JSON.parse(created.stdout) as { id: string; name: string; quota: unknown };
  expect(account).toMatchObject({ name: 'team-cli', quota: { tokensPerDay: 50000, tokensPerMonth: null }, budget: { perDay: null, perMonth: 250.5 } });
  for (const amount of ['-1', 'lots', '', '1e7']) {
    const refused = await cli(['accounts', 'create', '--name', 'team-refused', `--budget-per-day=${amount}`, ...config]);
    expect({ amount, status: refused.status, stderr: refused.stderr.split('\n')[0] }).toEqual({ amount, status: 2, stderr: expect.stringContaining('--budget-per-day must be an amount') });
  }
  const again = await cli(['accounts', 'create', '--name', 'team-cli', ...config]);
  expect(again.status).toBe(1);
  expect(again.stderr).toContain("An account is already named 'team-cli'");
  expect((await cli(['accounts', 'list', ...config])).stdout).toContain(`${account.id}\tteam-cli\tquota per day 50000, per month none; budget per day none, per month 250.5`);

  const added = await cli(['members', 'add', '--account', account.id, '--email', 'Lead@Example.com', '--role', 'owner', '--json', ...config]);
  expect(added.status).toBe(0);
  expect(JSON.parse(added.stdout)).toMatchObject({ accountId: account.id, email: 'lead@example.com', role: 'owner', addedBy: 'cli', passwordLink: expect.stringMatching(/^\/console\/#set-password=[A-Za-z0-9_-]{43}$/) });
  // Without --json, the link is a whole URL to open (console.publicUrl, else the listen address).
  const printed = await cli(['members', 'add', '--account', account.id, '--email', 'second@example.com', '--role', 'member', ...config]);
  expect(printed.stdout).toMatch(/^second@example\.com is member of acc_\S+\nset the password once at https:\/\/[^/<>\s]+\/console\/#set-password=[A-Za-z0-9_-]{43}\n$/);
  expect((await cli(['members', 'list', '--account', account.id, ...config])).stdout).toMatch(/^lead@example\.com\towner\tadded .* by cli$/m);
  const lastOwner = await cli(['members', 'remove', '--account', account.id, '--email', 'lead@example.com', ...config]);
  expect(lastOwner.status).toBe(1);
  expect(lastOwner.stderr).toContain('at least one owner');

  const key = JSON.parse((await cli(['keys', 'create', '--name', 'in-team', '--account', account.id, '--budget-per-day', '3', '--json', ...config])).stdout) as { accountId: string; budget: unknown };
  expect(key.accountId).toBe(account.id);
  expect(key.budget).toEqual({ perDay: 3, perMonth: null });
  expect((await cli(['keys', 'create', '--name', 'nowhere', '--account', 'acc_nope', ...config])).status).toBe(2);
});

test('members password-link: a one-time link that works once, voids the older one, and is audited by `cli`', async () => {
  const origin = `https://${new URL(f.gw.url).host}`;
  const setPassword = (token: string) =>
    request(f.gw.url, { ca: f.gw.ca, path: '/console/api/password', headers: { origin, 'content-type': 'application/json' }, body: JSON.stringify({ token, password: 'the first owner password' }) });
  // The gateway's first start made admin@localhost; their link is lost (the banner was not kept).
  const older = await cli(['members', 'password-link', '--email', 'admin@localhost', '--config', f.configFile]);
  expect(older.status).toBe(0);
  const olderToken = /^https:\/\/\S+\/console\/#set-password=([A-Za-z0-9_-]{43})$/m.exec(older.stdout)![1]!;
  const newer = await cli(['members', 'password-link', '--email', 'Admin@localhost', '--json', '--config', f.configFile]);
  expect(newer.status).toBe(0);
  const answer = JSON.parse(newer.stdout) as { email: string; path: string; url: string };
  expect(answer).toEqual({ email: 'admin@localhost', path: expect.stringMatching(/^\/console\/#set-password=[A-Za-z0-9_-]{43}$/), url: expect.stringMatching(/^https:\/\//) });
  expect(answer.url.endsWith(answer.path)).toBe(true);
  expect((await setPassword(olderToken)).json().error.code).toBe('invalid_link'); // the newer one voided it
  const newerToken = answer.path.split('#set-password=')[1]!;
  expect((await setPassword(newerToken)).json()).toEqual({ email: 'admin@localhost' });
  expect((await setPassword(newerToken)).status).toBe(400); // once

  const events = (await f.gw.store.listAudit(null, 1000)).filter((event) => event.action === 'password.link_created' && event.actor === 'cli' && event.target === 'admin@localhost');
  expect(events).toHaveLength(2);
  expect(JSON.stringify(events)).not.toContain(newerToken);

  const nobody = await cli(['members', 'password-link', '--email', 'nobody@example.com', '--config', f.configFile]);
  expect(nobody.status).toBe(1);
  expect(nobody.stdout).toBe('');
});

test("members remove revokes the keys the member made in the account; --transfer-keys-to hands them to an owner", async () => {
  const config = ['--config', f.configFile];
  const account = (JSON.parse((await cli(['accounts', 'create', '--name', 'team-leavers', '--json', ...config])).stdout) as { id: string }).id;
  for (const [email, role] of [['boss@example.com', 'owner'], ['leaver@example.com', 'member'], ['stayer@example.com', 'member']]) {
    expect((await cli(['members', 'add', '--account', account, '--email', email!, '--role', role!, ...config])).status).toBe(0);
  }
  const store = f.gw.store;
  const leavers = await issueKey(store, { name: 'leaver key', accountId: account, createdBy: 'leaver@example.com' });
  const stayers = await issueKey(store, { name: 'stayer key', accountId: account, createdBy: 'stayer@example.com' });
  const chat = (key: string) => request(f.gw.url, { ca: f.gw.ca, headers: bearer(key), body: chatBody() });
  expect((await chat(leavers.key)).status).toBe(200);

  const removed = await cli(['members', 'remove', '--account', account, '--email', 'leaver@example.com', ...config]);
  expect(removed.status).toBe(0);
  expect(removed.stdout).toContain('1 of their keys revoked');
  expect(await eventually(async () => ((await chat(leavers.key)).status === 401 ? true : undefined), 5000)).toBe(true);
  expect((await chat(stayers.key)).status).toBe(200);

  const handed = await cli(['members', 'remove', '--account', account, '--email', 'stayer@example.com', '--transfer-keys-to', 'boss@example.com', ...config]);
  expect(handed.stdout).toContain('1 of their keys now belong to boss@example.com');
  expect((await store.get(stayers.record.id))).toMatchObject({ createdBy: 'boss@example.com', revokedAt: null });
  expect((await chat(stayers.key)).status).toBe(200);
  const audit = (await store.listAudit(account, 100)).filter((event) => event.target === leavers.record.id || event.target === stayers.record.id);
  expect(audit.map((event) => [event.action, event.actor, event.details]).sort()).toEqual([
    ['key.revoked', 'cli', { reason: 'member_removed', member: 'leaver@example.com' }],
    ['key.transferred', 'cli', { from: 'stayer@example.com', to: 'boss@example.com' }],
  ]);
});
