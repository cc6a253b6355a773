/**
 * The key store's guard: every call has a deadline measured on our side, a call that cannot reach
 * the store becomes 503 key_store_unavailable, and an outage is reported once when it begins and once
 * when it ends, however many calls fail in between.
 */
import { GatewayError } from '../../src/errors';
import { AccountNameTaken, DuplicateRecord, LastOwner } from '../../src/store/errors';
import { GuardedKeyStore, isUnreachable, StoreDeadlineExceeded, StoreUnreadable } from '../../src/store/guarded';
import { issueKey } from '../../src/auth/issue';
import { CountingKeyStore } from '../fakes/counting-key-store';

function guarded(timeoutMs = 100) {
  const inner = new CountingKeyStore();
  const events: string[] = [];
  const store = new GuardedKeyStore(inner, timeoutMs, { down: () => events.push('down'), up: () => events.push('up') });
  return { inner, store, events };
}

test('a call the store never answers is given up at the deadline: 503 key_store_unavailable, not a hang', async () => {
  const { inner, store } = guarded(100);
  inner.hold(); // the store takes the call and never answers (a frozen database)
  const started = performance.now();
  const failure = await store.findByDigest('0'.repeat(64)).catch((err: unknown) => err);
  const elapsed = performance.now() - started;
  expect(failure).toBeInstanceOf(GatewayError);
  expect((failure as GatewayError).code).toBe('key_store_unavailable');
  expect((failure as GatewayError).status).toBe(503);
  expect((failure as GatewayError).cause).toBeInstanceOf(StoreDeadlineExceeded);
  expect(elapsed).toBeGreaterThanOrEqual(95);
  expect(elapsed).toBeLessThan(1000);
  inner.release();
});

test('an outage is reported once as it begins and once as it ends, whatever the number of calls', async () => {
  const { inner, store, events } = guarded();
  const { record } = await issueKey(store, { name: 'k' });
  inner.failing = true;
  for (let i = 0; i < 20; i++) await store.findByDigest(record.digest).catch(() => undefined);
  await store.ping().catch(() => undefined);
  expect(store.reachable).toBe(false);
  inner.failing = false;
  for (let i = 0; i < 5; i++) expect(await store.findByDigest(record.digest)).toEqual(record);
  expect(store.reachable).toBe(true);
  expect(events).toEqual(['down', 'up']);
});

test('an answer read after the outage was noticed, to a call sent before it, does not end the outage', async () => {
  const { inner, store, events } = guarded(5000);
  const { record } = await issueKey(store, { name: 'k' });
  inner.hold();
  const sentBefore = store.findByDigest(record.digest); // in flight when the store goes away
  inner.failing = true;
  await expect(store.ping()).rejects.toMatchObject({ code: 'key_store_unavailable' });
  expect(events).toEqual(['down']);
  inner.failing = false;
  inner.release();
  expect(await sentBefore).toEqual(record); // answered, but it was sent before the verdict
  expect(store.reachable).toBe(false);
  expect(events).toEqual(['down']);
  await store.ping(); // a call sent after the verdict is what ends it
  expect(store.reachable).toBe(true);
  expect(events).toEqual(['down', 'up']);
});

test('a call sent during the outage that fails after the store came back does not begin another', async () => {
  const { inner, store, events } = guarded(5000);
  const { record } = await issueKey(store, { name: 'k' });
  inner.failing = true;
  await store.ping().catch(() => undefined);
  inner.hold();
  const sentDuring = store.findByDigest(record.digest).catch((err: unknown) => err);
  inner.failing = false;
  await store.ping();
  expect(events).toEqual(['down', 'up']);
  inner.failing = true; // what the call sent during the outage meets
  inner.release();
  expect(await sentDuring).toMatchObject({ code: 'key_store_unavailable' }); // it still fails, as itself
  expect(store.reachable).toBe(true);
  expect(events).toEqual(['down', 'up']);
  await store.ping().catch(() => undefined); // a call sent after the verdict that fails does
  expect(events).toEqual(['down', 'up', 'down']);
});

test('empty batches ask the store nothing and say nothing of its health: an outage does not look over when they succeed', async () => {
  const { inner, store, events } = guarded();
  inner.failing = true;
  await store.findByDigest('0'.repeat(64)).catch(() => undefined);
  expect(store.reachable).toBe(false);
  await store.recordUse([]);
  await store.addQuotaUsage(new Map());
  expect(await store.quotaUsage([])).toEqual(new Map());
  expect(await store.bumpCounters([], new Date())).toEqual([]);
  await store.clearCounters([]);
  expect(store.reachable).toBe(false);
  expect(events).toEqual(['down']);
});

test('an error the store gives about the call itself passes through as it is, and says nothing of its health', async () => {
  const { inner, store, events } = guarded();
  const refusal = Object.assign(new Error('value out of range for type integer'), { code: '22003' });
  inner.get = () => Promise.reject(refusal);
  await expect(store.get('key_1')).rejects.toBe(refusal);
  expect(store.reachable).toBe(true);
  expect(events).toEqual([]);
});

test('a member\'s role change goes through the guard: the store\'s answer as it is (LastOwner too, none for nobody), and 503 at the deadline when the store never answers', async () => {
  const { inner, store } = guarded(100);
  const at = '2031-01-01T00:00:00.000Z';
  await inner.putMember({ accountId: 'acc_g', email: 'ann@x.test', role: 'owner', addedAt: at, addedBy: 'admin-token' });
  await inner.putMember({ accountId: 'acc_g', email: 'bob@x.test', role: 'member', addedAt: at, addedBy: 'admin-token' });
  expect(await store.setMemberRole('acc_g', 'bob@x.test', 'owner', { keepOwner: true })).toEqual({ member: expect.objectContaining({ email: 'bob@x.test', role: 'owner' }), from: 'member' });
  expect(await store.setMemberRole('acc_g', 'cid@x.test', 'owner', { keepOwner: true })).toBeUndefined();
  await store.setMemberRole('acc_g', 'ann@x.test', 'member', { keepOwner: true });
  await expect(store.setMemberRole('acc_g', 'bob@x.test', 'member', { keepOwner: true })).rejects.toBeInstanceOf(LastOwner);
  inner.setMemberRole = () => new Promise(() => undefined); // taken, never answered
  const started = performance.now();
  await expect(store.setMemberRole('acc_g', 'bob@x.test', 'member')).rejects.toMatchObject({ status: 503, code: 'key_store_unavailable' });
  expect(performance.now() - started).toBeLessThan(1000);
});

test.each([
  [new StoreDeadlineExceeded(100), true],
  [new StoreUnreadable('keys.json is not valid JSON'), true],
  [Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' }), true],
  [Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }), true],
  [Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01' }), true],
  [Object.assign(new Error('the database system is starting up'), { code: '57P03' }), true],
  [Object.assign(new Error('sorry, too many clients already'), { code: '53300' }), true],
  [Object.assign(new Error('connection failure'), { code: '08006' }), true],
  [new Error('Connection terminated unexpectedly'), true],
  [new Error('timeout exceeded when trying to connect'), true],
  [Object.assign(new Error('value out of range for type integer'), { code: '22003' }), false],
  [Object.assign(new Error('duplicate key value violates unique constraint'), { code: '23505' }), false],
  [new Error('key store already holds a key with id key_1'), false],
  // A duplicate's message holds what a client chose: a name that reads like an outage is still a duplicate.
  [new AccountNameTaken('Connection terminated unexpectedly'), false],
  [new DuplicateRecord('account', 'name', 'Client was closed'), false],
  [Object.assign(new TypeError('Connection terminated'), {}), false],
  // A rejection that is no error at all says nothing of the store either (and must not throw here).
  [undefined, false],
  [null, false],
  ['Connection terminated unexpectedly', false],
])('isUnreachable(%s) is %s', (err, unreachable) => {
  expect(isUnreachable(err)).toBe(unreachable);
});
