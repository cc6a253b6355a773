/**
 * Console sessions on a real file store, with the clock in the test's hands: the idle and absolute
 * expiry, use that keeps a session alive, and a sign-in lockout that lifts by itself.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Auditor } from '../../src/accounts/audit';
import { hashPassword } from '../../src/accounts/passwords';
import { Sessions } from '../../src/accounts/sessions';
import { FileKeyStore } from '../../src/store/file';
import { createLogger } from '../../src/telemetry/log';

const MINUTE = 60_000;
const PASSWORD = 'correct horse battery staple';
let dir: string;
let store: FileKeyStore;
let clock = Date.parse('2026-11-27T10:00:00Z');
let sessions: Sessions;

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-sessions-'));
  store = new FileKeyStore(path.join(dir, 'keys.json'));
  const auditor = new Auditor(store, createLogger('silent'));
  sessions = new Sessions(store, auditor, { idleMs: 30 * MINUTE, absoluteMs: 120 * MINUTE, signIn: { maxFailures: 3, windowMs: 15 * MINUTE } }, () => new Date(clock));
  await store.putPerson({ email: 'dev@example.com', admin: false, passwordHash: await hashPassword(PASSWORD), createdAt: new Date(clock).toISOString() });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

test('a session unused for idleMs ends, and is gone from the store', async () => {
  const { token, signedIn } = await sessions.signInWithPassword('dev@example.com', PASSWORD, undefined);
  clock += 29 * MINUTE;
  expect((await sessions.resolve(token))?.person.email).toBe('dev@example.com');
  clock += 29 * MINUTE; // 58 minutes after sign-in, 29 after the last use: still live
  expect(await sessions.resolve(token)).toBeDefined();
  clock += 30 * MINUTE;
  expect(await sessions.resolve(token)).toBeUndefined();
  expect(await store.findSession(signedIn.session.digest)).toBeUndefined();
});

test('a session in use still ends absoluteMs after sign-in', async () => {
  const { token } = await sessions.signInWithPassword('dev@example.com', PASSWORD, undefined);
  for (let minutes = 20; minutes < 120; minutes += 20) {
    clock += 20 * MINUTE;
    expect(await sessions.resolve(token)).toBeDefined();
  }
  clock += 20 * MINUTE; // 120 minutes after sign-in, 20 after the last use
  expect(await sessions.resolve(token)).toBeUndefined();
});

test('repeated wrong passwords lock the email out for the window, then it lifts by itself', async () => {
  for (let i = 0; i < 3; i++) await expect(sessions.signInWithPassword('dev@example.com', 'wrong password here', undefined)).rejects.toMatchObject({ status: 401, code: 'invalid_credentials' });
  await expect(sessions.signInWithPassword('dev@example.com', PASSWORD, undefined)).rejects.toMatchObject({ status: 429, code: 'too_many_failed_attempts' });
  clock += 15 * MINUTE;
  expect((await sessions.signInWithPassword('dev@example.com', PASSWORD, undefined)).signedIn.person.email).toBe('dev@example.com');
});
