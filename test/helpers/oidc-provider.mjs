/**
 * A real OpenID Provider for tests: oidc-provider (panva's, OpenID certified) over HTTPS on
 * 127.0.0.1, run as its own process: `node test/helpers/oidc-provider.mjs <cert.pem> <key.pem>`.
 *
 * It listens at once on a port the OS picks and prints {"event":"listening","port":N}; the test then
 * starts the gateway (whose issuer is this port) and sends, on stdin, one JSON command a line:
 *   {"id":1,"cmd":"configure","clients":[{client_id, client_secret, redirect_uris}], "conformIdTokenClaims":false}
 *       builds the provider (issuer https://127.0.0.1:N) with these clients; with conformIdTokenClaims
 *       true (oidc-provider's own default), the ID token of a code flow carries only `sub` and the
 *       scopes' claims (email, groups...) are at the userinfo endpoint only, as some Entra ID and Okta
 *       set-ups do; false (the default here), they are in the ID token, as Keycloak, Dex...;
 *   {"id":2,"cmd":"clock","offsetSeconds":-7200}
 *       sets this process's clock that far off (Date.now): what the provider signs is dated by it;
 *   {"id":3,"cmd":"swap-id-token","clientId":"chatgate","idToken":"..."}
 *       the next token response to that client carries this ID token instead of its own;
 *   {"id":4,"cmd":"tamper-id-token","clientId":"chatgate","claims":{...}}
 *       the next token response to that client carries its own ID token with these claims changed
 *       and the signature left as it was.
 * Each command is answered {"id":N,"ok":true} (or "error"); a replaced token is reported as
 * {"event":"id-token-replaced","how":"swap"|"tamper","clientId":...}.
 *
 * Sign-in: GET /interaction/<uid>?login=<email> (the URL the provider sends the browser to, with
 * login= added by the test) signs that person in. Without login=, the same URL answers a minimal HTML
 * page (no script) whose form, an email field and a submit button, GETs that URL with ?login=<email>:
 * a person in a browser signs in by typing their email. Consent is implied for every client
 * (loadExistingGrant makes the grant), as for a company's first-party apps; a consent prompt, should
 * one come, is granted by the same GET. Its signing key (RSA) and cookie keys are made at start. The
 * people it knows are in PEOPLE below, by the name typed at sign-in, which is also their subject
 * (`sub`): several subjects may say the same email, as at a real provider (an attacker's second
 * account, a mailbox reassigned), and a provider may say email_verified oddly (missing, null, a string).
 */
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import https from 'node:https';
import readline from 'node:readline';
import Provider from 'oidc-provider';

const PEOPLE = {
  'alice@example.com': { email: 'Alice@Example.com', email_verified: true, name: 'Alice', groups: ['team-a-owners', 'staff'] },
  'bob@example.com': { email: 'bob@example.com', email_verified: true, name: 'Bob', groups: ['team-b-members'] },
  'carol@example.com': { email: 'carol@example.com', email_verified: true, name: 'Carol', groups: ['platform-admins'] },
  'dave@example.com': { email: 'dave@example.com', email_verified: false, name: 'Dave', groups: ['team-a-owners'] },
  'erin@example.com': { email: 'erin@example.com', email_verified: true, name: 'Erin', groups: ['staff'] },
  // Kim is known to the gateway before she signs in here; Frank is invited by an owner first.
  'kim@example.com': { email: 'Kim@Example.com', email_verified: true, name: 'Kim', groups: ['staff'] },
  'frank@example.com': { email: 'frank@example.com', email_verified: true, name: 'Frank', groups: ['team-b-members'] },
  // Other subjects that say Kim's email: unverified in every odd way, a look-alike, verified.
  'mallory-missing': { email: 'kim@example.com', name: 'Mallory', groups: ['platform-admins'] },
  'mallory-null': { email: 'kim@example.com', email_verified: null, name: 'Mallory', groups: ['platform-admins'] },
  'mallory-no': { email: 'kim@example.com', email_verified: 'no', name: 'Mallory', groups: ['platform-admins'] },
  'mallory-string': { email: 'kim@example.com', email_verified: 'true', name: 'Mallory', groups: ['platform-admins'] },
  'mallory-kelvin': { email: '\u212Aim@example.com', email_verified: true, name: 'Mallory', groups: ['platform-admins'] },
  'mallory-second': { email: 'kim@example.com', email_verified: true, name: 'Mallory', groups: ['platform-admins'] },
  // Grace's provider never sends email_verified (as Entra ID): a person made for her on first sign-in.
  'grace@example.com': { email: 'grace@example.com', name: 'Grace', groups: ['team-b-members'] },
  // Two subjects with one verified email nobody has yet, signing in at once: one of them is Hana.
  'hana@example.com': { email: 'hana@example.com', email_verified: true, name: 'Hana', groups: ['team-b-members'] },
  'hana-twin': { email: 'hana@example.com', email_verified: true, name: 'Hana?', groups: ['team-b-members'] },
};

const [certFile, keyFile] = process.argv.slice(2);
if (!certFile || !keyFile) {
  process.stderr.write('usage: node oidc-provider.mjs <cert.pem> <key.pem>\n');
  process.exit(2);
}

const realNow = Date.now;
let offsetMs = 0;
Date.now = () => realNow() + offsetMs;

const say = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);

/** One-shot changes to the next token response of a client: clientId -> (body) => void. */
const tokenChanges = new Map();
let provider;
let handler = (_req, res) => {
  res.statusCode = 503;
  res.end('not configured yet');
};

const server = https.createServer({ cert: readFileSync(certFile), key: readFileSync(keyFile) }, (req, res) => handler(req, res));
server.listen(0, '127.0.0.1', () => say({ event: 'listening', port: server.address().port }));

function configure(clients, conformIdTokenClaims = false) {
  const issuer = `https://127.0.0.1:${server.address().port}`;
  const signingKey = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ format: 'jwk' });
  provider = new Provider(issuer, {
    clients: clients.map((client) => ({ grant_types: ['authorization_code'], response_types: ['code'], token_endpoint_auth_method: 'client_secret_basic', ...client })),
    jwks: { keys: [{ ...signingKey, kid: `test-${randomBytes(4).toString('hex')}`, use: 'sig', alg: 'RS256' }] },
    cookies: { keys: [randomBytes(32).toString('base64url')] },
    pkce: { required: () => true },
    scopes: ['openid', 'email', 'profile', 'groups', 'offline_access'],
    claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'], groups: ['groups'] },
    // false: as Keycloak, Okta, Entra ID, Dex, the requested claims are in the ID token itself.
    conformIdTokenClaims: conformIdTokenClaims === true,
    features: { devInteractions: { enabled: false } },
    ttl: { AccessToken: 600, AuthorizationCode: 60, IdToken: 3600, Interaction: 600, Session: 3600, Grant: 3600 },
    async findAccount(_ctx, sub) {
      const person = PEOPLE[sub];
      return person && { accountId: sub, claims: async () => ({ sub, ...person }) };
    },
    async loadExistingGrant(ctx) {
      const grantId = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
      if (grantId) return ctx.oidc.provider.Grant.find(grantId);
      const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
      grant.addOIDCScope('openid email profile groups');
      await grant.save();
      return grant;
    },
    async renderError(ctx, out) {
      ctx.type = 'json';
      ctx.body = out;
    },
  });
  for (const event of ['server_error', 'grant.error', 'authorization.error']) {
    provider.on(event, (_ctx, err) => process.stderr.write(`${event}: ${err.message}${err.error_description ? ` (${err.error_description})` : ''}\n`));
  }
  provider.use(async (ctx, next) => {
    await next();
    const change = ctx.oidc?.route === 'token' && ctx.status === 200 ? tokenChanges.get(ctx.oidc.client?.clientId) : undefined;
    if (change && typeof ctx.body?.id_token === 'string') {
      tokenChanges.delete(ctx.oidc.client.clientId);
      ctx.body = { ...ctx.body, id_token: change.apply(ctx.body.id_token) };
      say({ event: 'id-token-replaced', how: change.how, clientId: ctx.oidc.client.clientId });
    }
  });
  const callback = provider.callback();
  handler = (req, res) => {
    const url = new URL(req.url, issuer);
    if (req.method === 'GET' && url.pathname.startsWith('/interaction/')) return interact(req, res, url).catch((err) => fail(res, err));
    return callback(req, res);
  };
  return issuer;
}

/** The provider's sign-in step: ?login=<email> signs that person in; without login=, the page that asks for it. */
async function interact(req, res, url) {
  const details = await provider.interactionDetails(req, res);
  const email = url.searchParams.get('login');
  if (details.prompt.name === 'login') {
    if (email === null) return signInPage(res, url.pathname);
    if (!email || !PEOPLE[email]) throw new Error(`no such person: ${email}`);
    return provider.interactionFinished(req, res, { login: { accountId: email } }, { mergeWithLastSubmission: false });
  }
  if (details.prompt.name === 'consent') {
    const grant = new provider.Grant({ accountId: details.session.accountId, clientId: details.params.client_id });
    const { missingOIDCScope = [], missingOIDCClaims = [] } = details.prompt.details;
    if (missingOIDCScope.length > 0) grant.addOIDCScope(missingOIDCScope.join(' '));
    if (missingOIDCClaims.length > 0) grant.addOIDCClaims(missingOIDCClaims);
    return provider.interactionFinished(req, res, { consent: { grantId: await grant.save() } }, { mergeWithLastSubmission: true });
  }
  throw new Error(`unexpected prompt ${details.prompt.name}`);
}

/** The sign-in page a browser is shown: its form GETs this same interaction URL with ?login=<email>. */
function signInPage(res, pathname) {
  const action = pathname.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
  res.statusCode = 200;
  res.setHeader('content-type', 'text/html; charset=utf-8');
  res.setHeader('cache-control', 'no-store');
  res.end(`<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <link rel="icon" href="data:,">
  <title>Sign in - test OpenID Provider</title>
</head>
<body>
  <main>
    <h1>Sign in to the test OpenID Provider</h1>
    <form method="get" action="${action}">
      <label for="login">Email</label>
      <input id="login" name="login" type="email" autocomplete="username" required>
      <button type="submit">Sign in</button>
    </form>
  </main>
</body>
</html>
`);
}

function fail(res, err) {
  process.stderr.write(`interaction: ${err.message}\n`);
  res.statusCode = 400;
  res.setHeader('content-type', 'application/json');
  res.end(JSON.stringify({ error: 'interaction_failed', error_description: err.message }));
}

/** The same JWS with some payload claims changed: header and signature as the provider made them. */
function tampered(jws, claims) {
  const [header, payload, signature] = jws.split('.');
  const changed = { ...JSON.parse(Buffer.from(payload, 'base64url').toString('utf8')), ...claims };
  return [header, Buffer.from(JSON.stringify(changed)).toString('base64url'), signature].join('.');
}

readline.createInterface({ input: process.stdin }).on('line', (line) => {
  let command;
  try {
    command = JSON.parse(line);
    switch (command.cmd) {
      case 'configure':
        say({ id: command.id, ok: true, issuer: configure(command.clients, command.conformIdTokenClaims) });
        return;
      case 'clock':
        offsetMs = Number(command.offsetSeconds) * 1000;
        say({ id: command.id, ok: true });
        return;
      case 'swap-id-token':
        tokenChanges.set(command.clientId, { how: 'swap', apply: () => command.idToken });
        say({ id: command.id, ok: true });
        return;
      case 'tamper-id-token':
        tokenChanges.set(command.clientId, { how: 'tamper', apply: (jws) => tampered(jws, command.claims) });
        say({ id: command.id, ok: true });
        return;
      default:
        throw new Error(`unknown command ${command.cmd}`);
    }
  } catch (err) {
    say({ id: command?.id, ok: false, error: err.message });
  }
});
// The test's end of stdin closing means it is done with us.
process.stdin.on('end', () => process.exit(0));
