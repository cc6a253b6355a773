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
 * Who a sign-in signs in (the binding, linking and mappings above, applied to the store): oidc-identities.ts.
 */
import { randomBytes } from 'node:crypto';
import { isIP } from 'node:net';
import express, { type NextFunction, type Request, type RequestHandler, type Response, type Router } from 'express';
import { LRUCache } from 'lru-cache';
import { findContext } from '../context';
import { errors, GatewayError } from '../errors';
import type { Logger } from '../telemetry/log';
import type { Store } from '../store/types';
import { Auditor } from './audit';
import { tokenDigest, type Accounts } from './service';
import { sessionCookie, type Sessions } from './sessions';
import { claimsOf, IdentityProvider, reasonOf, unreachable, type OidcSettings, type Said } from './oidc-provider';
import { OidcIdentities, refusals, type Refuse } from './oidc-identities';

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

/** GET /login (to the provider) and GET /callback (back from it), mounted at /console/api/oidc. */
export function createOidcRoutes(settings: OidcSettings, deps: OidcDeps): Router {
  const clientSecret = (deps.env ?? process.env)[settings.clientSecretEnv];
  if (!clientSecret) {
    throw new Error(
      `console.oidc.clientSecretEnv names the environment variable ${settings.clientSecretEnv}, which is not set: put the client secret of '${settings.clientId}' at ${settings.issuer} in it`,
    );
  }
  const provider = new IdentityProvider(settings, clientSecret, deps.log);
  const routes = express.Router();
  routes.get('/login', loginRoute(settings, provider, deps));
  routes.get('/callback', callbackRoute(settings, provider, deps));

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

  return routes;
}

/**
 * GET /login: from an allowed Host and within the address's sign-ins per minute, keeps the
 * transaction (verifier, nonce, redirect address, the browser's digest) under the state's digest,
 * binds the browser, and sends it to the provider.
 */
function loginRoute(settings: OidcSettings, provider: IdentityProvider, deps: OidcDeps): RequestHandler {
  const { store, log } = deps;
  const scope = (settings.scopes.includes('openid') ? settings.scopes : ['openid', ...settings.scopes]).join(' ');
  const started = new LRUCache<string, { count: number; since: number }>({ max: COUNTED_ADDRESSES });
  const allowedHosts = new Set(['localhost', ...deps.allowedHosts.map((name) => name.toLowerCase().replace(/\.$/, ''))]);

  return async function login(req, res) {
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
  };
}

/**
 * GET /callback: takes the transaction (once, from the browser that started it), exchanges the code
 * for the claims, and opens a session for the person they sign in (oidc-identities.ts).
 */
function callbackRoute(settings: OidcSettings, provider: IdentityProvider, { store, log, sessions, accounts }: OidcDeps): RequestHandler {
  const auditor = new Auditor(store, log);
  const identities = new OidcIdentities(settings, store, accounts, auditor, log);

  return async function callback(req, res) {
    const client = req.ip;
    const requestId = res.getHeader('X-Request-Id'); // the front stages' (pipeline/request-id.ts)
    /** Logs and audits a refused sign-in, then refuses it. */
    const refuse: Refuse = async (reason, error, email) => {
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

    const person = await identities.personFor(said, client, refuse);

    const { token } = await sessions.start(person, 'oidc', client);
    res.setHeader('Set-Cookie', [sessionCookie(token, sessions.settings.absoluteMs / 1000), browserCookie('', 0)]);
    res.setHeader('Cache-Control', 'no-store');
    res.redirect(302, '/console/');
  };
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
