/**
 * Accounts, people and members, on every backend (contract-backends.ts), through two handles: what a
 * write returns is what the other handle then reads; a name or id another account holds is refused
 * with DuplicateRecord (AccountNameTaken for a name), and of creates or renames racing for one name
 * exactly one wins; names and emails that only look alike are other records; lists come in a fixed order;
 * with keepOwner, no change (however many at once) leaves an account without an owner; a role change
 * (setMemberRole) never adds anyone, not even one removed while it was under way.
 */
import { AccountNameTaken, DuplicateRecord, LastOwner, type AccountRecord, type AccountStore, type MembershipRecord } from '../../src/store/types';
import { CONTRACT_BACKENDS, type ContractBackend, withBackend } from './contract-backends';
import { notCalled } from './contract-methods';

const account = (id: string, name: string, createdAt = '2031-02-03T04:05:06.789Z', extra: Partial<AccountRecord> = {}): AccountRecord => ({
  id,
  name,
  createdAt,
  quota: { tokensPerDay: null, tokensPerMonth: null },
  budget: { perDay: null, perMonth: null },
  ...extra,
});
const person = (email: string, passwordHash: string | null = null) => ({ email, admin: false, passwordHash, createdAt: '2031-01-01T00:00:00.000Z', passwordWithOidc: false });
const member = (accountId: string, email: string, addedAt: string, role: MembershipRecord['role'] = 'member'): MembershipRecord => ({ accountId, email, role, addedAt, addedBy: 'admin-token' });

/** Settles every promise: which ones kept and which failed, with what. */
const settled = <T>(promises: Array<Promise<T>>) => Promise.allSettled(promises);

describe.each(CONTRACT_BACKENDS)('%s: accounts, people, members', (_kind, open) => {
  let backend: ContractBackend;
  let store: AccountStore;
  let other: AccountStore;
  withBackend(open, (opened) => {
    backend = opened;
    ({ store, other } = opened);
  });

  test('createAccount keeps the record whole: getAccount and findAccountByName read it back from the other handle', async () => {
    const record = account('acc_whole', 'whole', '2031-02-03T04:05:06.789Z', {
      quota: { tokensPerDay: 1000, tokensPerMonth: null },
      budget: { perDay: 12.5, perMonth: 300 },
      keyPolicy: { maxLifetimeDays: 90 },
      endUserQuota: { tokensPerDay: 50, budgetPerDay: 0.25 },
    });
    await store.createAccount(record);
    expect(await other.getAccount('acc_whole')).toEqual(record);
    expect(await other.findAccountByName('whole')).toEqual(record);
    expect(await other.getAccount('acc_nobody')).toBeUndefined();
    expect(await other.findAccountByName('nobody')).toBeUndefined();
  });

  test('a name another account has is AccountNameTaken (a DuplicateRecord); an id another has is DuplicateRecord of the id; neither is kept', async () => {
    await store.createAccount(account('acc_first', 'first'));
    const byName = await other.createAccount(account('acc_second', 'first')).catch((err: unknown) => err);
    expect(byName).toBeInstanceOf(AccountNameTaken);
    expect(byName).toBeInstanceOf(DuplicateRecord);
    expect(byName).toMatchObject({ kind: 'account', field: 'name', accountName: 'first', message: "an account is already named 'first'" });
    const byId = await other.createAccount(account('acc_first', 'another')).catch((err: unknown) => err);
    expect(byId).toBeInstanceOf(DuplicateRecord);
    expect(byId).not.toBeInstanceOf(AccountNameTaken);
    expect(byId).toMatchObject({ kind: 'account', field: 'id' });
    expect(await store.getAccount('acc_second')).toBeUndefined();
    expect(await store.findAccountByName('another')).toBeUndefined();
    expect((await store.getAccount('acc_first'))?.name).toBe('first');
  });

  test('eight creates of one name at once through two handles: one is kept, seven get AccountNameTaken', async () => {
    const results = await settled(Array.from({ length: 8 }, (_, i) => (i % 2 ? store : other).createAccount(account(`acc_race_${i}`, 'raced'))));
    const kept = results.flatMap((result, i) => (result.status === 'fulfilled' ? [i] : []));
    expect(kept).toHaveLength(1);
    for (const result of results) if (result.status === 'rejected') expect(result.reason).toBeInstanceOf(AccountNameTaken);
    expect((await other.findAccountByName('raced'))?.id).toBe(`acc_race_${kept[0]}`);
    expect((await store.listAccounts(results.map((_, i) => `acc_race_${i}`))).map((a) => a.id)).toEqual([`acc_race_${kept[0]}`]);
  });

  test('names that only look alike (case, Unicode normal forms, a space) are other accounts, found by their exact name only', async () => {
    const names = ['Look', 'look', 'LOOK', 'caf\u00e9', 'cafe\u0301', 'look ', 'ｌｏｏｋ'];
    for (const [i, name] of names.entries()) await store.createAccount(account(`acc_look_${i}`, name));
    for (const [i, name] of names.entries()) expect((await other.findAccountByName(name))?.id).toBe(`acc_look_${i}`);
    expect(await other.findAccountByName('LoOk')).toBeUndefined();
  });

  test('updateAccount changes the fields given, returns the account as kept, and refuses a name another account has', async () => {
    await store.createAccount(account('acc_upd', 'to update', '2031-02-03T04:05:06.789Z', { quota: { tokensPerDay: 10, tokensPerMonth: 100 }, budget: { perDay: 1, perMonth: 2 } }));
    await store.createAccount(account('acc_upd_other', 'taken name'));
    const updated = await other.updateAccount('acc_upd', { quota: { tokensPerMonth: 200 }, budget: { perDay: null }, endUserQuota: { tokensPerDay: 5, budgetPerDay: null } });
    expect(updated).toEqual(account('acc_upd', 'to update', '2031-02-03T04:05:06.789Z', { quota: { tokensPerDay: 10, tokensPerMonth: 200 }, budget: { perDay: null, perMonth: 2 }, endUserQuota: { tokensPerDay: 5, budgetPerDay: null } }));
    expect(await store.getAccount('acc_upd')).toEqual(updated);
    expect(await store.updateAccount('acc_upd', {})).toEqual(updated);
    expect(await store.updateAccount('acc_upd', { name: 'to update' })).toEqual(updated); // its own name: no clash
    const refused = await store.updateAccount('acc_upd', { name: 'taken name', quota: { tokensPerDay: 1 } }).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(AccountNameTaken);
    expect(refused).toMatchObject({ kind: 'account', field: 'name', accountName: 'taken name' });
    expect(await other.getAccount('acc_upd')).toEqual(updated); // nothing of the refused change
    expect((await other.updateAccount('acc_upd', { name: 'Taken name', endUserQuota: null }))?.name).toBe('Taken name');
    expect(await other.getAccount('acc_upd')).not.toHaveProperty('endUserQuota');
    expect(await other.updateAccount('acc_nobody', { name: 'x' })).toBeUndefined();
    expect(await other.findAccountByName('x')).toBeUndefined();
  });

  test('two renames to one free name at once: one account gets it, the other AccountNameTaken', async () => {
    await Promise.all([store.createAccount(account('acc_ren_a', 'rename a')), store.createAccount(account('acc_ren_b', 'rename b'))]);
    const results = await settled([store.updateAccount('acc_ren_a', { name: 'renamed' }), other.updateAccount('acc_ren_b', { name: 'renamed' })]);
    expect(results.filter((result) => result.status === 'fulfilled')).toHaveLength(1);
    const refused = results.find((result) => result.status === 'rejected');
    expect(refused?.status === 'rejected' && refused.reason).toBeInstanceOf(AccountNameTaken);
    const winner = results[0]!.status === 'fulfilled' ? 'acc_ren_a' : 'acc_ren_b';
    expect((await other.findAccountByName('renamed'))?.id).toBe(winner);
  });

  test('listAccounts: by creation time, then id; with ids, those only (unknown and repeated ids ignored)', async () => {
    const at = (day: number) => `2029-06-0${day}T00:00:00.000Z`;
    await store.createAccount(account('acc_ord_c', 'ord c', at(2)));
    await other.createAccount(account('acc_ord_a', 'ord a', at(3)));
    await store.createAccount(account('acc_ord_b', 'ord b', at(2)));
    await other.createAccount(account('acc_ord_d', 'ord d', at(1)));
    const ids = ['acc_ord_a', 'acc_ord_b', 'acc_ord_c', 'acc_ord_d'];
    expect((await other.listAccounts([...ids, 'acc_ord_a', 'acc_nobody'])).map((a) => a.id)).toEqual(['acc_ord_d', 'acc_ord_b', 'acc_ord_c', 'acc_ord_a']);
    expect(await store.listAccounts([])).toEqual([]);
    const all = await store.listAccounts();
    expect(all.map((a) => a.id)).toEqual(expect.arrayContaining(ids));
    const sorted = [...all].sort((a, b) => (a.createdAt < b.createdAt ? -1 : a.createdAt > b.createdAt ? 1 : a.id < b.id ? -1 : 1));
    expect(all.map((a) => a.id)).toEqual(sorted.map((a) => a.id));
  });

  test('putPerson creates, then changes admin and a given password, keeping what it was not given; getPerson reads it from the other handle', async () => {
    expect(await store.putPerson(person('pat@x.test', 'scrypt$one'))).toEqual(person('pat@x.test', 'scrypt$one'));
    expect(await other.getPerson('pat@x.test')).toEqual(person('pat@x.test', 'scrypt$one'));
    const changed = await other.putPerson({ ...person('pat@x.test'), admin: true, createdAt: '2032-01-01T00:00:00.000Z' });
    expect(changed).toEqual({ ...person('pat@x.test', 'scrypt$one'), admin: true }); // the hash and the creation time kept
    expect(await store.getPerson('pat@x.test')).toEqual(changed);
    expect((await store.putPerson({ ...person('pat@x.test', 'scrypt$two'), admin: true }))?.passwordHash).toBe('scrypt$two');
    expect(await store.getPerson('nobody@x.test')).toBeUndefined();
  });

  test('emails are kept as given: one that differs in case only is another person (the callers lower-case them)', async () => {
    await store.putPerson(person('sam@x.test', 'scrypt$lower'));
    await other.putPerson(person('Sam@x.test', 'scrypt$upper'));
    expect((await store.getPerson('sam@x.test'))?.passwordHash).toBe('scrypt$lower');
    expect((await store.getPerson('Sam@x.test'))?.passwordHash).toBe('scrypt$upper');
    expect(await store.getPerson('SAM@x.test')).toBeUndefined();
  });

  test('members: putMember adds, or changes the role only; lists by when added, then email or account; removeMember says whether there was one', async () => {
    for (const email of ['ann@x.test', 'bob@x.test', 'cid@x.test']) await store.putPerson(person(email));
    await store.createAccount(account('acc_mem_1', 'members one'));
    await store.createAccount(account('acc_mem_2', 'members two'));
    expect(await store.putMember(member('acc_mem_1', 'cid@x.test', '2031-03-01T00:00:00.000Z', 'owner'))).toEqual(member('acc_mem_1', 'cid@x.test', '2031-03-01T00:00:00.000Z', 'owner'));
    await other.putMember(member('acc_mem_1', 'bob@x.test', '2031-03-02T00:00:00.000Z'));
    await store.putMember(member('acc_mem_1', 'ann@x.test', '2031-03-02T00:00:00.000Z'));
    await other.putMember(member('acc_mem_2', 'bob@x.test', '2031-03-01T00:00:00.000Z'));
    // Again, as owner, with another time and author: the role changes, nothing else.
    const promoted = await other.putMember({ ...member('acc_mem_1', 'bob@x.test', '2031-09-09T00:00:00.000Z', 'owner'), addedBy: 'ann@x.test' });
    expect(promoted).toEqual(member('acc_mem_1', 'bob@x.test', '2031-03-02T00:00:00.000Z', 'owner'));
    expect(await store.listMembers('acc_mem_1')).toEqual([
      member('acc_mem_1', 'cid@x.test', '2031-03-01T00:00:00.000Z', 'owner'),
      member('acc_mem_1', 'ann@x.test', '2031-03-02T00:00:00.000Z'),
      member('acc_mem_1', 'bob@x.test', '2031-03-02T00:00:00.000Z', 'owner'),
    ]);
    expect(await store.membershipsOf('bob@x.test')).toEqual([member('acc_mem_2', 'bob@x.test', '2031-03-01T00:00:00.000Z'), member('acc_mem_1', 'bob@x.test', '2031-03-02T00:00:00.000Z', 'owner')]);
    expect(await store.membershipsOf('Bob@x.test')).toEqual([]);
    expect(await other.removeMember('acc_mem_1', 'bob@x.test')).toBe(true);
    expect(await store.removeMember('acc_mem_1', 'bob@x.test')).toBe(false);
    expect((await store.listMembers('acc_mem_1')).map((m) => m.email)).toEqual(['cid@x.test', 'ann@x.test']);
    expect((await other.membershipsOf('bob@x.test')).map((m) => m.accountId)).toEqual(['acc_mem_2']);
    expect(await other.listMembers('acc_nobody')).toEqual([]);
  });

  test('keepOwner: an owner among others is made a member or removed; the only one is refused with LastOwner and kept; a plain member comes and goes', async () => {
    for (const email of ['ann@x.test', 'bob@x.test', 'cid@x.test']) await store.putPerson(person(email));
    await store.createAccount(account('acc_keep', 'keep'));
    const ann = member('acc_keep', 'ann@x.test', '2031-03-01T00:00:00.000Z', 'owner');
    const bob = member('acc_keep', 'bob@x.test', '2031-03-02T00:00:00.000Z', 'owner');
    await store.putMember(ann);
    await store.putMember(bob);
    await store.putMember(member('acc_keep', 'cid@x.test', '2031-03-03T00:00:00.000Z'));
    expect(await other.putMember({ ...bob, role: 'member' }, { keepOwner: true })).toEqual({ ...bob, role: 'member' });
    const demoted = await store.putMember({ ...ann, role: 'member' }, { keepOwner: true }).catch((err: unknown) => err);
    expect(demoted).toBeInstanceOf(LastOwner);
    expect(demoted).toMatchObject({ accountId: 'acc_keep', email: 'ann@x.test' });
    expect(await other.removeMember('acc_keep', 'ann@x.test', { keepOwner: true }).catch((err: unknown) => err)).toBeInstanceOf(LastOwner);
    expect(await store.putMember(ann, { keepOwner: true })).toEqual(ann); // an owner again: nothing taken away
    expect(await other.removeMember('acc_keep', 'cid@x.test', { keepOwner: true })).toBe(true);
    expect(await other.removeMember('acc_keep', 'cid@x.test', { keepOwner: true })).toBe(false);
    expect(await store.putMember(member('acc_keep', 'cid@x.test', '2031-03-04T00:00:00.000Z'), { keepOwner: true })).toEqual(member('acc_keep', 'cid@x.test', '2031-03-04T00:00:00.000Z'));
    expect(await store.putMember(bob, { keepOwner: true })).toEqual(bob);
    expect(await other.removeMember('acc_keep', 'ann@x.test', { keepOwner: true })).toBe(true);
    expect(await store.listMembers('acc_keep')).toEqual([bob, member('acc_keep', 'cid@x.test', '2031-03-04T00:00:00.000Z')]);
    // Without keepOwner the store does as it is told (the service always asks for it).
    expect(await store.removeMember('acc_keep', 'bob@x.test')).toBe(true);
    expect(await other.putMember(member('acc_keep', 'cid@x.test', '2031-03-04T00:00:00.000Z'), { keepOwner: true })).toMatchObject({ role: 'member' }); // no owner to keep
  });

  test.each(['putMember', 'setMemberRole'])('keepOwner: two owners demoting (by %s) or removing each other at once through two handles, ten times over: one change is made, the other LastOwner, an owner is left', async (demoteBy) => {
    for (const email of ['ann@x.test', 'bob@x.test']) await store.putPerson(person(email));
    const demote = (handle: AccountStore, record: MembershipRecord) =>
      demoteBy === 'putMember' ? handle.putMember({ ...record, role: 'member' }, { keepOwner: true }) : handle.setMemberRole(record.accountId, record.email, 'member', { keepOwner: true });
    const change = (handle: AccountStore, record: MembershipRecord, remove: boolean) => (remove ? handle.removeMember(record.accountId, record.email, { keepOwner: true }) : demote(handle, record));
    for (let round = 0; round < 10; round++) {
      const id = `acc_duel_${demoteBy}_${round}`;
      await store.createAccount(account(id, `duel ${demoteBy} ${round}`));
      const ann = member(id, 'ann@x.test', '2031-03-01T00:00:00.000Z', 'owner');
      const bob = member(id, 'bob@x.test', '2031-03-02T00:00:00.000Z', 'owner');
      await store.putMember(ann);
      await store.putMember(bob);
      // Rounds 0-3 demote both, 4-6 remove both, the rest one of each; who goes first alternates.
      const [first, second] = round % 2 ? [bob, ann] : [ann, bob];
      const results = await settled<unknown>([change(store, first, round >= 4 && round < 7), change(other, second, round >= 4)]);
      expect(results.filter((result) => result.status === 'fulfilled')).toHaveLength(1);
      const refused = results.find((result) => result.status === 'rejected');
      expect(refused?.status === 'rejected' && refused.reason).toBeInstanceOf(LastOwner);
      const owners = (await other.listMembers(id)).filter((m) => m.role === 'owner');
      expect(owners).toHaveLength(1);
      expect(owners[0]!.email).toBe(results[0]!.status === 'fulfilled' ? second.email : first.email);
    }
  });

  test('setMemberRole changes the role of a member who is there, nothing else, and says the role it replaced; with nobody there it answers undefined and adds nobody; keepOwner keeps the last owner', async () => {
    for (const email of ['ray@x.test', 'sue@x.test']) await store.putPerson(person(email));
    await store.createAccount(account('acc_role', 'role'));
    const ray = member('acc_role', 'ray@x.test', '2031-03-01T00:00:00.000Z', 'owner');
    const sue = { ...member('acc_role', 'sue@x.test', '2031-03-02T00:00:00.000Z'), addedBy: 'ray@x.test' };
    await store.putMember(ray);
    await store.putMember(sue);
    expect(await other.setMemberRole('acc_role', 'sue@x.test', 'owner', { keepOwner: true })).toEqual({ member: { ...sue, role: 'owner' }, from: 'member' });
    expect(await store.setMemberRole('acc_role', 'sue@x.test', 'owner', { keepOwner: true })).toEqual({ member: { ...sue, role: 'owner' }, from: 'owner' }); // already so
    expect(await store.listMembers('acc_role')).toEqual([ray, { ...sue, role: 'owner' }]);
    expect(await store.setMemberRole('acc_role', 'ray@x.test', 'member', { keepOwner: true })).toEqual({ member: { ...ray, role: 'member' }, from: 'owner' });
    expect(await other.setMemberRole('acc_role', 'sue@x.test', 'member', { keepOwner: true }).catch((err: unknown) => err)).toBeInstanceOf(LastOwner);
    expect(await store.setMemberRole('acc_role', 'sue@x.test', 'member')).toEqual({ member: sue, from: 'owner' }); // without keepOwner, as told
    // Nobody there (never was, gone, another account, another spelling): undefined, and nobody made.
    expect(await other.removeMember('acc_role', 'ray@x.test')).toBe(true);
    for (const [accountId, email] of [['acc_role', 'ray@x.test'], ['acc_role', 'cid@x.test'], ['acc_role', 'Sue@x.test'], ['acc_nobody', 'sue@x.test']] as const) {
      for (const role of ['owner', 'member'] as const) {
        expect(await store.setMemberRole(accountId, email, role, { keepOwner: true })).toBeUndefined();
        expect(await other.setMemberRole(accountId, email, role)).toBeUndefined();
      }
    }
    expect(await other.listMembers('acc_role')).toEqual([sue]);
    expect(await store.membershipsOf('ray@x.test')).toEqual([]);
    expect(await store.listMembers('acc_nobody')).toEqual([]);
  });

  test('setMemberRole racing removeMember through two handles, ten times over: the member is gone after both, whichever lands first', async () => {
    for (const email of ['ann@x.test', 'bob@x.test']) await store.putPerson(person(email));
    for (let round = 0; round < 10; round++) {
      const id = `acc_leave_${round}`;
      await store.createAccount(account(id, `leave ${round}`));
      const ann = member(id, 'ann@x.test', '2031-03-01T00:00:00.000Z', 'owner');
      // Bob is promoted in even rounds, demoted (from owner, beside Ann) in odd ones.
      const bob = member(id, 'bob@x.test', '2031-03-02T00:00:00.000Z', round % 2 ? 'owner' : 'member');
      await store.putMember(ann);
      await store.putMember(bob);
      const role = round % 2 ? 'member' : 'owner';
      const changeRole = () => other.setMemberRole(id, bob.email, role, { keepOwner: true });
      const remove = () => store.removeMember(id, bob.email, { keepOwner: true });
      // Which call is made first alternates every two rounds.
      const [changed, removed] = round % 4 < 2 ? await Promise.all([changeRole(), remove()]) : await Promise.all([remove(), changeRole()]).then(([r, c]) => [c, r] as const);
      expect(removed).toBe(true);
      expect(changed === undefined || changed.member.role === role).toBe(true);
      expect(await store.listMembers(id)).toEqual([ann]);
      expect(await other.listMembers(id)).toEqual([ann]);
    }
  });

  test('two handles making one member an owner (or a member) at once, ten times over: both see the role made, and only one of them replaced another', async () => {
    for (const email of ['ann@x.test', 'bob@x.test']) await store.putPerson(person(email));
    for (let round = 0; round < 10; round++) {
      const id = `acc_twice_${round}`;
      await store.createAccount(account(id, `twice ${round}`));
      await store.putMember(member(id, 'ann@x.test', '2031-03-01T00:00:00.000Z', 'owner'));
      // Bob is promoted in even rounds, demoted (beside Ann, who stays an owner) in odd ones.
      const role = round % 2 ? 'member' : 'owner';
      await store.putMember(member(id, 'bob@x.test', '2031-03-02T00:00:00.000Z', round % 2 ? 'owner' : 'member'));
      const changes = await Promise.all([store, other].map((handle) => handle.setMemberRole(id, 'bob@x.test', role, { keepOwner: true })));
      for (const change of changes) expect(change?.member).toMatchObject({ email: 'bob@x.test', role });
      // One replaced the old role; the other read what the first left. A from read before the other's
      // change committed would say both replaced the old role.
      expect(changes.map((change) => change!.from).sort()).toEqual(['member', 'owner']);
    }
  });

  test('every method this file answers for was called on this backend', () => {
    expect(notCalled('account-contract', backend.called)).toEqual([]);
  });
});
