/**
 * The console's password sign-in under attack, on a gateway with the file store, from real client
 * addresses (the test binds 127.0.0.2, .3 and .4 as its sockets' local address):
 * - 40 concurrent guesses at one email from one address: exactly maxFailures are checked, the others
 *   refused without a check (each attempt is counted before its password is, in one store step);
 * - the owner, from another address, with the right password, signs in while the guesser is refused;
 * - 80 concurrent sign-ins with made-up emails: those past the bounded hashing queue are refused at
 *   once, at no store write, and API keys made just before (never cached) answer 200 all along.
 * The window is a day here, so that no test straddles a window's end.
 */
import { randomBytes } from 'node:crypto';
import { SqliteKeyStore } from '../../src/store/sqlite/store';
import { gatewayWithWorker } from '../helpers/fixture';
import { bearer, chatBody, request, type RawResponse } from '../helpers/http';

const TOKEN = 'admin-token-for-the-sign-in-throttle';
const PASSWORD = 'the owner password, long enough';
const MAX_FAILURES = 5;
// The store's deadline is 5 s here, not 1: a test machine running other suites at once has been seen to
// take longer than a second for one file-store write under these bursts, which is not what these tests test.
const f = gatewayWithWorker({
  admin: { host: '127.0.0.1', port: 0, token: TOKEN },
  console: { signIn: { maxFailures: MAX_FAILURES, windowMs: 86_400_000 } },
  keyStore: { timeoutMs: 5000 },
});

const admin = (method: string, path: string, body?: unknown) =>
  request(f.gw.adminUrl, { method, path: `/admin/api${path}`, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });

const signIn = (email: string, password: string, from: string): Promise<RawResponse> =>
  request(f.gw.url, {
    ca: f.gw.ca,
    path: '/console/api/session',
    headers: { origin: `https://${new URL(f.gw.url).host}`, 'content-type': 'application/json' },
    body: JSON.stringify({ email, password }),
    localAddress: from,
  });

/** 401, or the status and code of a refusal. */
const outcome = (response: RawResponse) => (response.status === 401 ? '401' : `${response.status} ${response.json().error.code}`);
const count = (outcomes: string[], wanted: string) => outcomes.filter((o) => o === wanted).length;

let team: string;
beforeAll(async () => {
  team = (await admin('POST', '/accounts', { name: 'guessed-at' })).json<{ id: string }>().id;
  for (const email of ['guessed@example.com', 'owner@example.com']) {
    expect((await admin('POST', `/accounts/${team}/members`, { email, role: 'owner', password: PASSWORD })).status).toBe(201);
  }
});

async function sessionAudit(email: string): Promise<Array<{ action: string; client: string; details: Record<string, unknown> }>> {
  const events = (await admin('GET', `/accounts/${team}/audit`)).json<{ data: Array<{ action: string; target: string; client: string; details: Record<string, unknown> }> }>().data;
  return events.filter((e) => e.target === email && e.action.startsWith('session.'));
}

test('40 concurrent guesses at one email from one address: exactly maxFailures are checked, the rest refused unchecked', async () => {
  const answers = await Promise.all(Array.from({ length: 40 }, (_, i) => signIn('guessed@example.com', `wrong guess number ${i}`, '127.0.0.2')));
  const outcomes = answers.map(outcome);
  // Only wrong passwords and refusals: anything else is shown whole.
  expect(outcomes.filter((o) => o !== '401' && o !== '429 too_many_failed_attempts' && o !== '429 sign_in_busy')).toEqual([]);
  expect(count(outcomes, '401')).toBe(MAX_FAILURES);
  // Past the limit, 429: counted and refused, or refused before anything was counted (the hashing queue was full).
  expect(count(outcomes, '401') + count(outcomes, '429 too_many_failed_attempts') + count(outcomes, '429 sign_in_busy')).toBe(40);
  expect(count(outcomes, '429 too_many_failed_attempts')).toBeGreaterThan(0);
  for (const refused of answers.filter((a) => a.status === 429)) expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);

  // Now even the right password is refused from there, without a check, and the message says where.
  const right = await signIn('guessed@example.com', PASSWORD, '127.0.0.2');
  expect(right.status).toBe(429);
  expect(right.json().error).toMatchObject({ type: 'rate_limit_error', code: 'too_many_failed_attempts', param: null });
  expect(right.json().error.message).toContain('from this address');
  expect(right.headers['set-cookie']).toBeUndefined();

  // One audit row per burst, not per attempt: the first failure and the first refusal.
  const rows = (await sessionAudit('guessed@example.com')).filter((e) => e.action !== 'session.slowed');
  expect(rows.map((e) => e.action).sort()).toEqual(['session.failed', 'session.throttled']);
  expect(rows.every((e) => e.client === '127.0.0.2')).toBe(true);
  expect(JSON.stringify(rows)).not.toContain('wrong guess');
});

test('the owner signs in from 127.0.0.3 with the right password while the guesser at 127.0.0.2 is refused', async () => {
  const burst = (await Promise.all(Array.from({ length: 40 }, (_, i) => signIn('owner@example.com', `wrong guess number ${i}`, '127.0.0.2')))).map(outcome);
  expect(count(burst, '401')).toBe(MAX_FAILURES);
  // The guesser goes on (with the right password, even) while the owner signs in from elsewhere.
  const [owner, ...guesser] = await Promise.all([signIn('owner@example.com', PASSWORD, '127.0.0.3'), ...Array.from({ length: 10 }, () => signIn('owner@example.com', PASSWORD, '127.0.0.2'))]);
  expect(owner.status).toBe(200);
  expect(String(owner.headers['set-cookie'])).toMatch(/^__Host-chatgate_session=/);
  expect(guesser.map(outcome)).toEqual(Array.from({ length: 10 }, () => '429 too_many_failed_attempts'));
});

test('80 concurrent sign-ins with made-up emails: past the hashing queue refused at once at no store write, and fresh keys answer 200 all along', async () => {
  const keys = await Promise.all(Array.from({ length: 16 }, (_, i) => f.gw.issueKey({ name: `fresh ${i}` })));
  const run = randomBytes(4).toString('hex');
  let floodOver = false;
  const flood = Promise.all(Array.from({ length: 80 }, (_, i) => signIn(`made-up-${run}-${i}@example.com`, 'a made up password', '127.0.0.4'))).finally(() => (floodOver = true));
  // One fresh key after another while the flood lasts (each one's first use: never in the cache).
  const served: Array<{ status: number; body: string }> = [];
  for (const { key } of keys) {
    if (floodOver) break;
    const response = await request(f.gw.url, { ca: f.gw.ca, headers: bearer(key), body: chatBody() });
    served.push({ status: response.status, body: response.status === 200 ? '' : response.body });
  }
  const outcomes = (await flood).map(outcome);

  expect(served.length).toBeGreaterThan(1);
  expect(served).toEqual(served.map(() => ({ status: 200, body: '' })));
  // Every one is a wrong password or a refusal before any store write: nothing else (shown whole when not).
  expect(outcomes.filter((o) => o !== '401' && o !== '429 sign_in_busy')).toEqual([]);
  expect(count(outcomes, '429 sign_in_busy')).toBeGreaterThan(0);
  // What the store kept: a counter pair for each sign-in that was checked, nothing for those refused at
  // once, and no audit row for an email of nobody.
  const stored = new SqliteKeyStore(f.gw.storeFile);
  try {
    const pattern = `%made-up-${run}-%`;
    expect(stored.sql.all('select name from chatgate_counters where name like ?', pattern)).toHaveLength(2 * count(outcomes, '401'));
    expect(stored.sql.all('select id from chatgate_audit where target like ?', pattern)).toEqual([]);
  } finally {
    await stored.close();
  }
});
