/**
 * Console sessions and the audit trail, on every backend (contract-backends.ts), through two handles:
 * a session is read back whole, changed field by field, ended; a digest or an audit id kept already is
 * refused with DuplicateRecord (of creates racing for one digest, exactly one wins); ended sessions go
 * as new ones come; the trail lists the latest first whatever order the events came in, with its limit,
 * its account, action and `since` (inclusive).
 */
import { DuplicateRecord, type AccountStore, type AuditEvent, type SessionRecord } from '../../src/store/types';
import { CONTRACT_BACKENDS, type ContractBackend, withBackend } from './contract-backends';
import { notCalled } from './contract-methods';

// To the second: the stores weigh sessions' expiry against the real clock.
const NOW = Math.floor(Date.now() / 1000) * 1000;
const at = (ms: number) => new Date(NOW + ms).toISOString();
const session = (digest: string, email = 'kim@x.test', expiresAt = at(3600_000)): SessionRecord => ({
  digest,
  email,
  accountId: 'acc_s',
  via: 'oidc',
  createdAt: at(0),
  lastSeenAt: at(0),
  expiresAt,
});
const event = (id: string, when: string, extra: Partial<AuditEvent> = {}): AuditEvent => ({
  id,
  accountId: 'acc_trail',
  at: when,
  actor: 'kim@x.test',
  action: 'key.created',
  target: 'key_1',
  client: '203.0.113.9',
  details: { name: 'ci', quota: { tokensPerDay: 5 }, models: ['a/*'], note: 'caf\u00e9 \u{1f600}' },
  ...extra,
});
const ids = (events: AuditEvent[]) => events.map((e) => e.id);

describe.each(CONTRACT_BACKENDS)('%s: sessions and the audit trail', (_kind, open) => {
  let backend: ContractBackend;
  let store: AccountStore;
  let other: AccountStore;
  withBackend(open, (opened) => {
    backend = opened;
    ({ store, other } = opened);
  });

  test('createSession keeps it whole; findSession reads it from the other handle; an unknown digest is undefined', async () => {
    await store.createSession(session('s-whole'));
    expect(await other.findSession('s-whole')).toEqual(session('s-whole'));
    expect(await other.findSession('s-WHOLE')).toBeUndefined();
    expect(await other.findSession('s-missing')).toBeUndefined();
  });

  test('a digest kept already is DuplicateRecord of the session digest, and the session kept is untouched', async () => {
    await store.createSession(session('s-dup'));
    const refused = await other.createSession(session('s-dup', 'lee@x.test')).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(DuplicateRecord);
    expect(refused).toMatchObject({ kind: 'session', field: 'digest' });
    expect((await store.findSession('s-dup'))?.email).toBe('kim@x.test');
  });

  test('six creates of one digest at once through two handles: one is kept, five get DuplicateRecord', async () => {
    const results = await Promise.allSettled(Array.from({ length: 6 }, (_, i) => (i % 2 ? store : other).createSession(session('s-race', `p${i}@x.test`))));
    const kept = results.flatMap((result, i) => (result.status === 'fulfilled' ? [i] : []));
    expect(kept).toHaveLength(1);
    for (const result of results) if (result.status === 'rejected') expect(result.reason).toBeInstanceOf(DuplicateRecord);
    expect((await other.findSession('s-race'))?.email).toBe(`p${kept[0]}@x.test`);
  });

  test('updateSession changes only what it is given: the last activity, the account (null too); an unknown digest is no error and makes nothing', async () => {
    await store.createSession(session('s-upd'));
    await other.updateSession('s-upd', { lastSeenAt: at(60_000) });
    expect(await store.findSession('s-upd')).toEqual({ ...session('s-upd'), lastSeenAt: at(60_000) });
    await store.updateSession('s-upd', { accountId: 'acc_other' });
    expect(await other.findSession('s-upd')).toEqual({ ...session('s-upd'), lastSeenAt: at(60_000), accountId: 'acc_other' });
    await other.updateSession('s-upd', { accountId: null, lastSeenAt: at(120_000) });
    expect(await store.findSession('s-upd')).toEqual({ ...session('s-upd'), lastSeenAt: at(120_000), accountId: null });
    await store.updateSession('s-upd', {});
    expect((await other.findSession('s-upd'))?.lastSeenAt).toBe(at(120_000));
    await store.updateSession('s-nobody', { lastSeenAt: at(1) });
    expect(await other.findSession('s-nobody')).toBeUndefined();
  });

  test('deleteSession ends that session only, for every handle; ending one that is not there is no error', async () => {
    await store.createSession(session('s-del-1'));
    await store.createSession(session('s-del-2'));
    await other.deleteSession('s-del-1');
    expect(await store.findSession('s-del-1')).toBeUndefined();
    expect((await store.findSession('s-del-2'))?.digest).toBe('s-del-2');
    await expect(store.deleteSession('s-del-1')).resolves.toBeUndefined();
  });

  test('an ended session is found until the next one comes (the caller weighs its expiry), then it is gone and its digest free; a live one stays', async () => {
    await store.createSession(session('s-ended', 'kim@x.test', at(-60_000)));
    expect((await other.findSession('s-ended'))?.expiresAt).toBe(at(-60_000)); // made after the clean-up of its own create
    await other.createSession(session('s-live', 'kim@x.test', at(60_000)));
    expect(await store.findSession('s-ended')).toBeUndefined();
    expect((await store.findSession('s-live'))?.expiresAt).toBe(at(60_000));
    await store.createSession(session('s-ended', 'lee@x.test', at(60_000)));
    expect((await other.findSession('s-ended'))?.email).toBe('lee@x.test');
  });

  test('appendAudit keeps the event whole (details included); listAudit reads it from the other handle', async () => {
    const whole = event('evt_whole', '2030-05-05T05:05:05.005Z', { accountId: 'acc_whole', client: null });
    await store.appendAudit(whole);
    expect(await other.listAudit('acc_whole', 10)).toEqual([whole]);
    expect(await other.listAudit('acc_nobody', 10)).toEqual([]);
  });

  test('an audit id kept already is DuplicateRecord of the audit id; the trail keeps the first', async () => {
    await store.appendAudit(event('evt_dup', '2030-06-01T00:00:00.000Z', { accountId: 'acc_dup' }));
    const refused = await other.appendAudit(event('evt_dup', '2030-06-02T00:00:00.000Z', { accountId: 'acc_dup', action: 'key.revoked' })).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(DuplicateRecord);
    expect(refused).toMatchObject({ kind: 'audit', field: 'id' });
    expect(await store.listAudit('acc_dup', 10)).toEqual([event('evt_dup', '2030-06-01T00:00:00.000Z', { accountId: 'acc_dup' })]);
  });

  test('listAudit: the latest `at` first, whatever order the events came in (two replicas, two clocks); limit 0, 1, and past the end', async () => {
    const times = [3, 1, 4, 5, 2];
    await Promise.all(times.map((second, i) => (i % 2 ? store : other).appendAudit(event(`evt_ord_${second}`, `2030-07-01T00:00:0${second}.000Z`, { accountId: 'acc_ord' }))));
    expect(ids(await store.listAudit('acc_ord', 10))).toEqual(['evt_ord_5', 'evt_ord_4', 'evt_ord_3', 'evt_ord_2', 'evt_ord_1']);
    expect(ids(await other.listAudit('acc_ord', 2))).toEqual(['evt_ord_5', 'evt_ord_4']);
    expect(ids(await other.listAudit('acc_ord', 1))).toEqual(['evt_ord_5']);
    expect(await other.listAudit('acc_ord', 0)).toEqual([]);
  });

  test('listAudit: all accounts with null (events of none too); one action; `since` inclusive, however it is written', async () => {
    await store.appendAudit(event('evt_f_1', '2040-01-01T00:00:00.000Z', { accountId: 'acc_f', action: 'member.added' }));
    await other.appendAudit(event('evt_f_2', '2040-01-02T00:00:00.000Z', { accountId: null, action: 'session.failed' }));
    await store.appendAudit(event('evt_f_3', '2040-01-03T00:00:00.000Z', { accountId: 'acc_g', action: 'member.added' }));
    expect(ids(await other.listAudit(null, 3))).toEqual(['evt_f_3', 'evt_f_2', 'evt_f_1']);
    expect(ids(await other.listAudit(null, 10, { action: 'member.added' }))).toEqual(['evt_f_3', 'evt_f_1']);
    expect(ids(await other.listAudit(null, 10, { action: 'member.added', since: '2040-01-01T00:00:00.001Z' }))).toEqual(['evt_f_3']);
    expect(ids(await store.listAudit(null, 10, { since: '2040-01-02T00:00:00Z' }))).toEqual(['evt_f_3', 'evt_f_2']);
    expect(ids(await store.listAudit('acc_f', 10, { since: '2040-01-01T00:00:00.000Z' }))).toEqual(['evt_f_1']);
    expect(ids(await store.listAudit('acc_f', 10, { action: 'MEMBER.ADDED' }))).toEqual([]);
  });

  test('every method this file answers for was called on this backend', () => {
    expect(notCalled('session-audit-contract', backend.called)).toEqual([]);
  });
});
