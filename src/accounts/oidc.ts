/**
 * Sign-in with the company's OpenID Connect provider (Keycloak, Okta, Entra ID, Google, Dex...): the
 * authorization code flow with PKCE (S256), state and nonce, through openid-client (certified by the
 * OpenID Foundation). The ID token is checked for its issuer, audience (this client), expiry, nonce
 * and, against the provider's JWKS, its signature; a token that fails any check opens no session.
 *
 * GET /login makes the verifier, state and nonce, keeps them in the store as a one-time token under
 * the SHA-256 of the state (every replica knows it; it works once, for ten minutes), and sends the
 * browser to the provider. The transaction is also bound to the browser that started it: a random
 * value in an HttpOnly cookie scoped to these routes (SameSite=Lax, as the provider's redirect back is
 * a cross-site navigation), whose digest the transaction keeps. So a callback URL cannot be replayed,
 * nor handed to someone else's browser to sign them in as another person (login CSRF).
 *
 * The redirect address comes from console.publicUrl or, without it, from the request's Host only when
 * its name is localhost, listen.host or in console.allowedHosts: another Host (a page that points a
 * name of its own at the gateway) gets 400 and nothing stored, so a provider never sends a code to an
 * address the operator did not name.
 *
 * GET /callback takes the transaction (once), exchanges the code, and reads the claims: the ID
 * token's, and the userinfo endpoint's when the ID token lacks the email or the mapped claim (as
 * oidc-provider's default, Entra ID or Okta set-ups do). A person is who the provider's issuer and
 * subject (`iss`, `sub`) are bound to (OpenID Connect Core 5.7), never an email alone:
 * - bound already: that person signs in, with the email the gateway keeps (the token's may change);
 * - not bound, and a person here has the token's email: linked only when the provider says
 *   `email_verified: true` (the boolean; a missing claim, null, "no" or the string "true" do not
 *   count), the email is not a look-alike (unchanged by NFKC: a Kelvin sign never links to a `k`),
 *   and that person has no other subject of this issuer (else 403 oidc_identity_conflict). A person
 *   first bound loses the password an inviter may have set through their link (unless an admin turned
 *   on passwordWithOidc) and every session open until then;
 * - nobody has that email: made, and bound, when a mapping matches (and the provider does not say
 *   the email is unverified: a provider that never sends email_verified, as Entra ID, still works).
 * The mappings turn the claim's values (e.g. groups) into accounts (made when missing) and roles,
 * applied on each sign-in; a mapping with admin: true makes a platform admin. Someone no mapping
 * matches signs in only if they are known already (added by an account owner). Every refusal is logged
 * at warn and audited (`session.failed`, actor `oidc`), a binding is audited (`identity.bound`);
 * neither the code, the tokens nor the client secret are ever logged.
 * *
 * The provider itself (discovery, the claims, the linking rule, failures told apart): oidc-provider.ts.
 */
import { randomBytes } from 'node:crypto';
import { isIP } from 'node:net';
import express, { type NextFunction, type Request, type Response, type Router } from 'express';
import { LRUCache } from 'lru-cache';
import { findContext } from '../context';
import { errors, GatewayError } from '../errors';
import type { Logger } from '../telemetry/log';
import type { IdentityRecord, PersonRecord, Role, Store } from '../store/types';
import { Auditor } from './audit';
import { isNfkcStable, normalizeEmail } from './emails';
import type { Actor } from './roles';
import { tokenDigest, type Accounts } from './service';
import { sessionCookie, type Sessions } from './sessions';
import { claimsOf, describeClaim, IdentityProvider, linkRefusal, reasonOf, unreachable, type OidcSettings, type Said } from './oidc-provider';

export { claimValues, linkRefusal, type OidcSettings, type Said } from './oidc-provider';


export interface OidcDeps {
  accounts: Accounts;
  sessions: Sessions;
  store: Store;
  /** The console's origin as people reach it; absent: https:// and the request's Host, if allowed. */
  publicOrigin: string | undefined;
  /**
   * Without publicOrigin, the host names (any port) whose Host may make the redirect address:
   * console.allowedHosts and listen.host (localhost always is).
   */
  allowedHosts: readonly string[];
  log: Logger;
  env?: NodeJS.ProcessEnv;
}

/** Where these routes are mounted (console/app.ts). */
export const OIDC_PATH = '/console/api/oidc';
/** A sign-in under way is good for this long, once. */
const TRANSACTION_TTL_MS = 10 * 60_000;
/**
 * Sign-ins one client address may start per minute: each keeps a transaction in the store for ten
 * minutes, and /login needs no session, so without a bound anyone could fill the store.
 */
const SIGN_INS_PER_MINUTE = 30;
/** Addresses whose starts are counted at once (the least recent are forgotten first). */
const COUNTED_ADDRESSES = 10_000;
/** Where a refused sign-in sends a browser: the page says why (console-session.js reads the code). */
const REFUSED_PAGE = '/console/#sign-in-error=';
/** Binds a sign-in under way to the browser that started it. */
const BROWSER_COOKIE = 'chatgate_oidc';

/** The refusals. */
const refusals = {
  /** No transaction for this state: none sent, made up, used already, expired, or started in another browser. */
  unknownState: () => errors.oidcSignInExpired(),
  /** The provider's answer failed a check (the code, the ID token), or it names no usable email. */
  notSignedIn: () => errors.oidcSignInFailed(),
  /** A person the mappings do not let in and the gateway does not know. */
  notMapped: () => errors.permissionDenied('sign in to this console: no group of yours at the identity provider is given an account here, ask an account owner to add you'),
  /** The provider could not be reached (discovery, the token exchange, its keys, userinfo). */
  unavailable: () => errors.identityProviderUnavailable(),
  /** The email is a person's here who is bound to another subject of this issuer. */
  otherSubject: () => errors.oidcIdentityConflict(),
};

/** GET /login (to the provider) and GET /callback (back from it), mounted at /console/api/oidc. */
export function createOidcRoutes(settings: OidcSettings, deps: OidcDeps): Router {
  const clientSecret = (deps.env ?? process.env)[settings.clientSecretEnv];
  if (!clientSecret) {
    throw new Error(
      `console.oidc.clientSecretEnv names the environment variable ${settings.clientSecretEnv}, which is not set: put the client secret of '${settings.clientId}' at ${settings.issuer} in it`,
    );
  }
  const { store, log, sessions } = deps;
  const auditor = new Auditor(store, log);
  const provider = new IdentityProvider(settings, clientSecret, log);
  const scope = (settings.scopes.includes('openid') ? settings.scopes : ['openid', ...settings.scopes]).join(' ');
  const routes = express.Router();
  const started = new LRUCache<string, { count: number; since: number }>({ max: COUNTED_ADDRESSES });
  const allowedHosts = new Set(['localhost', ...deps.allowedHosts.map((name) => name.toLowerCase().replace(/\.$/, ''))]);

  routes.get('/login', async (req, res) => {
    const origin = redirectOrigin(deps.publicOrigin, req.headers.host, allowedHosts);
    if (!origin) {
      log.warn({ host: String(req.headers.host ?? '').slice(0, 100), client: req.ip }, 'OIDC sign-in not started: the Host is not a name of this console (console.allowedHosts)');
      throw errors.signInHostNotAllowed();
    }
    const now = Date.now();
    const address = req.ip ?? 'unknown';
    const recent = started.get(address);
    if (recent && now - recent.since < 60_000) {
      if (++recent.count > SIGN_INS_PER_MINUTE) throw errors.tooManySignIns(recent.since + 60_000 - now);
    } else {
      started.set(address, { count: 1, since: now });
    }
    const redirectUri = `${origin}${OIDC_PATH}/callback`;
    const { lib, config } = await provider.connected();
    const state = lib.randomState();
    const nonce = lib.randomNonce();
    const verifier = lib.randomPKCECodeVerifier();
    const browser = browserOf(req.headers.cookie) ?? randomBytes(32).toString('base64url');
    await store.createToken({
      digest: tokenDigest(state),
      kind: 'oidc',
      email: null,
      data: { verifier, nonce, redirectUri, browser: tokenDigest(browser), createdAt: new Date(now).toISOString() },
      expiresAt: new Date(now + TRANSACTION_TTL_MS).toISOString(),
    });
    const target = lib.buildAuthorizationUrl(config, {
      redirect_uri: redirectUri,
      scope,
      state,
      nonce,
      code_challenge: await lib.calculatePKCECodeChallenge(verifier),
      code_challenge_method: 'S256',
    });
    res.setHeader('Set-Cookie', browserCookie(browser, TRANSACTION_TTL_MS / 1000));
    res.setHeader('Cache-Control', 'no-store');
    res.redirect(302, target.href);
  });

  routes.get('/callback', async (req, res) => {
    const client = req.ip;
    const requestId = res.getHeader('X-Request-Id'); // the front stages' (pipeline/request-id.ts)
    /** Logs and audits a refused sign-in, then refuses it. */
    const refuse = async (reason: string, error: GatewayError, email?: string): Promise<never> => {
      log.warn({ requestId, reason, email, client }, 'OIDC sign-in refused');
      await auditor.record({ accountId: null, actor: 'oidc', action: 'session.failed', target: email ?? 'unknown', client, details: { via: 'oidc', reason } });
      throw error;
    };

    const state = typeof req.query.state === 'string' && req.query.state.length > 0 && req.query.state.length <= 256 ? req.query.state : undefined;
    if (!state) return refuse('the callback carries no state', refusals.unknownState());
    const transaction = await store.takeToken(tokenDigest(state), 'oidc', new Date());
    if (!transaction) return refuse('no sign-in under way has this state (made up, used already, or expired)', refusals.unknownState());
    const { verifier, nonce, redirectUri, browser } = transaction.data;
    const fromBrowser = browserOf(req.headers.cookie);
    if (!fromBrowser || tokenDigest(fromBrowser) !== browser) return refuse('the sign-in was started in another browser', refusals.unknownState());

    const { lib, config } = await provider.connected();
    const currentUrl = new URL(redirectUri!);
    currentUrl.search = new URL(req.originalUrl, 'https://callback.invalid').search;
    let said: Said;
    try {
      const tokens = await lib.authorizationCodeGrant(config, currentUrl, { pkceCodeVerifier: verifier, expectedState: state, expectedNonce: nonce, idTokenExpected: true });
      said = await claimsOf(lib, config, tokens, settings.claim);
    } catch (err) {
      if (unreachable(err)) {
        log.warn({ requestId, reason: reasonOf(err), client }, 'OIDC sign-in failed: the identity provider could not be reached');
        throw refusals.unavailable();
      }
      return refuse(reasonOf(err), refusals.notSignedIn());
    }

    const person = await personFor(said, client, refuse);

    const { token } = await sessions.start(person, 'oidc', client);
    res.setHeader('Set-Cookie', [sessionCookie(token, sessions.settings.absoluteMs / 1000), browserCookie('', 0)]);
    res.setHeader('Cache-Control', 'no-store');
    res.redirect(302, '/console/');
  });

  // Both routes are navigations of the whole page: a browser that is refused is sent back to the
  // console, which says why, rather than left on an error body at the callback URL. A client that
  // does not ask for a page (scripts, the tests' HTTP client) gets the error body as everywhere.
  routes.use((err: unknown, req: Request, res: Response, next: NextFunction) => {
    if (!(err instanceof GatewayError) || !wantsPage(req) || res.headersSent) return next(err);
    const context = findContext(res);
    if (context) context.errorCode = err.code;
    res.setHeader('Cache-Control', 'no-store');
    if (err.code === 'oidc_sign_in_expired' || err.code === 'oidc_sign_in_failed') res.setHeader('Set-Cookie', browserCookie('', 0));
    res.redirect(303, REFUSED_PAGE + encodeURIComponent(err.code));
  });

  type Refuse = (reason: string, error: GatewayError, email?: string) => Promise<never>;

  /**
   * Who signs in: the person bound to the issuer and subject; else, bound now, the person with the
   * email when it may be linked, or a person made for it when a mapping lets them in. The mappings
   * are applied to them. Anything else is refused.
   */
  async function personFor(said: Said, client: string | undefined, refuse: Refuse): Promise<PersonRecord> {
    const matched = settings.mappings.filter((mapping) => said.values.includes(mapping.value));
    const bound = await store.findIdentity(said.issuer, said.subject);
    if (bound) return provision(bound.email, matched, client, refuse);

    const email = normalizeEmail(said.email);
    if (!email) return refuse('the identity provider gives no usable email (neither in the ID token nor at userinfo)', refusals.notSignedIn());
    if (!isNfkcStable(email)) return refuse('the email changes under Unicode NFKC normalization: it imitates another address, and is never linked to anyone', refusals.notSignedIn(), email);
    const existing = await store.getPerson(email);
    if (existing) {
      const why = linkRefusal(said, await store.identitiesOf(email));
      if (why) return refuse(why.reason, why.otherSubject ? refusals.otherSubject() : refusals.notSignedIn(), email);
    } else {
      if (said.emailVerified !== undefined && said.emailVerified !== true) {
        return refuse(`the identity provider does not say this email is verified (email_verified is ${describeClaim(said.emailVerified)})`, refusals.notSignedIn(), email);
      }
      if (matched.length === 0) return refuse(`no mapping matches the '${settings.claim}' claim, and the person is not known here`, refusals.notMapped(), email);
      await store.putPerson({ email, admin: false, passwordHash: null, createdAt: new Date().toISOString() });
    }
    await bind(said, email, !existing, client, refuse);
    return provision(email, matched, client, refuse);
  }

  /**
   * Binds the issuer and subject to the person. When another sign-in bound first: the same binding
   * is taken as it is; another (this person has another subject of this issuer) is refused. A person
   * bound now loses the password set before (an inviter may know it) unless an admin allows it, and
   * every session of theirs open until now.
   */
  async function bind(said: Said, email: string, created: boolean, client: string | undefined, refuse: Refuse): Promise<void> {
    const identity: IdentityRecord = { issuer: said.issuer, subject: said.subject, email, createdAt: new Date().toISOString() };
    if (!(await store.bindIdentity(identity))) {
      const winner = await store.findIdentity(said.issuer, said.subject);
      if (winner?.email === email) return;
      return refuse('a person with this email is bound to another subject of this identity provider (bound at the same time)', refusals.otherSubject(), email);
    }
    const person = await store.getPerson(email);
    const passwordRemoved = person !== undefined && person.passwordHash !== null && person.passwordWithOidc !== true;
    if (passwordRemoved) await store.setPassword(email, null);
    const sessionsEnded = await store.deleteSessionsOf(email);
    await auditor.record({
      accountId: null,
      actor: 'oidc',
      action: 'identity.bound',
      target: email,
      client,
      details: { issuer: said.issuer, subject: said.subject, created, passwordRemoved, sessionsEnded },
    });
  }

  /**
   * The mappings matched give the person their accounts (made if missing) and roles, and the admin
   * role. The person is read again: binding may have just changed them.
   */
  async function provision(email: string, matched: OidcSettings['mappings'], client: string | undefined, refuse: Refuse): Promise<PersonRecord> {
    let person = await store.getPerson(email);
    if (!person) return refuse('the person this identity is bound to is gone', refusals.notSignedIn(), email);
    const admin = matched.some((mapping) => mapping.admin);
    if (admin && !person.admin) {
      person = await store.putPerson({ ...person, admin: true });
      const granting = matched.filter((mapping) => mapping.admin).map((mapping) => mapping.value);
      await auditor.record({ accountId: null, actor: 'oidc', action: 'admin.granted', target: email, client, details: { claim: settings.claim, values: granting } });
    }
    // Several mappings may name one account: the higher role wins.
    const roles = new Map<string, Role>();
    for (const mapping of matched) {
      if (mapping.account !== undefined && roles.get(mapping.account) !== 'owner') roles.set(mapping.account, mapping.role);
    }
    const actor: Actor = { kind: 'person', email, admin: person.admin };
    const memberships = await store.membershipsOf(email);
    for (const [name, role] of roles) {
      const account = await accountNamed(name, actor, client);
      if (memberships.find((m) => m.accountId === account.id)?.role === role) continue;
      try {
        await deps.accounts.addMember(account.id, { email, role }, actor, client);
      } catch (err) {
        if (!(err instanceof GatewayError && err.code === 'last_owner')) throw err;
        log.warn({ email, account: name }, 'OIDC sign-in: the mapping would leave the account without an owner; the role is kept');
      }
    }
    return person;
  }

  /** The account with this name, made if missing (by another replica at the same time: then that one). */
  async function accountNamed(name: string, actor: Actor, client: string | undefined) {
    const existing = await store.findAccountByName(name);
    if (existing) return existing;
    try {
      return await deps.accounts.createAccount(name, actor, client);
    } catch (err) {
      const raced = err instanceof GatewayError && err.code === 'account_name_taken' ? await store.findAccountByName(name) : undefined;
      if (raced) return raced;
      throw err;
    }
  }

  return routes;
}
/**
 * Pure: the origin the provider sends the browser back to: console.publicUrl's, or https:// and the
 * Host when it is a plain host[:port] whose name (any case, without a final dot) is allowed; else
 * undefined. A Host with anything more (user info, a path) never makes an address.
 */
export function redirectOrigin(publicOrigin: string | undefined, host: string | undefined, allowed: ReadonlySet<string>): string | undefined {
  if (publicOrigin) return publicOrigin;
  const match = /^(?:([A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9.])?)|\[([0-9A-Fa-f:.]{2,45})\])(?::(\d{1,5}))?$/.exec(host ?? '');
  if (!match) return undefined;
  const name = (match[1] ?? match[2]!).toLowerCase().replace(/\.$/, '');
  if ((match[2] !== undefined && isIP(name) !== 6) || Number(match[3] ?? 0) > 65535) return undefined;
  return allowed.has(name) ? `https://${host!.toLowerCase()}` : undefined;
}

/** The browser's binding value from its Cookie header, if it has a sane one. */
function browserOf(cookieHeader: string | undefined): string | undefined {
  for (const part of cookieHeader?.split(';') ?? []) {
    const [name, value] = part.trim().split('=');
    if (name === BROWSER_COOKIE && value !== undefined && /^[A-Za-z0-9_-]{43}$/.test(value)) return value;
  }
  return undefined;
}

function browserCookie(value: string, maxAgeSeconds: number): string {
  return `${BROWSER_COOKIE}=${value}; Path=${OIDC_PATH}; Max-Age=${Math.floor(maxAgeSeconds)}; HttpOnly; Secure; SameSite=Lax`;
}

/** A browser navigating (Accept: text/html), as opposed to a script asking for JSON. */
function wantsPage(req: Request): boolean {
  return /\btext\/html\b/.test(req.headers.accept ?? '');
}
