/**
 * The sign-in throttle across replicas: two gateway processes on one PostgreSQL, 40 concurrent guesses
 * at one email from one address split across both. Each attempt is counted in the shared store, in
 * one atomic step, before its password is checked: exactly maxFailures are checked in all, whichever
 * replica took them, and the owner still signs in from another address through either.
 */
import { startReplicas, type GatewayProcess, type Replicas } from '../helpers/gateway-process';
import { request, type RawResponse } from '../helpers/http';

const TOKEN = 'sign-in-throttle-shared-admin-token';
const PASSWORD = 'a password for both replicas';
const MAX_FAILURES = 5;
let replicas: Replicas;
let a: GatewayProcess;
let b: GatewayProcess;
let team: string;

const admin = (method: string, apiPath: string, body?: unknown) => replicas.admin(method, apiPath, body);

beforeAll(async () => {
  replicas = await startReplicas('throttle-shared', TOKEN, {
    providers: { mock: { workers: ['http://127.0.0.1:9'] } }, // never called here
    // A day's window, so that no burst straddles a window's end.
    console: { signIn: { maxFailures: MAX_FAILURES, windowMs: 86_400_000 } },
  });
  ({ a, b } = replicas);
  team = (await admin('POST', '/accounts', { name: 'shared-guessed-at' })).json<{ id: string }>().id;
  expect((await admin('POST', `/accounts/${team}/members`, { email: 'owner@example.com', role: 'owner', password: PASSWORD })).status).toBe(201);
});
afterAll(() => replicas?.stop());

const signIn = (replica: GatewayProcess, password: string, from: string): Promise<RawResponse> =>
  request(replica.url, {
    ca: replica.ca,
    path: '/console/api/session',
    headers: { origin: `https://${new URL(replica.url).host}`, 'content-type': 'application/json' },
    body: JSON.stringify({ email: 'owner@example.com', password }),
    localAddress: from,
  });
const outcome = (response: RawResponse) => (response.status === 401 ? '401' : `${response.status} ${response.json().error.code}`);

test('40 concurrent guesses split across two replicas: still exactly maxFailures checked, and the owner signs in from elsewhere', async () => {
  const answers = await Promise.all(Array.from({ length: 40 }, (_, i) => signIn(i % 2 === 0 ? a : b, `wrong guess number ${i}`, '127.0.0.2')));
  const outcomes = answers.map(outcome);
  expect(outcomes.filter((o) => o === '401')).toHaveLength(MAX_FAILURES);
  expect(outcomes.filter((o) => o !== '401' && o !== '429 too_many_failed_attempts' && o !== '429 sign_in_busy')).toEqual([]);
  // Both replicas refused some: the count is the store's, not a process's.
  for (const half of [0, 1]) expect(answers.filter((r, i) => i % 2 === half && r.status === 429).length).toBeGreaterThan(0);

  for (const replica of [a, b]) expect(outcome(await signIn(replica, PASSWORD, '127.0.0.2'))).toBe('429 too_many_failed_attempts');
  const owner = await signIn(b, PASSWORD, '127.0.0.3');
  expect(owner.status).toBe(200);

  const rows = (await admin('GET', `/accounts/${team}/audit`)).json<{ data: Array<{ action: string; target: string }> }>().data;
  const burst = rows.filter((e) => e.target === 'owner@example.com' && (e.action === 'session.failed' || e.action === 'session.throttled'));
  expect(burst.map((e) => e.action).sort()).toEqual(['session.failed', 'session.throttled']);
});
