/**
 * Console sign-in with OpenID Connect, against a real OpenID Provider: oidc-provider (certified) in
 * its own process over HTTPS on loopback (test/helpers/oidc-provider.mjs), with a certificate made
 * here that the gateway process trusts through NODE_EXTRA_CA_CERTS, as it would a company CA. The
 * gateway runs as its own process (`node dist/cli.js serve`): openid-client is ESM only and is loaded
 * with a real import(), which jest's module system does not run. The test plays the browser with
 * plain HTTPS requests and a cookie jar per site; the provider's sign-in step is one request
 * (GET /interaction/<uid>?login=<email>), the rest is the provider's own authorization endpoint,
 * redirects, cookies and token endpoint. Nothing of the flow is mocked.
 *
 * How each refusal is made, and why it is the real thing:
 * - wrong state: the provider's genuine redirect back, with its state changed or removed, or opened in
 *   another browser (the sign-in's transaction is bound to the browser that started it). The same
 *   code with the right state in the right browser then signs in: only the state was wrong.
 * - replayed code: the callback URL of a completed sign-in, sent again; and its code sent with the
 *   state of a new sign-in of the same browser, which the gateway does exchange: the provider refuses
 *   it (invalid_grant: the code was used, and its PKCE challenge is another's).
 * - another audience: the test completes a flow for a second client the provider knows (other-app),
 *   with the nonce of the gateway's sign-in under way, and gets an ID token the provider signed for
 *   other-app. The provider is told to answer the gateway's next token request with that ID token
 *   instead of its own: issuer, signature, expiry and nonce are all right; only `aud` is not.
 * - expired: the provider's clock is set two hours back (its Date.now, for everything it does), so the
 *   ID token it signs for the gateway's sign-in expired an hour ago by the gateway's clock: the
 *   condition a provider with a wrong clock, or a token held back, makes. (A one-second ID token TTL
 *   would do too, but the client's 30 s clock tolerance would make the test wait over 30 s.)
 * - altered claims: the provider's own ID token for the gateway, with `groups` changed after signing:
 *   the signature check against the provider's JWKS refuses it.
 * The gateway's warn line says which check refused each (the log is also checked for codes, tokens and
 * the client secret, which must never be in it).
 */
import { randomBytes } from 'node:crypto';
import { SqliteDatabase } from '../../src/store/sqlite/database';
import type { IncomingHttpHeaders } from 'node:http';
import https from 'node:https';
import path from 'node:path';
import { spawnGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import type { RawResponse } from '../helpers/http';
import { attemptSignIn, Browser, expectRefused, payloadOf, refusalOf, sessionCookieOf, startOidcSites, stopOidcSites, stopProvider, tokensFor, type ProviderProcess } from '../helpers/oidc';
import { eventually } from '../helpers/time';

jest.setTimeout(60_000);

const CLIENT_ID = 'chatgate';
const SECRET = `gateway-secret-${randomBytes(16).toString('hex')}`;
const OTHER_CLIENT = { client_id: 'other-app', client_secret: `other-secret-${randomBytes(16).toString('hex')}`, redirect_uris: ['https://other-app.example/callback'] };

/** What refusals answer (src/accounts/oidc.ts, `refusals`). */
const UNKNOWN_STATE = { status: 400, code: 'oidc_sign_in_expired' };
const NOT_SIGNED_IN = { status: 401, code: 'oidc_sign_in_failed' };
const NOT_MAPPED = { status: 403, code: 'permission_denied' };
const UNAVAILABLE = { status: 503, code: 'identity_provider_unavailable' };

/** The session cookie (scoped to /console, or, with its __Host- name, the whole site). */
const SESSION_COOKIE = /^(?:chatgate_session=[A-Za-z0-9_-]{43}; Path=\/console|__Host-chatgate_session=[A-Za-z0-9_-]{43}; Path=\/); Max-Age=\d+; HttpOnly; Secure; SameSite=Strict$/;

let dir: string;
let provider: ProviderProcess;
let gw: GatewayProcess;
let configured: Promise<unknown> | undefined;
/** Every code, token and secret the test saw: none may reach the gateway's log. */
const secrets = new Set<string>([SECRET, OTHER_CLIENT.client_secret]);

beforeAll(async () => {
  ({ dir, provider, gw } = await startOidcSites('oidc', {
    mappings: [
      { value: 'team-a-owners', account: 'team-a', role: 'owner' },
      { value: 'team-b-members', account: 'team-b', role: 'member' },
      { value: 'platform-admins', admin: true },
    ],
    console: { allowedHosts: ['Console.Example.TEST.'] },
    secret: SECRET,
  }));
});

afterAll(() => stopOidcSites({ dir, provider, gw }));

/** The provider knows the gateway's client once the gateway's callback URL (its port) is known. */
function configureProvider(): Promise<unknown> {
  configured ??= provider.send({ cmd: 'configure', clients: [{ client_id: CLIENT_ID, client_secret: SECRET, redirect_uris: [`${gw.url}/console/api/oidc/callback`] }, OTHER_CLIENT] });
  return configured;
}

test('the provider is discovered on first use: unreachable, the sign-in is refused (no session) and it is tried again on the next one', async () => {
  // The provider answers 503 until it is configured: discovery fails.
  const browser = new Browser({ provider, gw });
  const down = await browser.get(new URL(`${gw.url}/console/api/oidc/login`));
  expectRefused(down, UNAVAILABLE);
  expect(await eventually(() => gw.log.find((line) => String(line.msg).startsWith('OIDC: the identity provider could not be discovered')))).toMatchObject({ level: 40, issuer: provider.issuer });

  await configureProvider();
  const up = await browser.get(new URL(`${gw.url}/console/api/oidc/login`));
  expect(up.status).toBe(302);
  expect(await eventually(() => gw.log.find((line) => line.msg === 'OIDC: identity provider discovered'))).toBeDefined();
  expect(gw.log.filter((line) => line.msg === 'OIDC: identity provider discovered')).toEqual([expect.objectContaining({ issuer: provider.issuer, clientAuth: 'client_secret_basic' })]);
});

test('without console.publicUrl, the redirect address comes only from a Host named localhost, listen.host or in console.allowedHosts: any other gets 400, no redirect and nothing stored', async () => {
  await configureProvider();
  const oidcTokens = () => {
    const store = new SqliteDatabase(path.join(dir, 'gw-store.db'), 1000);
    try {
      return store.get<{ n: number }>("select count(*) as n from chatgate_tokens where kind = 'oidc'")!.n;
    } finally {
      store.close();
    }
  };
  const port = new URL(gw.url).port;
  // The certificate is checked for the name it is made for, whatever the Host header says.
  const start = (host: string) =>
    new Promise<{ status: number; headers: IncomingHttpHeaders; json(): { error: { code: string } } }>((resolve, reject) => {
      const req = https.request(`${gw.url}/console/api/oidc/login`, { method: 'GET', ca: gw.ca, servername: 'localhost', agent: false, headers: { host } }, (res) => {
        let body = '';
        res.on('data', (chunk: Buffer) => (body += chunk.toString('utf8')));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, json: () => JSON.parse(body) }));
      });
      req.on('error', reject);
      req.end();
    });

  const before = oidcTokens();
  for (const host of ['evil.test', `evil.test:${port}`, `localhost:1@evil.test`, `localhost.evil.test:${port}`, `127.0.0.1.evil.test`, `console.example.test.evil.test`, '[::1]', `evil.test/console`]) {
    const refused = await start(host);
    expect({ host, status: refused.status, code: refused.json().error.code }).toEqual({ host, status: 400, code: 'sign_in_host_not_allowed' });
    expect(refused.headers.location).toBeUndefined();
    expect(refused.headers['set-cookie']).toBeUndefined();
  }
  expect(oidcTokens()).toBe(before);
  const notStarted = () => gw.log.filter((line) => String(line.msg).startsWith('OIDC sign-in not started: the Host is not a name of this console'));
  expect(await eventually(() => (notStarted().length >= 8 ? notStarted() : undefined))).toHaveLength(8);

  // listen.host, localhost and a listed name, on any port and in any case, make the address.
  for (const [host, origin] of [
    [`127.0.0.1:${port}`, `https://127.0.0.1:${port}`],
    ['LocalHost:8443', 'https://localhost:8443'],
    ['console.example.test', 'https://console.example.test'],
    [`CONSOLE.example.test:${port}`, `https://console.example.test:${port}`],
  ] as const) {
    const started = await start(host);
    expect(started.status).toBe(302);
    expect(new URL(String(started.headers.location)).searchParams.get('redirect_uri')).toBe(`${origin}/console/api/oidc/callback`);
  }
  expect(oidcTokens()).toBe(before + 4);
});

test('a person in a mapped group signs in: provisioned on first sign-in, in the right account with the right role; the admin mapping makes a platform admin', async () => {
  await configureProvider();
  const alice = new Browser({ provider, gw });
  const login = await alice.get(new URL(`${gw.url}/console/api/oidc/login`));
  expect(login.status).toBe(302);
  const authorize = new URL(String(login.headers.location));
  expect(authorize.origin).toBe(provider.issuer);
  const params = Object.fromEntries(authorize.searchParams);
  expect(params).toMatchObject({
    client_id: CLIENT_ID,
    response_type: 'code',
    redirect_uri: `${gw.url}/console/api/oidc/callback`,
    scope: 'openid email profile groups',
    code_challenge_method: 'S256',
  });
  for (const name of ['state', 'nonce', 'code_challenge']) expect(params[name]).toMatch(/^[A-Za-z0-9_-]{43}$/);
  expect(String(login.headers['set-cookie'])).toMatch(/^chatgate_oidc=[A-Za-z0-9_-]{43}; Path=\/console\/api\/oidc; Max-Age=600; HttpOnly; Secure; SameSite=Lax$/);

  const back = await alice.get(await alice.signInAtProvider(authorize, 'alice@example.com'));
  expect(back.status).toBe(302);
  expect(back.headers.location).toBe('/console/');
  expect(sessionCookieOf(back)).toMatch(SESSION_COOKIE);
  const me = await alice.session();
  // The provider says Alice@Example.com: the gateway keys people by the lower-case email.
  expect(me).toMatchObject({ email: 'alice@example.com', admin: false, via: 'oidc', account: { name: 'team-a', role: 'owner' }, accounts: [{ name: 'team-a', role: 'owner' }] });

  const bob = await signIn('bob@example.com');
  expect(await bob.session()).toMatchObject({ email: 'bob@example.com', admin: false, via: 'oidc', account: { name: 'team-b', role: 'member' }, accounts: [{ name: 'team-b', role: 'member' }] });
  const carol = await signIn('carol@example.com');
  const carolSession = (await carol.session()) as { admin: boolean; accounts: Array<{ name: string; role: string | null }> };
  expect(carolSession.admin).toBe(true);
  expect(carolSession.accounts).toEqual(expect.arrayContaining([expect.objectContaining({ name: 'team-a', role: null }), expect.objectContaining({ name: 'team-b', role: null })]));

  // A second sign-in finds what the first made: one account, one membership, the same role.
  const again = await signIn('alice@example.com');
  expect(await again.session()).toMatchObject({ email: 'alice@example.com', accounts: [{ name: 'team-a', role: 'owner' }] });

  const audit = await eventually(() => {
    const lines = gw.log.filter((line) => line.log === 'audit');
    return lines.filter((line) => line.action === 'session.created').length >= 4 ? lines : undefined;
  });
  const byPeople = audit.filter((line) => String(line.actor).endsWith('@example.com'));
  expect(byPeople.filter((line) => line.action === 'account.created').map((line) => [line.actor, (line.details as { name: string }).name])).toEqual([
    ['alice@example.com', 'team-a'],
    ['bob@example.com', 'team-b'],
  ]);
  expect(byPeople.filter((line) => line.action === 'member.added').map((line) => [line.actor, line.target, (line.details as { role: string }).role])).toEqual([
    ['alice@example.com', 'alice@example.com', 'owner'],
    ['bob@example.com', 'bob@example.com', 'member'],
  ]);
  expect(audit.filter((line) => line.action === 'admin.granted' && line.actor === 'oidc')).toEqual([expect.objectContaining({ actor: 'oidc', target: 'carol@example.com', details: expect.objectContaining({ values: ['platform-admins'] }) })]);
  expect(audit.filter((line) => line.action === 'session.created').map((line) => (line.details as { via: string }).via)).toEqual(['oidc', 'oidc', 'oidc', 'oidc']);
});

test('an email the provider has not verified, and someone in no mapped group whom the gateway does not know, are refused', async () => {
  await configureProvider();
  const dave = await attempt('dave@example.com');
  expectRefused(dave.response, NOT_SIGNED_IN);
  expect((await dave.refusal).reason).toBe('the identity provider does not say this email is verified (email_verified is false)');

  const erin = await attempt('erin@example.com');
  expectRefused(erin.response, NOT_MAPPED);
  expect((await erin.refusal).reason).toMatch(/no mapping matches the 'groups' claim/);
  expect(await erin.browser.sessionStatus()).toBe(401);
});

test('a wrong state is refused with no session: changed, missing, or the sign-in started in another browser', async () => {
  await configureProvider();
  const browser = new Browser({ provider, gw });
  const login = await browser.get(new URL(`${gw.url}/console/api/oidc/login`));
  const callback = await browser.signInAtProvider(new URL(String(login.headers.location)), 'alice@example.com');
  secrets.add(callback.searchParams.get('code')!);

  const changed = new URL(callback);
  changed.searchParams.set('state', randomBytes(32).toString('base64url'));
  const missing = new URL(callback);
  missing.searchParams.delete('state');
  for (const url of [changed, missing]) {
    const refused = await browser.get(url);
    expectRefused(refused, UNKNOWN_STATE);
    expect((await refusalOf(gw, refused)).reason).toMatch(/state/);
  }
  expect(await browser.sessionStatus()).toBe(401);
  // The provider's genuine answer still signs in: only the state was wrong.
  const genuine = await browser.get(callback);
  expect(sessionCookieOf(genuine)).toMatch(SESSION_COOKIE);
  expect(await browser.session()).toMatchObject({ email: 'alice@example.com' });

  // A callback URL handed to another browser (login CSRF) is refused, and spent.
  const victim = new Browser({ provider, gw });
  const attacker = new Browser({ provider, gw });
  const started = await attacker.get(new URL(`${gw.url}/console/api/oidc/login`));
  const attackersCallback = await attacker.signInAtProvider(new URL(String(started.headers.location)), 'bob@example.com');
  secrets.add(attackersCallback.searchParams.get('code')!);
  const refused = await victim.get(attackersCallback);
  expectRefused(refused, UNKNOWN_STATE);
  expect((await refusalOf(gw, refused)).reason).toBe('the sign-in was started in another browser');
  expect(await victim.sessionStatus()).toBe(401);
  expectRefused(await attacker.get(attackersCallback), UNKNOWN_STATE);

  // A browser navigating (Accept: text/html) is sent back to the console, which says why.
  const navigating = await new Browser({ provider, gw }).get(changed, { accept: 'text/html,application/xhtml+xml,*/*;q=0.8' });
  expect(navigating.status).toBe(303);
  expect(navigating.headers.location).toBe('/console/#sign-in-error=oidc_sign_in_expired');
  expect(String(navigating.headers['set-cookie'])).not.toMatch(/chatgate_session=[A-Za-z0-9_-]/);
});

test('a replayed code is refused with no session: the same callback again, or its code with a new sign-in’s state', async () => {
  await configureProvider();
  const browser = new Browser({ provider, gw });
  const login = await browser.get(new URL(`${gw.url}/console/api/oidc/login`));
  const callback = await browser.signInAtProvider(new URL(String(login.headers.location)), 'bob@example.com');
  secrets.add(callback.searchParams.get('code')!);
  const replay = new Browser({ provider, gw }, browser); // the same browser, without the session the callback gives
  expect(sessionCookieOf(await browser.get(callback))).toMatch(SESSION_COOKIE);

  const again = await replay.get(callback);
  expectRefused(again, UNKNOWN_STATE);
  expect((await refusalOf(gw, again)).reason).toMatch(/used already/);

  // The same code under the state of a sign-in this browser really started: the gateway exchanges
  // it, and the provider refuses (the code was used, and its PKCE challenge is not this verifier's).
  const next = await replay.get(new URL(`${gw.url}/console/api/oidc/login`));
  const replayed = new URL(callback);
  replayed.searchParams.set('state', new URL(String(next.headers.location)).searchParams.get('state')!);
  const exchanged = await replay.get(replayed);
  expectRefused(exchanged, NOT_SIGNED_IN);
  expect((await refusalOf(gw, exchanged)).reason).toMatch(/invalid_grant/);
  expect(await replay.sessionStatus()).toBe(401);
});

test('an ID token the provider signed for another client (audience) is refused with no session', async () => {
  await configureProvider();
  const bob = new Browser({ provider, gw });
  const login = await bob.get(new URL(`${gw.url}/console/api/oidc/login`));
  const authorize = new URL(String(login.headers.location));
  const foreign = (await tokensFor({ provider, gw }, OTHER_CLIENT, 'bob@example.com', { nonce: authorize.searchParams.get('nonce')!, seen: secrets })).idToken;
  const claims = payloadOf(foreign);
  expect(claims).toMatchObject({ iss: provider.issuer, aud: OTHER_CLIENT.client_id, nonce: authorize.searchParams.get('nonce'), email: 'bob@example.com' });
  expect(claims.exp).toBeGreaterThan(Date.now() / 1000);
  await provider.send({ cmd: 'swap-id-token', clientId: CLIENT_ID, idToken: foreign });

  const callback = await bob.signInAtProvider(authorize, 'bob@example.com');
  secrets.add(callback.searchParams.get('code')!);
  const refused = await bob.get(callback);
  expectRefused(refused, NOT_SIGNED_IN);
  await replaced('swap');
  expect((await refusalOf(gw, refused)).reason).toMatch(/"aud" \(audience\)/);
  expect(await bob.sessionStatus()).toBe(401);
});

test('an expired ID token is refused with no session', async () => {
  await configureProvider();
  await provider.send({ cmd: 'clock', offsetSeconds: -7200 });
  try {
    const { response, refusal, browser } = await attempt('alice@example.com');
    expectRefused(response, NOT_SIGNED_IN);
    expect((await refusal).reason).toMatch(/"exp" \(expiration time\)/);
    expect(await browser.sessionStatus()).toBe(401);
  } finally {
    await provider.send({ cmd: 'clock', offsetSeconds: 0 });
  }
});

test('an ID token whose claims were changed after the provider signed it is refused: its signature is checked against the JWKS', async () => {
  await configureProvider();
  await provider.send({ cmd: 'tamper-id-token', clientId: CLIENT_ID, claims: { groups: ['platform-admins'] } });
  const { response, refusal, browser } = await attempt('bob@example.com');
  expectRefused(response, NOT_SIGNED_IN);
  await replaced('tamper');
  expect((await refusal).reason).toMatch(/signature/i);
  expect(await browser.sessionStatus()).toBe(401);
});

test('the provider gone between the sign-in and the callback: refused as unavailable, with no session', async () => {
  await configureProvider();
  const browser = new Browser({ provider, gw });
  const login = await browser.get(new URL(`${gw.url}/console/api/oidc/login`));
  const callback = await browser.signInAtProvider(new URL(String(login.headers.location)), 'alice@example.com');
  secrets.add(callback.searchParams.get('code')!);
  await stopProvider(provider);
  const refused = await browser.get(callback);
  expectRefused(refused, UNAVAILABLE);
  const line = await eventually(() => gw.log.find((entry) => entry.requestId === refused.headers['x-request-id'] && entry.level === 40));
  expect(line).toMatchObject({ msg: 'OIDC sign-in failed: the identity provider could not be reached', reason: expect.stringMatching(/fetch failed/) });
});

test('every refusal is in the audit trail; no code, token or client secret is in the gateway’s log', async () => {
  // Each refusal's warn line comes just before its audit line: wait for the last of those.
  const failed = await eventually(() => {
    const audited = gw.log.filter((line) => line.log === 'audit' && line.action === 'session.failed');
    return audited.length === gw.log.filter((line) => line.msg === 'OIDC sign-in refused').length ? audited : undefined;
  });
  expect(failed.length).toBeGreaterThanOrEqual(10);
  for (const line of failed) expect(line).toMatchObject({ accountId: null, actor: 'oidc', details: { via: 'oidc', reason: expect.any(String) } });

  const everything = `${gw.log.map((line) => JSON.stringify(line)).join('\n')}\n${gw.stderr()}`;
  for (const secret of secrets) expect(everything).not.toContain(secret);
  expect(everything).not.toMatch(/eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/); // no JWT of any kind
  expect(secrets.size).toBeGreaterThanOrEqual(6);
  // openid-client is loaded with a real import(): no require(esm), so no ExperimentalWarning.
  expect(everything).not.toMatch(/ExperimentalWarning|extra certs/i);
});

test('the client secret’s variable unset: the gateway does not start, and says which variable', async () => {
  const { listening } = spawnGatewayProcess(dir, 'unset', {
    keyStore: { type: 'sqlite', path: path.join(dir, 'unset-store.db') },
    providers: { mock: { workers: ['http://127.0.0.1:9'] } },
    upstream: { health: { enabled: false } },
    console: { oidc: { issuer: provider.issuer, clientId: CLIENT_ID, clientSecretEnv: 'CHATGATE_TEST_OIDC_SECRET_UNSET' } },
  });
  await expect(listening).rejects.toThrow(/CHATGATE_TEST_OIDC_SECRET_UNSET, which is not set/);
});

/** A whole sign-in that must succeed. */
async function signIn(email: string): Promise<Browser> {
  const { response, browser } = await attempt(email);
  expect(response.status).toBe(302);
  expect(sessionCookieOf(response)).toMatch(SESSION_COOKIE);
  return browser;
}

/** A whole sign-in: /login, the provider, the callback; with the gateway's warn line if it refused. */
async function attempt(login: string) {
  const { browser, response } = await attemptSignIn({ provider, gw }, login, secrets);
  return { browser, response, refusal: response.status >= 400 ? refusalOf(gw, response) : Promise.resolve({} as Record<string, unknown>) };
}

/** The provider reports it changed the ID token of its answer to the gateway (the report may trail the answer). */
function replaced(how: 'swap' | 'tamper'): Promise<unknown> {
  return eventually(() => provider.events.find((event) => event.event === 'id-token-replaced' && event.how === how && event.clientId === CLIENT_ID));
}

test('one address may start 30 sign-ins a minute: past that, 429 too_many_sign_ins and nothing is written', async () => {
  // Runs last: the other tests' sign-ins count towards this address's minute too.
  const browser = new Browser({ provider, gw });
  let refused: RawResponse | undefined;
  let started = 0;
  for (let i = 0; i < 40 && !refused; i++) {
    const response = await browser.get(new URL(`${gw.url}/console/api/oidc/login`));
    if (response.status === 429) refused = response;
    else {
      expect(response.status).toBe(302);
      started++;
    }
  }
  expect(refused).toBeDefined();
  expect(started).toBeLessThanOrEqual(30);
  expect(refused!.json().error.code).toBe('too_many_sign_ins');
  expect(Number(refused!.headers['retry-after'])).toBeGreaterThanOrEqual(1);
  expect(Number(refused!.headers['retry-after'])).toBeLessThanOrEqual(60);
});
