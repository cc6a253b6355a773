/**
 * Console sessions on a real file store, with the clock in the test's hands: the idle and absolute
 * expiry, use that keeps a session alive, the sign-in throttle per (email, address) that lifts by
 * itself and leaves other addresses alone, the per-email ceiling that slows rather than locks, what is
 * audited (one row per burst, nothing for emails of nobody), password changes that end sessions, and
 * the session cookie.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { Auditor } from '../../src/accounts/audit';
import { hashPassword } from '../../src/accounts/passwords';
import { Accounts } from '../../src/accounts/service';
import { SESSION_COOKIE, sessionCookie, Sessions, sessionTokenOf } from '../../src/accounts/sessions';
import { SqliteKeyStore } from '../../src/store/sqlite/store';
import { createLogger } from '../../src/telemetry/log';

const MINUTE = 60_000;
const PASSWORD = 'correct horse battery staple';
const WRONG = 'wrong password here';
let dir: string;
let store: SqliteKeyStore;
let clock = Date.parse('2026-11-27T10:00:00Z');
let sessions: Sessions;
let accounts: Accounts;
const logLines: string[] = [];

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-sessions-'));
  store = new SqliteKeyStore(path.join(dir, 'chatgate.db'));
  const log = createLogger('info', new Writable({ write: (chunk, _encoding, done) => done(void logLines.push(String(chunk))) }) as never);
  const auditor = new Auditor(store, log, () => new Date(clock));
  const settings = { idleMs: 30 * MINUTE, absoluteMs: 120 * MINUTE, signIn: { maxFailures: 3, emailMaxFailures: 10, windowMs: 15 * MINUTE } };
  sessions = new Sessions(store, auditor, settings, log, () => new Date(clock));
  accounts = new Accounts(store, auditor, () => new Date(clock));
  for (const email of ['dev@example.com', 'throttled@example.com', 'slowed@example.com', 'audited@example.com', 'bound@example.com', 'changer@example.com', 'leaver@example.com', 'other@example.com', 'everywhere@example.com']) {
    await store.putPerson({ email, admin: false, passwordHash: await hashPassword(PASSWORD), createdAt: new Date(clock).toISOString() });
  }
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The clock at the start of a fresh 15-minute window (a fresh 90 s slot too), a day after the last. */
let day = 0;
function freshWindow(): void {
  day += 1;
  clock = Date.parse('2026-12-01T10:00:00Z') + day * 24 * 60 * MINUTE;
}

const signIn = (email: string, password: string, client: string) => sessions.signInWithPassword(email, password, client);

test('a session unused for idleMs ends, and is gone from the store', async () => {
  const { token, signedIn } = await signIn('dev@example.com', PASSWORD, '10.0.0.1');
  clock += 29 * MINUTE;
  expect((await sessions.resolve(token))?.person.email).toBe('dev@example.com');
  clock += 29 * MINUTE; // 58 minutes after sign-in, 29 after the last use: still live
  expect(await sessions.resolve(token)).toBeDefined();
  clock += 30 * MINUTE;
  expect(await sessions.resolve(token)).toBeUndefined();
  expect(await store.findSession(signedIn.session.digest)).toBeUndefined();
});

test('a session in use still ends absoluteMs after sign-in', async () => {
  const { token } = await signIn('dev@example.com', PASSWORD, '10.0.0.1');
  for (let minutes = 20; minutes < 120; minutes += 20) {
    clock += 20 * MINUTE;
    expect(await sessions.resolve(token)).toBeDefined();
  }
  clock += 20 * MINUTE; // 120 minutes after sign-in, 20 after the last use
  expect(await sessions.resolve(token)).toBeUndefined();
});

test('past maxFailures from one address: 429 from there until the window ends, while another address signs in', async () => {
  freshWindow();
  for (let i = 0; i < 3; i++) await expect(signIn('throttled@example.com', WRONG, '10.0.0.1')).rejects.toMatchObject({ status: 401, code: 'invalid_credentials' });
  clock += 5 * MINUTE;
  const refused = await signIn('throttled@example.com', PASSWORD, '10.0.0.1').catch((err: unknown) => err);
  expect(refused).toMatchObject({ status: 429, code: 'too_many_failed_attempts', headers: { 'Retry-After': '600' } });
  expect((refused as Error).message).toContain('from this address');
  // The owner, elsewhere, with the right password.
  expect((await signIn('throttled@example.com', PASSWORD, '10.0.0.2')).signedIn.person.email).toBe('throttled@example.com');
  clock += 10 * MINUTE; // the window has ended
  expect((await signIn('throttled@example.com', PASSWORD, '10.0.0.1')).signedIn.person.email).toBe('throttled@example.com');
});

test('a right password clears its address count: the owner who mistypes is not throttled for it later', async () => {
  freshWindow();
  for (let i = 0; i < 2; i++) await expect(signIn('dev@example.com', WRONG, '10.0.0.3')).rejects.toMatchObject({ status: 401 });
  await signIn('dev@example.com', PASSWORD, '10.0.0.3');
  for (let i = 0; i < 3; i++) await expect(signIn('dev@example.com', WRONG, '10.0.0.3')).rejects.toMatchObject({ status: 401, code: 'invalid_credentials' });
  await expect(signIn('dev@example.com', WRONG, '10.0.0.3')).rejects.toMatchObject({ status: 429 });
});

test("past the email's ceiling from every address: slowed to one checked sign-in per slot, never locked", async () => {
  freshWindow();
  // 10 attempts (the ceiling) from four addresses, each within its own limit of 3: all checked.
  for (const address of ['10.1.0.1', '10.1.0.2', '10.1.0.3']) {
    for (let i = 0; i < 3; i++) await expect(signIn('slowed@example.com', WRONG, address)).rejects.toMatchObject({ status: 401 });
  }
  await expect(signIn('slowed@example.com', WRONG, '10.1.0.4')).rejects.toMatchObject({ status: 401 });
  clock += 30_000;
  // The 11th takes this slot (checked: 401); the owner's right password in the same slot waits for the next one.
  await expect(signIn('slowed@example.com', WRONG, '10.1.0.5')).rejects.toMatchObject({ status: 401, code: 'invalid_credentials' });
  const slowed = await signIn('slowed@example.com', PASSWORD, '10.1.0.6').catch((err: unknown) => err);
  expect(slowed).toMatchObject({ status: 429, code: 'sign_in_slowed', headers: { 'Retry-After': '60' } }); // slots of 90 s
  clock += 60_000;
  expect((await signIn('slowed@example.com', PASSWORD, '10.1.0.6')).signedIn.person.email).toBe('slowed@example.com');
  // One checked per slot: the next in this slot waits, and so it goes on, however many addresses guess.
  await expect(signIn('slowed@example.com', WRONG, '10.1.0.7')).rejects.toMatchObject({ status: 429, code: 'sign_in_slowed' });
  const rows = (await store.listAudit(null, 1000)).filter((e) => e.target === 'slowed@example.com' && e.action === 'session.slowed');
  expect(rows).toHaveLength(1);
});

test('attempts refused at their own address take no slot from the owner, even past the ceiling', async () => {
  freshWindow();
  // One address guesses 30 times: 3 checked, 27 refused there; the email's count passes its ceiling.
  for (let i = 0; i < 30; i++) await expect(signIn('throttled@example.com', WRONG, '10.2.0.1')).rejects.toMatchObject({ status: i < 3 ? 401 : 429 });
  expect((await signIn('throttled@example.com', PASSWORD, '10.2.0.2')).signedIn.person.email).toBe('throttled@example.com');
});

test('one audit row per burst, not per attempt; for an email of nobody nothing is stored, a warn line is logged', async () => {
  freshWindow();
  const account = { id: 'acc_audited', name: 'audited', createdAt: new Date(clock).toISOString(), quota: { tokensPerDay: null, tokensPerMonth: null }, budget: { perDay: null, perMonth: null } };
  await store.createAccount(account);
  await store.putMember({ accountId: account.id, email: 'audited@example.com', role: 'owner', addedAt: new Date(clock).toISOString(), addedBy: 'admin-token' });
  for (let i = 0; i < 8; i++) await signIn('audited@example.com', WRONG, '10.3.0.1').catch(() => undefined);
  const rows = (await store.listAudit(account.id, 100)).filter((e) => e.target === 'audited@example.com');
  expect(rows.map((e) => e.action).sort()).toEqual(['session.failed', 'session.throttled']);
  expect(rows.find((e) => e.action === 'session.throttled')).toMatchObject({ client: '10.3.0.1', details: { attempts: 4, limit: 3 } });

  logLines.length = 0;
  for (let i = 0; i < 8; i++) await signIn('nobody-at-all@example.com', 'a guessed password 1', '10.3.0.2').catch(() => undefined);
  expect((await store.listAudit(null, 1000)).filter((e) => e.target === 'nobody-at-all@example.com')).toEqual([]);
  const warned = logLines.filter((line) => line.includes('nobody-at-all@example.com'));
  expect(warned.map((line) => JSON.parse(line) as { level: number; action: string }).map(({ level, action }) => [level, action])).toEqual([
    [40, 'session.failed'],
    [40, 'session.throttled'],
  ]);
  expect(logLines.join('')).not.toContain('a guessed password 1');
  // The counters go with their window: each expires when its window ends (the store's clean-up then
  // deletes it), and the next window counts under names of its own.
  const counted = () => store.sql.all<{ name: string; expires_at: string }>("select name, expires_at from chatgate_counters where name like '%nobody-at-all@example.com%'");
  const before = counted();
  expect(before.length).toBeGreaterThan(0);
  freshWindow();
  expect(before.filter((row) => !(Date.parse(row.expires_at) <= clock))).toEqual([]);
  await signIn('nobody-at-all@example.com', 'a guessed password 1', '10.3.0.3').catch(() => undefined);
  const fresh = counted().filter((row) => !before.some((old) => old.name === row.name));
  expect(fresh.length).toBeGreaterThan(0);
  expect(fresh.every((row) => Date.parse(row.expires_at) > clock)).toBe(true);
});

test('a person bound to an identity provider is refused a password sign-in as a wrong password is, unless an admin allows it', async () => {
  freshWindow();
  expect(await store.bindIdentity({ issuer: 'https://idp.example', subject: 'sub-1', email: 'bound@example.com', createdAt: new Date(clock).toISOString() })).toBe(true);
  await expect(signIn('bound@example.com', PASSWORD, '10.4.0.1')).rejects.toMatchObject({ status: 401, code: 'invalid_credentials', message: 'The email or the password is not right.' });
  const person = (await store.getPerson('bound@example.com'))!;
  await store.putPerson({ ...person, passwordWithOidc: true });
  expect((await signIn('bound@example.com', PASSWORD, '10.4.0.1')).signedIn.person.email).toBe('bound@example.com');
});

test("a person's own password change ends their other sessions; a wrong current password changes nothing and counts", async () => {
  freshWindow();
  const here = await signIn('changer@example.com', PASSWORD, '10.5.0.1');
  const elsewhere = await signIn('changer@example.com', PASSWORD, '10.5.0.2');
  const someoneElse = await signIn('other@example.com', PASSWORD, '10.5.0.2');
  await expect(sessions.changePassword(here.signedIn, WRONG, 'a brand new password', '10.5.0.1')).rejects.toMatchObject({ status: 400, code: 'invalid_body', param: 'currentPassword' });
  await expect(sessions.changePassword(here.signedIn, PASSWORD, 'short', '10.5.0.1')).rejects.toMatchObject({ status: 400, param: 'password' });
  expect(await sessions.resolve(elsewhere.token)).toBeDefined();

  await sessions.changePassword(here.signedIn, PASSWORD, 'a brand new password', '10.5.0.1');
  expect(await sessions.resolve(here.token)).toBeDefined();
  expect(await sessions.resolve(elsewhere.token)).toBeUndefined();
  expect(await sessions.resolve(someoneElse.token)).toBeDefined();
  await expect(signIn('changer@example.com', PASSWORD, '10.5.0.3')).rejects.toMatchObject({ status: 401 });
  await signIn('changer@example.com', 'a brand new password', '10.5.0.3');

  // Guessing the current password from a stolen session is throttled like a sign-in.
  for (let i = 0; i < 3; i++) await expect(sessions.changePassword(here.signedIn, WRONG, 'the attacker password', '10.5.0.9')).rejects.toMatchObject({ status: 400 });
  await expect(sessions.changePassword(here.signedIn, 'a brand new password', 'the attacker password', '10.5.0.9')).rejects.toMatchObject({ status: 429, code: 'too_many_failed_attempts' });
});

test('a password set by a one-time link ends every session of the person, and voids the link', async () => {
  freshWindow();
  const first = await signIn('leaver@example.com', PASSWORD, '10.6.0.1');
  const second = await signIn('leaver@example.com', PASSWORD, '10.6.0.2');
  const token = await accounts.passwordLink('leaver@example.com', null, { kind: 'admin-token' }, undefined);
  expect(await accounts.setPasswordWithLink(token, 'the password from the link', '10.6.0.3')).toBe('leaver@example.com');
  expect(await sessions.resolve(first.token)).toBeUndefined();
  expect(await sessions.resolve(second.token)).toBeUndefined();
  await expect(accounts.setPasswordWithLink(token, 'a second try at it', '10.6.0.3')).rejects.toMatchObject({ status: 400, code: 'invalid_link' });
  await signIn('leaver@example.com', 'the password from the link', '10.6.0.3');
});

test('signing out everywhere ends every session of the person, this one too, and no one else’s', async () => {
  freshWindow();
  const mine = await Promise.all(['10.7.0.1', '10.7.0.2', '10.7.0.3'].map((client) => signIn('everywhere@example.com', PASSWORD, client)));
  const theirs = await signIn('other@example.com', PASSWORD, '10.7.0.1');
  expect(await sessions.endEverywhere(mine[0]!.signedIn, '10.7.0.1')).toBe(3);
  for (const { token } of mine) expect(await sessions.resolve(token)).toBeUndefined();
  expect(await sessions.resolve(theirs.token)).toBeDefined();
  expect((await store.listAudit(null, 1000)).filter((e) => e.action === 'session.ended_everywhere')).toMatchObject([{ actor: 'everywhere@example.com', details: { sessions: 3 } }]);
});

test('the cookie is __Host- prefixed for the whole site, and two cookies of that name are no session', () => {
  expect(sessionCookie('tok', 60)).toBe('__Host-chatgate_session=tok; Path=/; Max-Age=60; HttpOnly; Secure; SameSite=Strict');
  expect(sessionCookie('', 0)).toBe('__Host-chatgate_session=; Path=/; Max-Age=0; HttpOnly; Secure; SameSite=Strict');
  expect(sessionTokenOf(`theme=dark; ${SESSION_COOKIE}=abc`)).toBe('abc');
  expect(sessionTokenOf(`${SESSION_COOKIE}=planted; ${SESSION_COOKIE}=abc`)).toBeUndefined();
  expect(sessionTokenOf(`${SESSION_COOKIE}=abc;${SESSION_COOKIE} =planted`)).toBeUndefined();
  expect(sessionTokenOf('chatgate_session=abc')).toBeUndefined(); // the old name, which any subdomain could set
  expect(sessionTokenOf('__host-chatgate_session=abc')).toBeUndefined();
});
