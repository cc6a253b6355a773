/**
 * The console's API (/console/api on the public HTTPS listener, the page's own origin): sign in and
 * out, and the signed-in person's current account: its keys, members, usage and audit trail. What a
 * person may do there is their role's (accounts/roles.ts). A key belonging to another account is
 * answered 404, as one that does not exist. No answer carries a key (but the one made or rotated),
 * a digest, or a password hash. Every change checks the request's Origin first (csrf.ts).
 *
 * This file composes the router: the routes that need no session, the session check, then each
 * group of routes from its module (api-session.ts, api-keys.ts, api-members.ts, api-usage.ts; the
 * checks they share in api-access.ts). Express tries routes in the order they are added, so the
 * order of the groups below is part of the API.
 */
import express, { type Router } from 'express';
import { objectBody, onlyFields, type LimitDefaults } from '../auth/key-fields';
import type { Accounts } from '../accounts/service';
import { sessionCookie, sessionTokenOf, type Sessions } from '../accounts/sessions';
import { errors } from '../errors';
import { client } from './api-access';
import { keyRoutes } from './api-keys';
import { memberRoutes, type Invites } from './api-members';
import { sessionRoutes, sessionView } from './api-session';
import { usageRoutes } from './api-usage';
import { SPREAD } from '../auth/usage-recorder';

export interface ConsoleApiDeps {
  accounts: Accounts;
  sessions: Sessions;
  /** Whether "sign in with your identity provider" is offered (the OIDC routes are added by oidc.ts). */
  oidc: boolean;
  /** How often usage is written to the store (auth.lastUsedFlushMs): the page says how fresh its figures are. */
  usageFlushMs?: number;
  /**
   * The platform's default rate limits as they are now (config `rateLimit`, which a reload may change):
   * a key's own limits set by someone who is not a platform admin stay within them.
   */
  platformLimits: () => LimitDefaults;
  /** The price table's currency, that usage costs are in (a reload may change it). */
  currency?: () => string;
  /**
   * Invitations by email (console.smtp): the link goes to the invitee's mailbox, never into the
   * inviter's answer. The link starts with publicOrigin, else https:// and a Host whose name is among
   * trustedHosts (localhost, listen.host, console.allowedHosts).
   */
  invites?: Invites;
}

export function consoleApi({ accounts, sessions, oidc, usageFlushMs = 10_000, platformLimits, currency = () => 'USD', invites }: ConsoleApiDeps): Router {
  const store = accounts.store;
  const api = express.Router();
  api.use(express.json({ limit: '64kb' }));

  api.get('/config', (_req, res) => {
    // How late a use may show: the flush interval, and the spread of the flush's slices after it.
    res.json({ oidc, usageFlushSeconds: Math.ceil((usageFlushMs * (1 + SPREAD)) / 1000) });
  });

  api.post('/session', async (req, res) => {
    const body = onlyFields(objectBody(req.body), ['email', 'password']);
    const { token, signedIn } = await sessions.signInWithPassword(body.email, body.password, client(req));
    res.setHeader('Set-Cookie', sessionCookie(token, sessions.settings.absoluteMs / 1000));
    res.json(await sessionView(store, signedIn));
  });

  api.post('/password', async (req, res) => {
    const body = onlyFields(objectBody(req.body), ['token', 'password']);
    const email = await accounts.setPasswordWithLink(body.token, body.password, client(req));
    res.json({ email });
  });

  // A link checked as the page opens with it, before any password is typed: a look that takes nothing.
  api.post('/password/check', async (req, res) => {
    const body = onlyFields(objectBody(req.body), ['token']);
    await accounts.checkPasswordLink(body.token);
    res.json({ valid: true });
  });

  // Everything below needs a live session.
  api.use(async (req, res, next) => {
    const signedIn = await sessions.resolve(sessionTokenOf(req.headers.cookie));
    if (!signedIn) throw errors.notSignedIn();
    res.locals.signedIn = signedIn;
    next();
  });

  sessionRoutes(api, sessions, store);
  keyRoutes(api, accounts, platformLimits);
  memberRoutes(api, accounts, invites);
  usageRoutes(api, store, currency);

  return api;
}
