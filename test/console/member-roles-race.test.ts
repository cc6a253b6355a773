/**
 * Two owners of one account demoting each other at once, each through another gateway replica over
 * one PostgreSQL: never both. One is made a member (200); the other is refused, with 409 last_owner
 * when it got past the owners-only check before the first change landed (the store's own rule), or
 * with 403 when it came after (no owner any more). The account always keeps an owner, and only the
 * change that was made is in the audit trail.
 */
import { startReplicas, type GatewayProcess, type Replicas } from '../helpers/gateway-process';
import { request, type RawResponse } from '../helpers/http';
import { startWorker, type WorkerProcess } from '../helpers/processes';

const TOKEN = 'member-roles-race-admin-token-0123456789';
const PASSWORD = 'a password for the duel';
const ROUNDS = 12;
let worker: WorkerProcess;
let replicas: Replicas;
let a: GatewayProcess;
let b: GatewayProcess;

beforeAll(async () => {
  worker = await startWorker();
  replicas = await startReplicas('member-roles-race', TOKEN, { providers: { mock: { workers: [worker.url] } } });
  ({ a, b } = replicas);
}, 60_000);
afterAll(async () => {
  await replicas?.stop();
  await worker?.stop();
});

const admin = (method: string, apiPath: string, body?: unknown) => replicas.admin(method, apiPath, body);

type Call = (method: string, apiPath: string, body?: unknown) => Promise<RawResponse>;

async function signIn(replica: GatewayProcess, email: string): Promise<Call> {
  const headers = { origin: `https://${new URL(replica.url).host}`, 'content-type': 'application/json' };
  const signedIn = await request(replica.url, { ca: replica.ca, method: 'POST', path: '/console/api/session', headers, body: JSON.stringify({ email, password: PASSWORD }) });
  expect(signedIn.status).toBe(200);
  const cookie = String(signedIn.headers['set-cookie']).split(';')[0]!;
  return (method, apiPath, body) => request(replica.url, { ca: replica.ca, method, path: `/console/api${apiPath}`, headers: { ...headers, cookie }, body: body === undefined ? undefined : JSON.stringify(body) });
}

/** The client error in the OpenAI shape, with this status and code. */
function refused(response: RawResponse, status: number, code: string) {
  expect(response.status).toBe(status);
  const body = response.json<{ error: Record<string, unknown> }>();
  expect(Object.keys(body)).toEqual(['error']);
  expect(Object.keys(body.error).sort()).toEqual(['code', 'message', 'param', 'type']);
  expect(body.error.code).toBe(code);
}

test(`two owners demoting each other at once through two replicas, ${ROUNDS} times over: one is made a member, the other refused, an owner always left`, async () => {
  const account = (await admin('POST', '/accounts', { name: 'duel' })).json<{ id: string }>().id;
  for (const email of ['ann@example.com', 'bob@example.com']) expect((await admin('POST', `/accounts/${account}/members`, { email, role: 'owner', password: PASSWORD })).status).toBe(201);
  const ann = await signIn(a, 'ann@example.com');
  const bob = await signIn(b, 'bob@example.com');
  const owners = async () =>
    (await admin('GET', `/accounts/${account}/members`))
      .json<{ data: { email: string; role: string }[] }>()
      .data.filter((m) => m.role === 'owner')
      .map((m) => m.email);
  const lastOwner: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const [byAnn, byBob] = await Promise.all([ann('PATCH', '/members/bob@example.com', { role: 'member' }), bob('PATCH', '/members/ann@example.com', { role: 'member' })]);
    expect([byAnn.status, byBob.status].filter((status) => status === 200)).toHaveLength(1);
    const [winner, loser] = byAnn.status === 200 ? (['ann@example.com', byBob] as const) : (['bob@example.com', byAnn] as const);
    if (loser.status === 409) {
      refused(loser, 409, 'last_owner');
      lastOwner.push(round);
    } else {
      refused(loser, 403, 'permission_denied');
    }
    expect(await owners()).toEqual([winner]);
    // The one made a member is an owner again for the next round.
    expect((await admin('PATCH', `/accounts/${account}/members/${winner === 'ann@example.com' ? 'bob' : 'ann'}@example.com`, { role: 'owner' })).status).toBe(200);
  }
  // Only the demotions that were made are audited (plus the admin's promotions back).
  const audit = (await admin('GET', `/accounts/${account}/audit`)).json<{ data: { action: string; actor: string }[] }>().data;
  expect(audit.filter((event) => event.action === 'member.role_changed' && event.actor !== 'admin-token')).toHaveLength(ROUNDS);
  console.log(`rounds refused with last_owner: ${lastOwner.length} of ${ROUNDS}`);
}, 120_000);
