/**
 * The parts of the account store that sign-in's safety rests on, on every backend (the file store fake,
 * SQLite, PostgreSQL, and the memory fake the unit tests use): identities bound by issuer and subject (one per
 * issuer and person, two binds at once: one wins), set-password links that die when a newer one is
 * made or one is used, a password change that voids every link, ending a person's sessions, and
 * counters that count every concurrent bump exactly once.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { FileKeyStore } from '../fakes/file-store';
import { PostgresKeyStore } from '../../src/store/postgres/store';
import { SqliteKeyStore } from '../../src/store/sqlite/store';
import type { AccountStore, OneTimeToken, SessionRecord } from '../../src/store/types';
import { MemoryAccountStore } from '../fakes/memory-account-store';
import { createTestDatabase } from '../helpers/postgres';
import { notCalled, recorded } from './contract-methods';

interface Backend {
  /** Two handles on one store, as two processes or replicas would have. */
  pair: [AccountStore, AccountStore];
  cleanup(): Promise<void>;
}

const backends: Array<[string, () => Promise<Backend>]> = [
  [
    'file',
    async () => {
      const dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-identity-'));
      const file = path.join(dir, 'keys.json');
      const pair: [FileKeyStore, FileKeyStore] = [new FileKeyStore(file), new FileKeyStore(file)];
      return {
        pair,
        cleanup: async () => {
          await Promise.all(pair.map((s) => s.close()));
          rmSync(dir, { recursive: true, force: true });
        },
      };
    },
  ],
  [
    'sqlite',
    async () => {
      const dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-identity-'));
      const file = path.join(dir, 'chatgate.db');
      const pair: [SqliteKeyStore, SqliteKeyStore] = [new SqliteKeyStore(file), new SqliteKeyStore(file)];
      return {
        pair,
        cleanup: async () => {
          await Promise.all(pair.map((s) => s.close()));
          rmSync(dir, { recursive: true, force: true });
        },
      };
    },
  ],
  [
    'postgres',
    async () => {
      const database = await createTestDatabase();
      const pair = (await Promise.all([PostgresKeyStore.open(database.url), PostgresKeyStore.open(database.url)])) as [PostgresKeyStore, PostgresKeyStore];
      return {
        pair,
        cleanup: async () => {
          await Promise.all(pair.map((s) => s.close()));
          await database.drop();
        },
      };
    },
  ],
  [
    'memory',
    async () => {
      const store = new MemoryAccountStore();
      return { pair: [store, store], cleanup: async () => undefined };
    },
  ],
];

// Now, to the second: the stores weigh links' and sessions' expiry against the real clock too.
const NOW = new Date(Math.floor(Date.now() / 1000) * 1000);
const later = (ms: number) => new Date(NOW.getTime() + ms).toISOString();
const person = (email: string) => ({ email, admin: false, passwordHash: null, createdAt: NOW.toISOString() });
const link = (digest: string, email: string): OneTimeToken => ({ digest, kind: 'password', email, data: {}, expiresAt: later(3600_000) });
const session = (digest: string, email: string): SessionRecord => ({
  digest,
  email,
  accountId: null,
  via: 'password',
  createdAt: NOW.toISOString(),
  lastSeenAt: NOW.toISOString(),
  expiresAt: later(3600_000),
});

describe.each(backends)('%s account store: identities, links, sessions, counters', (_kind, makeBackend) => {
  let backend: Backend;
  let store: AccountStore;
  let other: AccountStore;
  const called = new Set<string>();

  beforeAll(async () => {
    backend = await makeBackend();
    [store, other] = [recorded(backend.pair[0], called), recorded(backend.pair[1], called)];
    for (const email of ['kim@x.test', 'lee@x.test', 'max@x.test', 'ned@x.test']) await store.putPerson(person(email));
  });
  afterAll(() => backend?.cleanup());

  test('listAccounts with ids: those accounts only (unknown ids ignored), one read however many', async () => {
    const made = [];
    for (const name of ['ids-a', 'ids-b', 'ids-c']) {
      const record = { id: `acc_${name}`, name, createdAt: new Date().toISOString(), quota: { tokensPerDay: null, tokensPerMonth: null }, budget: { perDay: null, perMonth: null } };
      await store.createAccount(record);
      made.push(record.id);
    }
    expect((await other.listAccounts([made[0]!, made[2]!, 'acc_nobody'])).map((account) => account.id).sort()).toEqual([made[0], made[2]].sort());
    expect(await other.listAccounts([])).toEqual([]);
    expect((await other.listAccounts()).map((account) => account.id)).toEqual(expect.arrayContaining(made));
  });

  test('an account keeps its key policy: set at creation, changed, cleared', async () => {
    const record = { id: 'acc_policy', name: 'policy kept', createdAt: new Date().toISOString(), quota: { tokensPerDay: null, tokensPerMonth: null }, budget: { perDay: null, perMonth: null }, keyPolicy: { maxLifetimeDays: 90 } };
    await store.createAccount(record);
    expect((await other.getAccount('acc_policy'))?.keyPolicy).toEqual({ maxLifetimeDays: 90 });
    expect((await other.updateAccount('acc_policy', { keyPolicy: { maxLifetimeDays: 30 } }))?.keyPolicy).toEqual({ maxLifetimeDays: 30 });
    expect((await other.updateAccount('acc_policy', { name: 'policy renamed' }))?.keyPolicy).toEqual({ maxLifetimeDays: 30 });
    expect((await store.updateAccount('acc_policy', { keyPolicy: null }))?.keyPolicy).toBeUndefined();
  });

  test("an account keeps its alert webhook: set, kept through other changes, replaced, cleared; made without one, it has none", async () => {
    const record = { id: 'acc_hook', name: 'hook kept', createdAt: new Date().toISOString(), quota: { tokensPerDay: null, tokensPerMonth: null }, budget: { perDay: null, perMonth: null } };
    await store.createAccount(record);
    expect((await other.getAccount('acc_hook'))?.alertWebhookUrl).toBeUndefined();
    const url = 'https://hooks.example.com/services/T0/B0/secret';
    expect((await other.updateAccount('acc_hook', { alertWebhookUrl: url }))?.alertWebhookUrl).toBe(url);
    expect((await store.updateAccount('acc_hook', { quota: { tokensPerDay: 10 } }))?.alertWebhookUrl).toBe(url);
    expect((await other.findAccountByName('hook kept'))?.alertWebhookUrl).toBe(url);
    expect((await store.updateAccount('acc_hook', { alertWebhookUrl: `${url}2` }))?.alertWebhookUrl).toBe(`${url}2`);
    expect((await other.updateAccount('acc_hook', { alertWebhookUrl: null }))?.alertWebhookUrl).toBeUndefined();
    expect(await store.getAccount('acc_hook')).not.toHaveProperty('alertWebhookUrl');
  });

  test('an identity is found by issuer and subject only, and one person has one identity per issuer', async () => {
    const issuer = 'https://idp.test';
    expect(await store.bindIdentity({ issuer, subject: 'sub-1', email: 'kim@x.test', createdAt: NOW.toISOString() })).toBe(true);
    // The same subject again, or another subject for the same person from this issuer: refused.
    expect(await other.bindIdentity({ issuer, subject: 'sub-1', email: 'lee@x.test', createdAt: NOW.toISOString() })).toBe(false);
    expect(await other.bindIdentity({ issuer, subject: 'sub-2', email: 'kim@x.test', createdAt: NOW.toISOString() })).toBe(false);
    // The same subject at another issuer is another identity.
    expect(await other.bindIdentity({ issuer: 'https://other.test', subject: 'sub-1', email: 'kim@x.test', createdAt: NOW.toISOString() })).toBe(true);

    expect((await other.findIdentity(issuer, 'sub-1'))?.email).toBe('kim@x.test');
    expect(await other.findIdentity(issuer, 'sub-2')).toBeUndefined();
    expect(await other.findIdentity('https://idp.test/', 'sub-1')).toBeUndefined(); // no look-alike issuer
    expect((await store.identitiesOf('kim@x.test')).map((i) => i.issuer).sort()).toEqual(['https://idp.test', 'https://other.test']);
    expect(await store.identitiesOf('lee@x.test')).toEqual([]);
  });

  test('two first sign-ins at once with different subjects for one person: exactly one binds', async () => {
    const issuer = 'https://race.test';
    const results = await Promise.all(Array.from({ length: 8 }, (_, i) => (i % 2 ? store : other).bindIdentity({ issuer, subject: `s${i}`, email: 'max@x.test', createdAt: NOW.toISOString() })));
    expect(results.filter(Boolean)).toHaveLength(1);
    expect(await store.identitiesOf('max@x.test')).toHaveLength(1);
  });

  test('a newer set-password link voids the older one; using a link voids its siblings', async () => {
    await store.createToken(link('old', 'lee@x.test'));
    await store.createToken(link('unrelated', 'kim@x.test'));
    await other.createToken(link('new', 'lee@x.test'));
    expect(await store.takeToken('old', 'password', NOW)).toBeUndefined();
    expect((await store.takeToken('new', 'password', NOW))?.email).toBe('lee@x.test');
    expect(await other.takeToken('new', 'password', NOW)).toBeUndefined(); // once

    // Two links made at once may both be kept; the first used takes the other with it.
    await Promise.all([store.createToken(link('a', 'ned@x.test')), other.createToken(link('b', 'ned@x.test'))]);
    const first = (await store.takeToken('a', 'password', NOW)) ?? (await store.takeToken('b', 'password', NOW));
    expect(first?.email).toBe('ned@x.test');
    expect(await other.takeToken('a', 'password', NOW)).toBeUndefined();
    expect(await other.takeToken('b', 'password', NOW)).toBeUndefined();
    // Another person's link is untouched.
    expect((await other.takeToken('unrelated', 'password', NOW))?.email).toBe('kim@x.test');
  });

  test('finding a link takes nothing and voids nothing; a gone, expired or other kind is not found', async () => {
    await store.createToken(link('seen', 'lee@x.test'));
    expect((await other.findToken('seen', 'password', NOW))?.email).toBe('lee@x.test');
    expect((await store.findToken('seen', 'password', NOW))?.email).toBe('lee@x.test'); // still there
    expect(await store.findToken('seen', 'oidc', NOW)).toBeUndefined();
    expect(await store.findToken('made-up', 'password', NOW)).toBeUndefined();
    expect(await other.findToken('seen', 'password', new Date('2100-01-01T00:00:00Z'))).toBeUndefined(); // expired by then
    expect((await other.takeToken('seen', 'password', NOW))?.email).toBe('lee@x.test');
    expect(await store.findToken('seen', 'password', NOW)).toBeUndefined();
  });

  test("setting a password voids the person's links; null removes the password", async () => {
    await store.createToken(link('pending', 'lee@x.test'));
    const set = await other.setPassword('lee@x.test', 'scrypt$hash');
    expect(set?.passwordHash).toBe('scrypt$hash');
    expect(await store.takeToken('pending', 'password', NOW)).toBeUndefined();
    expect((await store.getPerson('lee@x.test'))?.passwordHash).toBe('scrypt$hash');
    expect((await store.setPassword('lee@x.test', null))?.passwordHash).toBeNull();
    expect((await other.getPerson('lee@x.test'))?.passwordHash).toBeNull();
    expect(await store.setPassword('nobody@x.test', 'x')).toBeUndefined();
  });

  test('passwordWithOidc is kept by putPerson when not given, and changed when given', async () => {
    await store.putPerson({ ...person('kim@x.test'), passwordWithOidc: true });
    expect((await other.getPerson('kim@x.test'))?.passwordWithOidc).toBe(true);
    await store.putPerson({ ...person('kim@x.test'), admin: true });
    expect(await other.getPerson('kim@x.test')).toMatchObject({ admin: true, passwordWithOidc: true });
    await store.putPerson({ ...person('kim@x.test'), passwordWithOidc: false });
    expect((await other.getPerson('kim@x.test'))?.passwordWithOidc).toBe(false);
  });

  test("ending a person's sessions ends all of theirs but the one kept, and nobody else's", async () => {
    for (const [digest, email] of [['k1', 'kim@x.test'], ['k2', 'kim@x.test'], ['k3', 'kim@x.test'], ['l1', 'lee@x.test']] as const) await store.createSession(session(digest, email));
    expect(await other.deleteSessionsOf('kim@x.test', 'k2')).toBe(2);
    expect(await store.findSession('k1')).toBeUndefined();
    expect(await store.findSession('k3')).toBeUndefined();
    expect((await store.findSession('k2'))?.email).toBe('kim@x.test');
    expect((await store.findSession('l1'))?.email).toBe('lee@x.test');
    expect(await other.deleteSessionsOf('kim@x.test')).toBe(1);
    expect(await store.findSession('k2')).toBeUndefined();
  });

  test('counters: 60 concurrent bumps through two handles each get their own count; expiry restarts; clear forgets', async () => {
    const expiresAt = new Date(NOW.getTime() + 60_000);
    const counts = await Promise.all(Array.from({ length: 60 }, (_, i) => (i % 2 ? store : other).bumpCounters([{ name: 'pair', expiresAt }, { name: 'email', expiresAt }], NOW)));
    expect(counts.map(([pair]) => pair).sort((a, b) => a! - b!)).toEqual(Array.from({ length: 60 }, (_, i) => i + 1));
    expect(counts.map(([, email]) => email).sort((a, b) => a! - b!)).toEqual(Array.from({ length: 60 }, (_, i) => i + 1));
    // The order of the answer is the order asked, whatever the names sort to.
    expect(await store.bumpCounters([{ name: 'zz-new', expiresAt }, { name: 'pair', expiresAt }], NOW)).toEqual([1, 61]);
    // After its expiry, a counter starts again at 1 with the new expiry.
    const afterExpiry = new Date(NOW.getTime() + 61_000);
    expect(await other.bumpCounters([{ name: 'pair', expiresAt: new Date(afterExpiry.getTime() + 60_000) }], afterExpiry)).toEqual([1]);
    expect(await other.bumpCounters([{ name: 'pair', expiresAt: new Date(afterExpiry.getTime() + 60_000) }], afterExpiry)).toEqual([2]);
    await store.clearCounters(['pair', 'email']);
    expect(await other.bumpCounters([{ name: 'pair', expiresAt }, { name: 'email', expiresAt }], NOW)).toEqual([1, 1]);
  });

  test('every method this file answers for was called on this backend', () => {
    expect(notCalled('identity-contract', called)).toEqual([]);
  });
});
