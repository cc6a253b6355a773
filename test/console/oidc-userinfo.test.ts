/**
 * A provider that puts the email and groups at its userinfo endpoint only, not in the ID token:
 * oidc-provider with its own default, conformIdTokenClaims: true (the ID token of a code flow then
 * carries `sub` and no scope's claims), as some Entra ID and Okta set-ups do. The gateway reads what
 * the ID token lacks from userinfo, with the access token, and openid-client checks the answer is
 * about the ID token's subject. A real provider on loopback; the gateway as its own process.
 */
import { randomBytes } from 'node:crypto';
import type { GatewayProcess } from '../helpers/gateway-process';
import { request } from '../helpers/http';
import { attemptSignIn, expectRefused, payloadOf, refusalOf, startOidcSites, stopOidcSites, tokensFor, type ProviderProcess } from '../helpers/oidc';
import { eventually } from '../helpers/time';

jest.setTimeout(60_000);

const CLIENT_ID = 'chatgate';
const SECRET = `gateway-secret-${randomBytes(16).toString('hex')}`;
const PEEK = { client_id: 'peek', client_secret: `peek-secret-${randomBytes(16).toString('hex')}`, redirect_uris: ['https://peek.example/callback'] };

let dir: string;
let provider: ProviderProcess;
let gw: GatewayProcess;
const secrets = new Set<string>([SECRET, PEEK.client_secret]);
const sites = () => ({ provider, gw });

beforeAll(async () => {
  ({ dir, provider, gw } = await startOidcSites('oidc-userinfo', { mappings: [{ value: 'team-a-owners', account: 'team-a', role: 'owner' }], secret: SECRET }));
  await provider.send({
    cmd: 'configure',
    conformIdTokenClaims: true,
    clients: [{ client_id: CLIENT_ID, client_secret: SECRET, redirect_uris: [`${gw.url}/console/api/oidc/callback`] }, PEEK],
  });
});

afterAll(() => stopOidcSites({ dir, provider, gw }));

test('the email and the mapped claim are read from userinfo when the ID token lacks them: the person signs in, mapped', async () => {
  // What the provider gives any client: an ID token with no email and no groups; userinfo has them.
  const { idToken, accessToken } = await tokensFor(sites(), PEEK, 'alice@example.com', { seen: secrets });
  const claims = payloadOf(idToken);
  expect(claims.sub).toBe('alice@example.com');
  for (const name of ['email', 'email_verified', 'groups']) expect(claims).not.toHaveProperty(name);
  const userinfo = await request(provider.issuer, { method: 'GET', path: '/me', ca: provider.ca, headers: { authorization: `Bearer ${accessToken}` } });
  expect(userinfo.json()).toMatchObject({ sub: 'alice@example.com', email: 'Alice@Example.com', email_verified: true, groups: ['team-a-owners', 'staff'] });

  const { browser, response } = await attemptSignIn(sites(), 'alice@example.com', secrets);
  expect(response.status).toBe(302);
  expect(await browser.session()).toMatchObject({ email: 'alice@example.com', via: 'oidc', accounts: [{ name: 'team-a', role: 'owner' }] });
});

test("email_verified is read next to the email, from userinfo: Dave's false there is refused", async () => {
  const { response } = await attemptSignIn(sites(), 'dave@example.com', secrets);
  expectRefused(response, { status: 401, code: 'oidc_sign_in_failed' });
  expect((await refusalOf(gw, response)).reason).toBe('the identity provider does not say this email is verified (email_verified is false)');
});

test('no code, token or secret is in the gateway’s log', async () => {
  await eventually(() => gw.log.find((line) => line.log === 'audit' && line.action === 'session.failed'));
  const everything = `${gw.log.map((line) => JSON.stringify(line)).join('\n')}\n${gw.stderr()}`;
  for (const secret of secrets) expect(everything).not.toContain(secret);
  expect(everything).not.toMatch(/eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/);
});
