/** The accounts service on a real file store: changes to people are audited once, and only when they change something. */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Auditor } from '../../src/accounts/audit';
import { Accounts } from '../../src/accounts/service';
import { SqliteKeyStore } from '../../src/store/sqlite/store';
import type { AuditEvent, Store } from '../../src/store/types';
import { createLogger } from '../../src/telemetry/log';

let dir: string;
let accounts: Accounts;
const audited: AuditEvent[] = [];
const ADMIN = { kind: 'admin-token' } as const;

beforeAll(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-accounts-'));
  const store = new SqliteKeyStore(path.join(dir, 'chatgate.db'));
  accounts = new Accounts(store, new Auditor({ appendAudit: async (event) => void audited.push(event) }, createLogger('silent')));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

test('making a person a platform admin, and no longer one, is audited; setting what is already so is not', async () => {
  const account = await accounts.createAccount('admins-audit', ADMIN, undefined);
  await accounts.addMember(account.id, { email: 'ops@example.com', role: 'member' }, ADMIN, undefined);
  audited.length = 0;
  expect((await accounts.setAdmin('Ops@Example.com', true, ADMIN, '10.0.0.7')).admin).toBe(true);
  expect((await accounts.setAdmin('ops@example.com', true, ADMIN, '10.0.0.7')).admin).toBe(true);
  expect((await accounts.setAdmin('ops@example.com', false, ADMIN, '10.0.0.7')).admin).toBe(false);
  expect(audited.map(({ accountId, actor, action, target, client }) => ({ accountId, actor, action, target, client }))).toEqual([
    { accountId: null, actor: 'admin-token', action: 'admin.granted', target: 'ops@example.com', client: '10.0.0.7' },
    { accountId: null, actor: 'admin-token', action: 'admin.revoked', target: 'ops@example.com', client: '10.0.0.7' },
  ]);
  await expect(accounts.setAdmin('nobody@example.com', true, ADMIN, undefined)).rejects.toMatchObject({ code: 'member_not_found' });
});

test('a look-alike address (a Kelvin sign for the k, full-width letters) cannot be invited: 400 naming email, nobody made', async () => {
  const account = await accounts.createAccount('look-alikes', ADMIN, undefined);
  await accounts.addMember(account.id, { email: 'kim@x.test', role: 'member' }, ADMIN, undefined);
  for (const email of ['\u212Aim@x.test', '\uFF4Bim@x.test', 'ki\uFB01@x.test']) {
    await expect(accounts.addMember(account.id, { email, role: 'owner' }, ADMIN, undefined)).rejects.toMatchObject({ status: 400, param: 'email' });
    expect(await accounts.store.getPerson(email)).toBeUndefined();
  }
  expect((await accounts.store.listMembers(account.id)).map((m) => m.email)).toEqual(['kim@x.test']);
});

test("a member's role changed: audited once, added when and by whom it was; never adds anyone; the last owner kept", async () => {
  const account = await accounts.createAccount('roles-service', ADMIN, undefined);
  const boss = (await accounts.addMember(account.id, { email: 'boss@example.com', role: 'owner' }, ADMIN, undefined)).member;
  const dev = (await accounts.addMember(account.id, { email: 'dev@example.com', role: 'member' }, { kind: 'person', email: 'boss@example.com', admin: false }, undefined)).member;
  audited.length = 0;
  await expect(accounts.setMemberRole(account.id, ' Dev@Example.com ', 'owner', ADMIN, '10.0.0.8')).resolves.toEqual({ ...dev, role: 'owner' });
  await expect(accounts.setMemberRole(account.id, 'dev@example.com', 'owner', ADMIN, '10.0.0.8')).resolves.toMatchObject({ role: 'owner' });
  expect(audited.map(({ accountId, actor, action, target, client, details }) => ({ accountId, actor, action, target, client, details }))).toEqual([
    { accountId: account.id, actor: 'admin-token', action: 'member.role_changed', target: 'dev@example.com', client: '10.0.0.8', details: { from: 'member', role: 'owner' } },
  ]);
  await expect(accounts.setMemberRole(account.id, 'stranger@example.com', 'member', ADMIN, undefined)).rejects.toMatchObject({ status: 404, code: 'member_not_found' });
  await expect(accounts.setMemberRole(account.id, '\u212Aim@example.com', 'member', ADMIN, undefined)).rejects.toMatchObject({ status: 404, code: 'member_not_found' });
  await expect(accounts.setMemberRole(account.id, 'dev@example.com', 'admin', ADMIN, undefined)).rejects.toMatchObject({ status: 400, param: 'role' });
  await expect(accounts.setMemberRole('acc_nope', 'dev@example.com', 'member', ADMIN, undefined)).rejects.toMatchObject({ status: 404, code: 'account_not_found' });
  await accounts.setMemberRole(account.id, 'boss@example.com', 'member', ADMIN, undefined);
  await expect(accounts.setMemberRole(account.id, 'dev@example.com', 'member', ADMIN, undefined)).rejects.toMatchObject({ status: 409, code: 'last_owner' });
  expect((await accounts.store.listMembers(account.id)).map(({ email, role, addedAt, addedBy }) => ({ email, role, addedAt, addedBy }))).toEqual(
    expect.arrayContaining([
      { email: 'boss@example.com', role: 'member', addedAt: boss.addedAt, addedBy: 'admin-token' },
      { email: 'dev@example.com', role: 'owner', addedAt: dev.addedAt, addedBy: 'boss@example.com' },
    ]),
  );
  expect(await accounts.store.getPerson('stranger@example.com')).toBeUndefined();
});

test('two owners taking the owner role from each other at once (made a member, removed): one change is made, the other is 409 last_owner, an owner is left with their keys', async () => {
  const duel = async (byAnn: () => Promise<unknown>, byBob: () => Promise<unknown>, id: string) => {
    const results = await Promise.allSettled([byAnn(), byBob()]);
    expect(results.filter((result) => result.status === 'fulfilled')).toHaveLength(1);
    expect(results.find((result) => result.status === 'rejected')).toMatchObject({ reason: { status: 409, code: 'last_owner' } });
    expect((await accounts.store.listMembers(id)).filter((m) => m.role === 'owner')).toHaveLength(1);
  };
  const ann = { kind: 'person', email: 'ann@example.com', admin: false } as const;
  const bob = { kind: 'person', email: 'bob@example.com', admin: false } as const;
  for (const [round, kind] of ['demote', 'remove', 'both'].entries()) {
    const account = await accounts.createAccount(`duel-${round}`, ADMIN, undefined);
    for (const email of ['ann@example.com', 'bob@example.com']) await accounts.addMember(account.id, { email, role: 'owner' }, ADMIN, undefined);
    for (const owner of [ann, bob]) await accounts.createKey(account.id, { name: `${owner.email}'s` }, owner, undefined);
    audited.length = 0;
    const demoteBob = () => accounts.setMemberRole(account.id, 'bob@example.com', 'member', ann, undefined);
    const removeAnn = () => accounts.removeMember(account.id, 'ann@example.com', bob, undefined);
    const demoteAnn = () => accounts.setMemberRole(account.id, 'ann@example.com', 'member', bob, undefined);
    const removeBob = () => accounts.removeMember(account.id, 'bob@example.com', ann, undefined);
    if (kind === 'demote') await duel(demoteBob, demoteAnn, account.id);
    if (kind === 'remove') await duel(removeBob, removeAnn, account.id);
    if (kind === 'both') await duel(demoteBob, removeAnn, account.id);
    // Only the change that was made is audited (a removal: the demotion it begins with, then the
    // removal), and the refused one touched no key: the owner left keeps theirs.
    const members = await accounts.store.listMembers(account.id);
    const left = members.find((m) => m.role === 'owner')!.email;
    const changed = left === 'ann@example.com' ? 'bob@example.com' : 'ann@example.com';
    const removed = !members.some((m) => m.email === changed);
    const made = audited.filter((event) => event.action === 'member.role_changed' || event.action === 'member.removed');
    expect(made.map(({ action, target, details }) => ({ action, target, details }))).toEqual([
      { action: 'member.role_changed', target: changed, details: removed ? { from: 'owner', role: 'member', reason: 'removing' } : { from: 'owner', role: 'member' } },
      ...(removed ? [{ action: 'member.removed', target: changed, details: {} }] : []),
    ]);
    expect((await accounts.store.list(account.id)).filter((key) => key.createdBy === left).map((key) => key.revokedAt)).toEqual([null]);
  }
});

/**
 * The store under `accounts`, where the role changes (setMemberRole, and putMember, the upsert it once
 * used), or the methods named, wait, once they are called, until `release()`: `reached` settles when
 * one is waiting.
 */
function holdingRoleChanges(store: Store, methods: readonly string[] = ['setMemberRole', 'putMember']) {
  let release!: () => void;
  let arrived!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  const reached = new Promise<void>((resolve) => (arrived = resolve));
  const holding = new Proxy(store, {
    get(target, property) {
      const value = Reflect.get(target, property, target) as unknown;
      if (typeof value !== 'function') return value;
      if (typeof property !== 'string' || !methods.includes(property)) return value.bind(target);
      return async (...args: unknown[]) => {
        arrived();
        await released;
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { held: holding, reached, release };
}

const LEAD = { kind: 'person', email: 'lead@example.com', admin: false } as const;
const CO = { kind: 'person', email: 'co@example.com', admin: false } as const;

/**
 * An account of two owners (LEAD and CO) and dev@example.com as `devRole`, and a second service over
 * its store with `methods` held (holdingRoleChanges). The audit trail starts empty after the set-up.
 */
async function accountWithOwners(name: string, devRole: 'owner' | 'member', methods?: readonly string[]) {
  const account = await accounts.createAccount(name, ADMIN, undefined);
  for (const email of [LEAD.email, CO.email]) await accounts.addMember(account.id, { email, role: 'owner' }, ADMIN, undefined);
  await accounts.addMember(account.id, { email: 'dev@example.com', role: devRole }, ADMIN, undefined);
  const { held, reached, release } = holdingRoleChanges(accounts.store, methods);
  const slow = new Accounts(held, new Auditor({ appendAudit: async (event) => void audited.push(event) }, createLogger('silent')));
  audited.length = 0;
  return { account, slow, reached, release };
}

test('an invite naming a member with a new role, which met their removal before it wrote, adds them anew: added now and by the inviter, audited member.added, not put back as they were', async () => {
  const account = await accounts.createAccount('invite-vs-removal', ADMIN, undefined);
  const lead = { kind: 'person', email: 'lead@example.com', admin: false } as const;
  await accounts.addMember(account.id, { email: 'lead@example.com', role: 'owner' }, ADMIN, undefined);
  await accounts.addMember(account.id, { email: 'returner@example.com', role: 'member' }, ADMIN, undefined);
  const { held, reached, release } = holdingRoleChanges(accounts.store);
  const slow = new Accounts(held, new Auditor({ appendAudit: async (event) => void audited.push(event) }, createLogger('silent')));
  audited.length = 0;
  const inviting = slow.addMember(account.id, { email: 'returner@example.com', role: 'owner' }, lead, undefined);
  await reached; // it found the member, and is about to change their role
  await accounts.removeMember(account.id, 'returner@example.com', lead, undefined);
  release();
  expect((await inviting).member).toMatchObject({ email: 'returner@example.com', role: 'owner', addedBy: 'lead@example.com' });
  expect((await accounts.store.listMembers(account.id)).map((m) => [m.email, m.role, m.addedBy])).toEqual([
    ['lead@example.com', 'owner', 'admin-token'],
    ['returner@example.com', 'owner', 'lead@example.com'],
  ]);
  expect(audited.map((event) => event.action)).toEqual(['member.removed', 'member.added']);
});

test("a role change that read the member, then met their removal before it wrote, brings nobody back: 404 member_not_found, the member gone with their keys, the change unaudited", async () => {
  const account = await accounts.createAccount('role-vs-removal', ADMIN, undefined);
  const lead = { kind: 'person', email: 'lead@example.com', admin: false } as const;
  await accounts.addMember(account.id, { email: 'lead@example.com', role: 'owner' }, ADMIN, undefined);
  await accounts.addMember(account.id, { email: 'leaver@example.com', role: 'member' }, ADMIN, undefined);
  const key = await accounts.createKey(account.id, { name: "the leaver's" }, { kind: 'person', email: 'leaver@example.com', admin: false }, undefined);
  const { held, reached, release } = holdingRoleChanges(accounts.store);
  const slow = new Accounts(held, new Auditor({ appendAudit: async (event) => void audited.push(event) }, createLogger('silent')));
  audited.length = 0;
  const promoting = slow.setMemberRole(account.id, 'leaver@example.com', 'owner', lead, undefined).catch((err: unknown) => err);
  await reached; // it found the member, and is about to write
  expect(await accounts.removeMember(account.id, 'leaver@example.com', lead, undefined)).toEqual({ revoked: 1, transferred: 0 });
  release();
  expect(await promoting).toMatchObject({ status: 404, code: 'member_not_found' });
  expect((await accounts.store.listMembers(account.id)).map((m) => [m.email, m.role])).toEqual([['lead@example.com', 'owner']]);
  expect(await accounts.store.membershipsOf('leaver@example.com')).toEqual([]);
  expect((await accounts.store.get(key.record.id))?.revokedAt).not.toBeNull();
  expect(audited.map((event) => event.action)).toEqual(['key.revoked', 'member.removed']);
});

test('two owners making one member an owner at once, the first held between its read and its write: both answer the owner, the trail tells the change once', async () => {
  const { account, slow, reached, release } = await accountWithOwners('promoted-twice', 'member');
  const first = slow.setMemberRole(account.id, 'dev@example.com', 'owner', LEAD, undefined);
  await reached; // it read dev as a member, and is about to write
  expect(await accounts.setMemberRole(account.id, 'dev@example.com', 'owner', CO, undefined)).toMatchObject({ role: 'owner' });
  release();
  expect(await first).toMatchObject({ email: 'dev@example.com', role: 'owner' });
  // The held change replaced nothing: a second `from: member` would tell of a change nobody made.
  expect(audited.map(({ actor, action, details }) => ({ actor, action, details }))).toEqual([{ actor: 'co@example.com', action: 'member.role_changed', details: { from: 'member', role: 'owner' } }]);
});

test("an owner's removal whose demotion meets their removal by another owner: 404 member_not_found, nothing more done or audited", async () => {
  const { account, slow, reached, release } = await accountWithOwners('removed-twice', 'owner');
  const removing = slow.removeMember(account.id, 'dev@example.com', LEAD, undefined).catch((err: unknown) => err);
  await reached; // it read dev as an owner, and is about to demote them
  await accounts.removeMember(account.id, 'dev@example.com', CO, undefined);
  release();
  expect(await removing).toMatchObject({ status: 404, code: 'member_not_found' });
  expect((await accounts.store.listMembers(account.id)).map((m) => m.email).sort()).toEqual(['co@example.com', 'lead@example.com']);
  expect(audited.map(({ actor, action }) => [actor, action])).toEqual([
    ['co@example.com', 'member.role_changed'],
    ['co@example.com', 'member.removed'],
  ]);
});

test("an owner's removal whose demotion meets another owner's demotion of them: removed, the demotion told once, by whoever made it", async () => {
  const { account, slow, reached, release } = await accountWithOwners('demoted-then-removed', 'owner');
  const removing = slow.removeMember(account.id, 'dev@example.com', LEAD, undefined);
  await reached;
  await accounts.setMemberRole(account.id, 'dev@example.com', 'member', CO, undefined);
  release();
  expect(await removing).toEqual({ revoked: 0, transferred: 0 });
  expect((await accounts.store.listMembers(account.id)).map((m) => m.email).sort()).toEqual(['co@example.com', 'lead@example.com']);
  expect(audited.map(({ actor, action, details }) => ({ actor, action, details }))).toEqual([
    { actor: 'co@example.com', action: 'member.role_changed', details: { from: 'owner', role: 'member' } },
    { actor: 'lead@example.com', action: 'member.removed', details: {} },
  ]);
});

test("two owners removing one member at once, the first held just before the membership goes: the other's removal is told once, the first answers 404", async () => {
  const { account, slow, reached, release } = await accountWithOwners('removed-at-once', 'member', ['removeMember']);
  const removing = slow.removeMember(account.id, 'dev@example.com', LEAD, undefined).catch((err: unknown) => err);
  await reached; // its keys are handled, the membership about to go
  expect(await accounts.removeMember(account.id, 'dev@example.com', CO, undefined)).toEqual({ revoked: 0, transferred: 0 });
  release();
  expect(await removing).toMatchObject({ status: 404, code: 'member_not_found' });
  expect((await accounts.store.listMembers(account.id)).map((m) => m.email).sort()).toEqual(['co@example.com', 'lead@example.com']);
  expect(audited.map(({ actor, action }) => [actor, action])).toEqual([['co@example.com', 'member.removed']]);
});

test("a removal handing the member's keys to an owner who is removed meanwhile, held as it hands them: the keys are revoked, not left live with someone gone", async () => {
  const { account, slow, reached, release } = await accountWithOwners('heir-removed', 'member', ['update']);
  const dev = { kind: 'person', email: 'dev@example.com', admin: false } as const;
  const key = await accounts.createKey(account.id, { name: "dev's" }, dev, undefined);
  audited.length = 0;
  const removing = slow.removeMember(account.id, dev.email, LEAD, undefined, CO.email);
  await reached; // CO checked as an owner, the key about to be handed over
  expect(await accounts.removeMember(account.id, CO.email, LEAD, undefined)).toEqual({ revoked: 0, transferred: 0 });
  release();
  expect(await removing).toEqual({ revoked: 1, transferred: 1 });
  const after = await accounts.store.get(key.record.id);
  expect({ createdBy: after?.createdBy, revoked: after?.revokedAt !== null }).toEqual({ createdBy: CO.email, revoked: true });
  expect((await accounts.store.listMembers(account.id)).map((m) => m.email)).toEqual([LEAD.email]);
  expect(audited.filter(({ target }) => target === key.record.id).map(({ action, details }) => [action, details])).toEqual([
    ['key.transferred', { from: dev.email, to: CO.email }],
    ['key.revoked', { reason: 'member_removed', member: CO.email }],
  ]);
});

test('a role change racing the removal of that member, ten times over at ever later starts: the member is gone after both; the change is made before it, or is 404', async () => {
  const lead = { kind: 'person', email: 'lead@example.com', admin: false } as const;
  const outcomes = new Set<string>();
  for (let round = 0; round < 10; round++) {
    const account = await accounts.createAccount(`role-race-${round}`, ADMIN, undefined);
    await accounts.addMember(account.id, { email: 'lead@example.com', role: 'owner' }, ADMIN, undefined);
    await accounts.addMember(account.id, { email: 'dev@example.com', role: round % 2 ? 'owner' : 'member' }, ADMIN, undefined);
    const role = round % 2 ? 'member' : 'owner';
    // The role change starts 0, 1, 2, ... microtask turns after the removal: the early ones read the
    // member before the removal lands, and (on the old upsert) wrote them back after it.
    const later = async () => {
      for (let turn = 0; turn < round; turn++) await Promise.resolve();
      return accounts.setMemberRole(account.id, 'dev@example.com', role, lead, undefined);
    };
    const [removed, changed] = await Promise.allSettled([accounts.removeMember(account.id, 'dev@example.com', lead, undefined), later()]);
    expect(removed.status).toBe('fulfilled');
    if (changed.status === 'rejected') expect(changed.reason).toMatchObject({ status: 404, code: 'member_not_found' });
    else expect(changed.value).toMatchObject({ email: 'dev@example.com', role });
    outcomes.add(changed.status);
    expect((await accounts.store.listMembers(account.id)).map((m) => m.email)).toEqual(['lead@example.com']);
  }
  expect([...outcomes].sort()).toEqual(['fulfilled', 'rejected']); // both orders were met
});

test("an owner's removal that fails after the demotion it begins with leaves the member demoted, and the demotion audited with its reason; a retry finishes", async () => {
  const account = await accounts.createAccount('removal-half-way', ADMIN, undefined);
  const lead = { kind: 'person', email: 'lead@example.com', admin: false } as const;
  for (const email of ['lead@example.com', 'co@example.com']) await accounts.addMember(account.id, { email, role: 'owner' }, ADMIN, undefined);
  // The store goes away just as the membership is to go (the keys were handled before).
  const failing = new Proxy(accounts.store, {
    get(target, property) {
      const value = Reflect.get(target, property, target) as unknown;
      if (property === 'removeMember') return () => Promise.reject(Object.assign(new Error('store down'), { code: 'ECONNREFUSED' }));
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  const halfWay = new Accounts(failing, new Auditor({ appendAudit: async (event) => void audited.push(event) }, createLogger('silent')));
  audited.length = 0;
  await expect(halfWay.removeMember(account.id, 'co@example.com', lead, '10.0.0.9')).rejects.toThrow('store down');
  expect(Object.fromEntries((await accounts.store.listMembers(account.id)).map((m) => [m.email, m.role]))).toEqual({ 'lead@example.com': 'owner', 'co@example.com': 'member' });
  expect(audited.map(({ accountId, actor, action, target, client, details }) => ({ accountId, actor, action, target, client, details }))).toEqual([
    { accountId: account.id, actor: 'lead@example.com', action: 'member.role_changed', target: 'co@example.com', client: '10.0.0.9', details: { from: 'owner', role: 'member', reason: 'removing' } },
  ]);
  // The retry finds a member (no second demotion) and removes them.
  audited.length = 0;
  await accounts.removeMember(account.id, 'co@example.com', lead, '10.0.0.9');
  expect((await accounts.store.listMembers(account.id)).map((m) => m.email)).toEqual(['lead@example.com']);
  expect(audited.map((event) => event.action)).toEqual(['member.removed']);
});
