/**
 * Who an OpenID Connect sign-in is: the provider's issuer and subject (`iss`, `sub`), bound to a
 * person on their first sign-in; an email alone never makes someone a person who is known here
 * (OpenID Connect Core 5.7). Against a real OpenID Provider on loopback (test/helpers/oidc-provider.mjs)
 * whose people include other subjects that say Kim's email: without email_verified, with null, "no"
 * and the string "true", with a look-alike (the Kelvin sign), and verified. Kim is a platform admin
 * with a password before she ever signs in through the provider. The gateway runs as its own process
 * on the file store, with an admin token to set people up as an operator would.
 *
 * Each attacker's ID token is first fetched by another client of the provider, to show the provider
 * really says what the test claims (a missing claim, null, "no"...), before it is tried on the gateway.
 */
import { randomBytes } from 'node:crypto';
import { SqliteDatabase } from '../../src/store/sqlite/database';
import path from 'node:path';
import type { GatewayProcess } from '../helpers/gateway-process';
import { request, type RawResponse } from '../helpers/http';
import { attemptSignIn, Browser, expectRefused, payloadOf, refusalOf, sessionCookieOf, startOidcSites, stopOidcSites, tokensFor, type ProviderProcess } from '../helpers/oidc';
import { eventually } from '../helpers/time';

jest.setTimeout(60_000);

const CLIENT_ID = 'chatgate';
const SECRET = `gateway-secret-${randomBytes(16).toString('hex')}`;
const ADMIN_TOKEN = `admin-${randomBytes(16).toString('hex')}`;
const PEEK = { client_id: 'peek', client_secret: `peek-secret-${randomBytes(16).toString('hex')}`, redirect_uris: ['https://peek.example/callback'] };
const KIM_PASSWORD = `kim's password ${randomBytes(8).toString('hex')}`;
const OLGA_PASSWORD = `olga's password ${randomBytes(8).toString('hex')}`;

const NOT_SIGNED_IN = { status: 401, code: 'oidc_sign_in_failed' };
const OTHER_SUBJECT = { status: 403, code: 'oidc_identity_conflict' };

let dir: string;
let provider: ProviderProcess;
let gw: GatewayProcess;
const secrets = new Set<string>([SECRET, ADMIN_TOKEN, PEEK.client_secret, KIM_PASSWORD, OLGA_PASSWORD]);
const sites = () => ({ provider, gw });

beforeAll(async () => {
  ({ dir, provider, gw } = await startOidcSites('oidc-identities', {
    mappings: [
      { value: 'team-b-members', account: 'team-b', role: 'member' },
      { value: 'platform-admins', admin: true },
    ],
    secret: SECRET,
    env: { CHATGATE_ADMIN_TOKEN: ADMIN_TOKEN },
  }));
  await provider.send({ cmd: 'configure', clients: [{ client_id: CLIENT_ID, client_secret: SECRET, redirect_uris: [`${gw.url}/console/api/oidc/callback`] }, PEEK] });

  // Kim: a platform admin, owner of kims-team, with a password; known before any sign-in through the provider.
  const team = await admin('POST', '/accounts', { name: 'kims-team' });
  expect(team.status).toBe(201);
  expect((await admin('POST', `/accounts/${team.json<{ id: string }>().id}/members`, { email: 'kim@example.com', role: 'owner', password: KIM_PASSWORD })).status).toBe(201);
  expect((await admin('PATCH', '/people/kim@example.com', { admin: true })).status).toBe(200);
});

afterAll(() => stopOidcSites({ dir, provider, gw }));

test('an ID token whose email_verified is missing, null, "no" or the string "true" does not sign in as the platform admin who has that email', async () => {
  const kim = await passwordSignIn('kim@example.com', KIM_PASSWORD);
  expect(kim.status).toBe(200);
  for (const [login, said, shown] of [
    ['mallory-missing', undefined, 'missing'],
    ['mallory-null', null, 'null'],
    ['mallory-no', 'no', '"no"'],
    ['mallory-string', 'true', '"true"'],
  ] as const) {
    // What the provider says to any client of it: Kim's email, and this email_verified.
    const claims = payloadOf((await tokensFor(sites(), PEEK, login, { seen: secrets })).idToken);
    expect(claims).toMatchObject({ sub: login, email: 'kim@example.com', groups: ['platform-admins'] });
    if (said === undefined) expect(claims).not.toHaveProperty('email_verified');
    else expect(claims.email_verified).toEqual(said);

    const { browser, response } = await attemptSignIn(sites(), login, secrets);
    expectRefused(response, NOT_SIGNED_IN);
    expect((await refusalOf(gw, response)).reason).toBe(
      `the identity provider does not say this email is verified (email_verified is ${shown}, not true), and a person here has it`,
    );
    expect(await browser.sessionStatus()).toBe(401);
  }
  // Nothing of Kim's changed: her password and her session still work, and no subject is bound to her.
  expect(await sessionStatus(kim)).toBe(200);
  expect(people().find((person) => person.email === 'kim@example.com')).toMatchObject({ admin: true, passwordHash: expect.any(String) });
  expect(identities()).toEqual([]);
});

test('a look-alike email (a Kelvin sign for the K) neither signs in as kim@ nor makes a person of its own', async () => {
  const claims = payloadOf((await tokensFor(sites(), PEEK, 'mallory-kelvin', { seen: secrets })).idToken);
  expect(claims).toMatchObject({ email: '\u212Aim@example.com', email_verified: true });
  expect(String(claims.email).toLowerCase()).toBe('kim@example.com'); // what Unicode lower-casing makes of it

  const { browser, response } = await attemptSignIn(sites(), 'mallory-kelvin', secrets);
  expectRefused(response, NOT_SIGNED_IN);
  expect((await refusalOf(gw, response)).reason).toMatch(/changes under Unicode NFKC normalization/);
  expect(await browser.sessionStatus()).toBe(401);
  expect(people().map((person) => person.email)).not.toContainEqual(expect.stringContaining('\u212A'));
  expect(identities()).toEqual([]);
});

test("Kim's first sign-in binds her subject: her password is removed and her sessions end; then another subject with her verified email is refused, logged and audited", async () => {
  const byPassword = await passwordSignIn('kim@example.com', KIM_PASSWORD);
  expect(byPassword.status).toBe(200);

  const { browser: kim, response } = await attemptSignIn(sites(), 'kim@example.com', secrets);
  expect(response.status).toBe(302);
  // The provider says Kim@Example.com: the person here is kim@example.com, a platform admin still.
  expect(await kim.session()).toMatchObject({ email: 'kim@example.com', admin: true, via: 'oidc' });
  expect(identities()).toEqual([expect.objectContaining({ issuer: provider.issuer, subject: 'kim@example.com', email: 'kim@example.com' })]);
  const bound = await eventually(() => gw.log.find((line) => line.log === 'audit' && line.action === 'identity.bound' && line.target === 'kim@example.com'));
  expect(bound).toMatchObject({ actor: 'oidc', details: { issuer: provider.issuer, subject: 'kim@example.com', created: false, passwordRemoved: true, sessionsEnded: 2 } });

  // The sessions her password opened are over, and her password no longer signs in.
  expect(await sessionStatus(byPassword)).toBe(401);
  expect(people().find((person) => person.email === 'kim@example.com')).toMatchObject({ admin: true, passwordHash: null });
  expect((await passwordSignIn('kim@example.com', KIM_PASSWORD)).status).toBe(401);
  expect(await kim.sessionStatus()).toBe(200);

  // Another subject of the same provider, with Kim's email verified, is not Kim.
  const claims = payloadOf((await tokensFor(sites(), PEEK, 'mallory-second', { seen: secrets })).idToken);
  expect(claims).toMatchObject({ sub: 'mallory-second', email: 'kim@example.com', email_verified: true });
  const second = await attemptSignIn(sites(), 'mallory-second', secrets);
  expectRefused(second.response, OTHER_SUBJECT);
  const refusal = await refusalOf(gw, second.response);
  expect(refusal).toMatchObject({ reason: 'a person with this email is bound to another subject of this identity provider', email: 'kim@example.com' });
  expect(await second.browser.sessionStatus()).toBe(401);
  const failed = await eventually(() =>
    gw.log.find((line) => line.log === 'audit' && line.action === 'session.failed' && (line.details as { reason?: string }).reason === refusal.reason),
  );
  expect(failed).toMatchObject({ actor: 'oidc', target: 'kim@example.com', details: { via: 'oidc' } });

  // Kim signs in again by her subject; the unverified ones are still refused.
  const again = await attemptSignIn(sites(), 'kim@example.com', secrets);
  expect(again.response.status).toBe(302);
  expect(await again.browser.session()).toMatchObject({ email: 'kim@example.com', admin: true });
  expectRefused((await attemptSignIn(sites(), 'mallory-missing', secrets)).response, NOT_SIGNED_IN);
  expect(identities()).toHaveLength(1);
});

test('the invite back door is shut: the password an inviter set through the link stops working once the real person signs in through the provider', async () => {
  const team = await admin('POST', '/accounts', { name: 'olgas-team' });
  expect((await admin('POST', `/accounts/${team.json<{ id: string }>().id}/members`, { email: 'olga@example.com', role: 'owner', password: OLGA_PASSWORD })).status).toBe(201);
  const olga = await passwordSignIn('olga@example.com', OLGA_PASSWORD);
  expect(olga.status).toBe(200);

  // Olga invites Frank, keeps his one-time link, sets his password herself, signs in as him, removes him.
  const invited = await consoleCall(olga, 'POST', '/members', { email: 'frank@example.com', role: 'member' });
  expect(invited.status).toBe(201);
  const token = invited.json<{ passwordLink: string }>().passwordLink.split('#set-password=')[1]!;
  secrets.add(token);
  const framesPassword = `olga knows this ${randomBytes(8).toString('hex')}`;
  secrets.add(framesPassword);
  expect((await consoleCall(undefined, 'POST', '/password', { token, password: framesPassword })).status).toBe(200);
  const asFrank = await passwordSignIn('frank@example.com', framesPassword);
  expect(asFrank.status).toBe(200);
  expect((await consoleCall(olga, 'DELETE', '/members/frank@example.com')).status).toBe(204);

  // The real Frank signs in through the provider and is mapped to team-b.
  const { browser: frank, response } = await attemptSignIn(sites(), 'frank@example.com', secrets);
  expect(response.status).toBe(302);
  expect(await frank.session()).toMatchObject({ email: 'frank@example.com', via: 'oidc', accounts: [{ name: 'team-b', role: 'member' }] });
  const bound = await eventually(() => gw.log.find((line) => line.log === 'audit' && line.action === 'identity.bound' && line.target === 'frank@example.com'));
  expect(bound).toMatchObject({ details: { created: false, passwordRemoved: true, sessionsEnded: 1 } });

  // Olga's session as Frank is over, and the password she set no longer signs in.
  expect(await sessionStatus(asFrank)).toBe(401);
  expect(people().find((person) => person.email === 'frank@example.com')).toMatchObject({ passwordHash: null });
  const refused = await passwordSignIn('frank@example.com', framesPassword);
  expect(refused.status).toBe(401);
  expect(refused.json().error.code).toBe('invalid_credentials');
  expect(await frank.sessionStatus()).toBe(200);
});

test('a person an admin let keep a password (passwordWithOidc) keeps it when first bound; their sessions still end', async () => {
  const team = await admin('POST', '/accounts', { name: 'erins-team' });
  const password = `erin's password ${randomBytes(8).toString('hex')}`;
  secrets.add(password);
  expect((await admin('POST', `/accounts/${team.json<{ id: string }>().id}/members`, { email: 'erin@example.com', role: 'owner', password })).status).toBe(201);
  expect((await admin('PATCH', '/people/erin@example.com', { passwordWithOidc: true })).json()).toMatchObject({ passwordWithOidc: true });
  const byPassword = await passwordSignIn('erin@example.com', password);
  expect(byPassword.status).toBe(200);

  // Erin is in no mapped group, but known here: she is linked, and bound.
  const { browser, response } = await attemptSignIn(sites(), 'erin@example.com', secrets);
  expect(response.status).toBe(302);
  expect(await browser.session()).toMatchObject({ email: 'erin@example.com', accounts: [{ name: 'erins-team', role: 'owner' }] });
  const bound = await eventually(() => gw.log.find((line) => line.log === 'audit' && line.action === 'identity.bound' && line.target === 'erin@example.com'));
  expect(bound).toMatchObject({ details: { created: false, passwordRemoved: false, sessionsEnded: 1 } });
  expect(await sessionStatus(byPassword)).toBe(401);
  expect((await passwordSignIn('erin@example.com', password)).status).toBe(200);
});

test('someone nobody knows, whose provider never sends email_verified (as Entra ID), is made a person and bound on first sign-in when a mapping matches', async () => {
  const claims = payloadOf((await tokensFor(sites(), PEEK, 'grace@example.com', { seen: secrets })).idToken);
  expect(claims).not.toHaveProperty('email_verified');
  const { browser, response } = await attemptSignIn(sites(), 'grace@example.com', secrets);
  expect(response.status).toBe(302);
  expect(await browser.session()).toMatchObject({ email: 'grace@example.com', accounts: [{ name: 'team-b', role: 'member' }] });
  const bound = await eventually(() => gw.log.find((line) => line.log === 'audit' && line.action === 'identity.bound' && line.target === 'grace@example.com'));
  expect(bound).toMatchObject({ details: { subject: 'grace@example.com', created: true, passwordRemoved: false, sessionsEnded: 0 } });
});

test('two subjects with one new email signing in at the same moment: one is bound, the other refused', async () => {
  // Both go through the provider first; then both callbacks reach the gateway at once.
  const ready = await Promise.all(
    ['hana@example.com', 'hana-twin'].map(async (login) => {
      const browser = new Browser(sites());
      const started = await browser.get(new URL(`${gw.url}/console/api/oidc/login`));
      const callback = await browser.signInAtProvider(new URL(String(started.headers.location)), login);
      secrets.add(callback.searchParams.get('code')!);
      return { login, browser, callback };
    }),
  );
  const answers = await Promise.all(ready.map(({ browser, callback }) => browser.get(callback)));
  const statuses = answers.map((answer) => answer.status).sort();
  expect(statuses).toEqual([302, 403]);
  const loser = answers.find((answer) => answer.status === 403)!;
  expectRefused(loser, OTHER_SUBJECT);
  const winner = ready[answers.findIndex((answer) => answer.status === 302)]!;
  expect(identities().filter((identity) => identity.email === 'hana@example.com')).toEqual([expect.objectContaining({ subject: winner.login })]);
  expect(await winner.browser.session()).toMatchObject({ email: 'hana@example.com' });
});

test('no code, token, password or secret is in the gateway’s log', async () => {
  await eventually(() => {
    const audited = gw.log.filter((line) => line.log === 'audit' && line.action === 'session.failed' && (line.details as { via?: string }).via === 'oidc').length;
    return audited === gw.log.filter((line) => line.msg === 'OIDC sign-in refused').length ? true : undefined;
  });
  const everything = `${gw.log.map((line) => JSON.stringify(line)).join('\n')}\n${gw.stderr()}`;
  for (const secret of secrets) expect(everything).not.toContain(secret);
  expect(everything).not.toMatch(/eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/);
});

function admin(method: string, urlPath: string, body?: unknown): Promise<RawResponse> {
  return request(gw.adminUrl, {
    method,
    path: `/admin/api${urlPath}`,
    headers: { authorization: `Bearer ${ADMIN_TOKEN}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

/** A console request from the console's page: its Origin, and the session cookie of `signedIn` if given. */
function consoleCall(signedIn: RawResponse | undefined, method: string, urlPath: string, body?: unknown): Promise<RawResponse> {
  const cookie = signedIn && sessionCookieOf(signedIn)?.split(';')[0];
  return request(gw.url, {
    method,
    path: `/console/api${urlPath}`,
    ca: gw.ca,
    headers: { origin: gw.url, ...(cookie ? { cookie } : {}), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

async function passwordSignIn(email: string, password: string): Promise<RawResponse> {
  const answer = await consoleCall(undefined, 'POST', '/session', { email, password });
  const cookie = sessionCookieOf(answer);
  if (cookie) secrets.add(cookie.split(';')[0]!.split('=')[1]!);
  return answer;
}

async function sessionStatus(signedIn: RawResponse): Promise<number> {
  return (await consoleCall(signedIn, 'GET', '/session')).status;
}

/** What the gateway's SQLite store keeps, read from its file by a connection of the test's own. */
function stored<R>(sql: string): R[] {
  const store = new SqliteDatabase(path.join(dir, 'gw-store.db'), 1000);
  try {
    return store.all<R>(sql);
  } finally {
    store.close();
  }
}
const people = () =>
  stored<{ email: string; admin: number; password_hash: string | null }>('select email, admin, password_hash from chatgate_people').map((row) => ({ email: row.email, admin: row.admin === 1, passwordHash: row.password_hash }));
const identities = () => stored<{ issuer: string; subject: string; email: string }>('select issuer, subject, email from chatgate_identities');
