/**
 * The console's API (/console/api on the public HTTPS listener, the page's own origin): sign in and
 * out, and the signed-in person's current account: its keys, members, usage and audit trail. What a
 * person may do there is their role's (accounts/roles.ts). A key belonging to another account is
 * answered 404, as one that does not exist. No answer carries a key (but the one made or rotated),
 * a digest, or a password hash. Every change checks the request's Origin first (csrf.ts).
 */
import express, { type Request, type Response, type Router } from 'express';
import { publicView } from '../auth/issue';
import { KEY_FIELDS, keyFields, noFields, objectBody, onlyFields, rotationGrace, withinPlatformLimits, type KeyFields, type LimitDefaults } from '../auth/key-fields';
import { normalizeEmail } from '../accounts/emails';
import type { Mailer } from '../accounts/mailer';
import { keyPolicyField } from '../accounts/key-policy';
import { alertWebhookUrlField, webhookHost } from '../accounts/webhook-post';
import { redirectOrigin } from '../accounts/oidc';
import { allowed, isPlatformAdmin, type Action, type Actor } from '../accounts/roles';
import { passwordPath, type Accounts } from '../accounts/service';
import { sessionCookie, sessionTokenOf, type Sessions, type SignedIn } from '../accounts/sessions';
import { breakdownCsv, breakdownQuery, dateRange, shareRow, usageCsv, usageRow } from '../accounts/usage';
import { amountOf } from '../accounts/prices';
import { errors } from '../errors';
import type { MembershipRecord } from '../store/types';

export interface ConsoleApiDeps {
  accounts: Accounts;
  sessions: Sessions;
  /** Whether "sign in with your identity provider" is offered (the OIDC routes are added by oidc.ts). */
  oidc: boolean;
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
  invites?: { mailer: Mailer; publicOrigin: string | undefined; trustedHosts: ReadonlySet<string> };
}

/** The signed-in person, put on the response by `requireSession`. */
const signedInOf = (res: Response): SignedIn => res.locals.signedIn as SignedIn;
const actorOf = (signedIn: SignedIn): Actor => ({ kind: 'person', email: signedIn.person.email, admin: signedIn.person.admin });
const client = (req: Request) => req.ip;

export function consoleApi({ accounts, sessions, oidc, platformLimits, currency = () => 'USD', invites }: ConsoleApiDeps): Router {
  const store = accounts.store;
  const api = express.Router();
  api.use(express.json({ limit: '64kb' }));

  api.get('/config', (_req, res) => {
    res.json({ oidc });
  });

  api.post('/session', async (req, res) => {
    const body = onlyFields(objectBody(req.body), ['email', 'password']);
    const { token, signedIn } = await sessions.signInWithPassword(body.email, body.password, client(req));
    res.setHeader('Set-Cookie', sessionCookie(token, sessions.settings.absoluteMs / 1000));
    res.json(await sessionView(signedIn));
  });

  api.post('/password', async (req, res) => {
    const body = onlyFields(objectBody(req.body), ['token', 'password']);
    const email = await accounts.setPasswordWithLink(body.token, body.password, client(req));
    res.json({ email });
  });

  // Everything below needs a live session.
  api.use(async (req, res, next) => {
    const signedIn = await sessions.resolve(sessionTokenOf(req.headers.cookie));
    if (!signedIn) throw errors.notSignedIn();
    res.locals.signedIn = signedIn;
    next();
  });

  api.get('/session', async (_req, res) => {
    res.json(await sessionView(signedInOf(res)));
  });

  api.delete('/session', async (req, res) => {
    noFields(req.body);
    await sessions.end(signedInOf(res), client(req));
    res.setHeader('Set-Cookie', sessionCookie('', 0));
    res.status(204).end();
  });

  // Sign out everywhere: every session of this person ends, this one too.
  api.delete('/sessions', async (req, res) => {
    noFields(req.body);
    await sessions.endEverywhere(signedInOf(res), client(req));
    res.setHeader('Set-Cookie', sessionCookie('', 0));
    res.status(204).end();
  });

  // One's own password, proving the current one: the person's other sessions end.
  api.put('/password', async (req, res) => {
    const body = onlyFields(objectBody(req.body), ['currentPassword', 'password']);
    await sessions.changePassword(signedInOf(res), body.currentPassword, body.password, client(req));
    res.status(204).end();
  });

  api.put('/session/account', async (req, res) => {
    const body = onlyFields(objectBody(req.body), ['account']);
    if (typeof body.account !== 'string') throw errors.invalidBody('account', "'account' must be an account id.");
    res.json(await sessionView(await sessions.switchAccount(signedInOf(res), body.account)));
  });

  api.get('/keys', async (_req, res) => {
    const { accountId } = may(res, 'keys.read');
    res.json({ object: 'list', data: (await store.list(accountId)).map(publicView) });
  });

  api.post('/keys', async (req, res) => {
    const { accountId, signedIn } = may(res, 'keys.create');
    const fields = keyFields(onlyFields(objectBody(req.body), KEY_FIELDS), true);
    withinPlatform(signedIn, fields);
    await withinAccountQuota(accountId, fields);
    const { key, record } = await accounts.createKey(accountId, fields, actorOf(signedIn), client(req));
    res.status(201).json({ ...publicView(record), key });
  });

  api.patch('/keys/:id', async (req, res) => {
    const { record, signedIn } = await mayManageKey(req, res);
    const fields = keyFields(onlyFields(objectBody(req.body), KEY_FIELDS), false);
    withinPlatform(signedIn, fields);
    await withinAccountQuota(record.accountId, fields);
    res.json(publicView(await accounts.editKey(record, fields, actorOf(signedIn), client(req))));
  });

  api.post('/keys/:id/revoke', async (req, res) => {
    noFields(req.body);
    const { record, signedIn } = await mayManageKey(req, res);
    res.json(publicView(await accounts.revokeKey(record, actorOf(signedIn), client(req))));
  });

  api.post('/keys/:id/rotate', async (req, res) => {
    const graceSeconds = rotationGrace(req.body);
    const { record, signedIn } = await mayManageKey(req, res);
    const rotated = await accounts.rotateKey(record, actorOf(signedIn), client(req), graceSeconds);
    res.json({ ...publicView(rotated.record), key: rotated.key });
  });

  api.get('/members', async (_req, res) => {
    const { accountId } = may(res, 'members.read');
    res.json({ object: 'list', data: (await store.listMembers(accountId)).map(memberView) });
  });

  api.post('/members', async (req, res) => {
    const { account, accountId, signedIn } = may(res, 'members.manage');
    const body = onlyFields(objectBody(req.body), ['email', 'role']);
    // Checked before anything changes: an emailed link must not point at a Host the request chose.
    const origin = invites ? redirectOrigin(invites.publicOrigin, req.headers.host, invites.trustedHosts) : undefined;
    if (invites && !origin) throw errors.inviteHostNotAllowed();
    const actor = actorOf(signedIn);
    const { member, person, created } = await accounts.addMember(accountId, { email: body.email, role: body.role }, actor, client(req));
    // Only someone this request made gets a one-time link to set a password: a person who already
    // exists may belong to other accounts (or sign in with the identity provider), and a link would
    // let this account's owner sign in as them there.
    if (!created) return void res.status(201).json(memberView(member));
    if (invites) {
      // By email, to the invitee's own mailbox: the inviter never sees the link.
      const sent = await accounts.sendPasswordLink(person.email, accountId, actor, client(req), (token) =>
        invites.mailer.sendInvite({ to: person.email, link: `${origin}${passwordPath(token)}`, accountName: account.name, invitedBy: signedIn.person.email }),
      );
      return void res.status(201).json({ ...memberView(member), invited: sent ? 'email' : 'failed' });
    }
    const link = passwordPath(await accounts.passwordLink(person.email, accountId, actor, client(req)));
    res.status(201).json({ ...memberView(member), passwordLink: link });
  });

  // The member's keys in the account are revoked, unless the owner takes them over (?transferKeysTo=
  // their own email; handing them to another owner is a platform admin's, through the admin API).
  api.delete('/members/:email', async (req, res) => {
    const { accountId, signedIn } = may(res, 'members.manage');
    const heir = req.query.transferKeysTo;
    if (heir !== undefined && normalizeEmail(heir) !== signedIn.person.email) {
      throw errors.invalidBody('transferKeysTo', "'transferKeysTo' may name only yourself: the owner who removes a member may take over their keys.");
    }
    await accounts.removeMember(accountId, normalizeEmail(req.params.email) ?? req.params.email, actorOf(signedIn), client(req), heir);
    res.status(204).end();
  });

  // The account's owners': its key policy {"keyPolicy": {"maxLifetimeDays": N}} or null, and its own alert webhook {"alertWebhookUrl": "https://..."} or null.
  api.patch('/account', async (req, res) => {
    const { accountId, signedIn } = may(res, 'account.policy');
    const body = onlyFields(objectBody(req.body), ['keyPolicy', 'alertWebhookUrl']);
    if (body.keyPolicy === undefined && body.alertWebhookUrl === undefined) throw errors.invalidBody('keyPolicy', "'keyPolicy' or 'alertWebhookUrl' is what may be changed here.");
    const account = await accounts.updateAccount(accountId, { keyPolicy: keyPolicyField(body.keyPolicy), alertWebhookUrl: alertWebhookUrlField(body.alertWebhookUrl) }, actorOf(signedIn), client(req));
    res.json({ id: account.id, name: account.name, keyPolicy: account.keyPolicy ?? null, alertWebhook: webhookHost(account) });
  });

  // The account's quota and budget alerts of the current UTC day and month (its keys' too), newest first.
  api.get('/alerts', async (_req, res) => {
    const { accountId, signedIn } = may(res, 'usage.read');
    const owners = allowed(actorOf(signedIn), signedIn.role, 'audit.read'); // leak reports (where a key was found) are the owners'
    const today = new Date().toISOString().slice(0, 10);
    const alerts = await store.listAlerts(accountId, new Date(`${today.slice(0, 7)}-01T00:00:00Z`));
    // Keys that expire soon are said on their rows (the Keys tab), not here.
    const current = alerts.filter((alert) => alert.kind !== 'key.expiring' && (alert.periodStart === today || alert.periodStart === today.slice(0, 7)));
    // Keys revoked as leaked in the last 7 days (the audit trail's key.leaked), with where they were found.
    const weekAgo = new Date(Date.now() - 7 * 86_400_000).toISOString();
    const leaks = !owners ? [] : (await store.listAudit(accountId, 100, { action: 'key.leaked', since: weekAgo }))
      .map((event) => ({ keyId: event.target, at: event.at, ...(typeof event.details?.url === 'string' ? { url: event.details.url } : {}) }));
    res.json({ object: 'list', currency: currency(), data: current.map(({ id: _id, accountId: _account, sentAt: _sent, ...shown }) => shown), leaks });
  });

  api.get('/usage', async (req, res) => {
    const { accountId, account } = may(res, 'usage.read');
    const { from, to } = dateRange(req.query.from, req.query.to);
    const days = await usageOf(accountId, from, to, req.query.keyId);
    // Spend against the budget (the key's when one is chosen, else the account's), this UTC day and month.
    const today = new Date().toISOString().slice(0, 10);
    const month = await usageOf(accountId, `${today.slice(0, 7)}-01`, today, req.query.keyId);
    // Only an id of a key's shape reaches the store (PostgreSQL refuses some bytes in text with an error of its own).
    const keyId = req.query.keyId;
    if (keyId !== undefined && (typeof keyId !== 'string' || !/^key_[A-Za-z0-9_-]{1,64}$/.test(keyId))) throw errors.invalidBody('keyId', "'keyId' must be a key's id (key_...).");
    const key = keyId === undefined ? undefined : await store.get(keyId);
    const budget = key?.accountId === accountId ? key.budget : account.budget;
    const spent = (rows: typeof month) => amountOf(rows.reduce((sum, row) => sum + row.costNanos, 0));
    res.json({
      object: 'list',
      from,
      to,
      currency: currency(),
      data: days.map(usageRow).map(({ accountId: _account, ...row }) => row),
      budget: { ...budget, spentToday: spent(month.filter((row) => row.date === today)), spentThisMonth: spent(month) },
    });
  });

  api.get('/usage.csv', async (req, res) => {
    const { accountId, account } = may(res, 'usage.read');
    const { from, to } = dateRange(req.query.from, req.query.to);
    const names = new Map((await store.list(accountId)).map((key) => [key.id, key.name]));
    res.setHeader('Content-Type', 'text/csv; charset=utf-8');
    res.setHeader('Content-Disposition', `attachment; filename="usage-${account.name.replace(/[^A-Za-z0-9._-]/g, '_')}-${from}-${to}.csv"`);
    res.send(usageCsv(await usageOf(accountId, from, to, req.query.keyId), names));
  });

  // By model or by end user over the days (accounts/usage.ts: breakdownQuery), largest first; and as CSV.
  api.get('/usage/breakdown', async (req, res) => {
    const { accountId } = may(res, 'usage.read');
    const { from, to, query } = breakdownQuery(req.query, accountId);
    res.json({ object: 'list', by: query.by, from, to, currency: currency(), data: (await store.usageBreakdown(accountId, from, to, query)).map((share) => shareRow(share, query.by)) });
  });

  api.get('/usage/breakdown.csv', async (req, res) => {
    const { accountId, account } = may(res, 'usage.read');
    const { from, to, query } = breakdownQuery(req.query, accountId);
    res.setHeader('Content-Type', 'text/csv; charset=utf-8');
    res.setHeader('Content-Disposition', `attachment; filename="usage-by-${query.by}-${account.name.replace(/[^A-Za-z0-9._-]/g, '_')}-${from}-${to}.csv"`);
    res.send(breakdownCsv(await store.usageBreakdown(accountId, from, to, query), query.by));
  });

  /** The account's daily usage, of one key when `keyId` names one. */
  async function usageOf(accountId: string, from: string, to: string, keyId: unknown) {
    const days = await store.usage(accountId, from, to);
    return typeof keyId === 'string' ? days.filter((day) => day.keyId === keyId) : days;
  }

  api.get('/audit', async (_req, res) => {
    const { accountId } = may(res, 'audit.read');
    res.json({ object: 'list', data: (await store.listAudit(accountId, 500)).map(({ id, at, actor, action, target, client: from, details }) => ({ id, at, actor, action, target, client: from, details })) });
  });

  /** The current account and the action allowed in it, or 403 (or 404 with no account at all). */
  function may(res: Response, action: Action) {
    const signedIn = signedInOf(res);
    const account = signedIn.account;
    if (!account) throw errors.permissionDenied('do this: you are not a member of any account yet');
    if (!allowed(actorOf(signedIn), signedIn.role, action)) throw errors.permissionDenied(describe(action));
    return { signedIn, account, accountId: account.id };
  }

  /** A key of the current account that this person may edit, rotate or revoke. */
  async function mayManageKey(req: Request, res: Response) {
    const { signedIn, accountId } = may(res, 'keys.read');
    const record = await accounts.key(String(req.params.id), accountId);
    if (!allowed(actorOf(signedIn), signedIn.role, 'key.manage', record.createdBy)) throw errors.permissionDenied('change a key someone else created');
    return { record, signedIn };
  }

  /** A key's own limits, set by someone who is not a platform admin, stay within the platform's. */
  function withinPlatform(signedIn: SignedIn, fields: KeyFields) {
    if (!isPlatformAdmin(actorOf(signedIn))) withinPlatformLimits(fields.rateLimit, platformLimits());
  }

  /** A key's own quota and budget stay within its account's. */
  async function withinAccountQuota(accountId: string, fields: KeyFields) {
    if (!fields.quota && !fields.budget) return;
    const account = await accounts.account(accountId);
    const caps = [
      ['quota', fields.quota ?? {}, account.quota],
      ['budget', fields.budget ?? {}, account.budget],
    ] as const;
    for (const [field, own, ofAccount] of caps) {
      for (const [period, cap] of Object.entries(ofAccount) as Array<[keyof typeof own, number | null]>) {
        const value = own[period];
        if (cap !== null && (value === null || (value !== undefined && value > cap))) throw errors.invalidBody(`${field}.${period}`, `'${field}.${period}' must be at most the account's, ${cap}.`);
      }
    }
  }

  async function sessionView(signedIn: SignedIn) {
    const names = new Map((await store.listAccounts()).map((account) => [account.id, account]));
    const mine = signedIn.memberships.map((m) => ({ id: m.accountId, name: names.get(m.accountId)?.name ?? m.accountId, role: m.role }));
    const others = signedIn.person.admin ? [...names.values()].filter((a) => !mine.some((m) => m.id === a.id)).map((a) => ({ id: a.id, name: a.name, role: null })) : [];
    return {
      email: signedIn.person.email,
      admin: signedIn.person.admin,
      via: signedIn.session.via,
      expiresAt: signedIn.session.expiresAt,
      account: signedIn.account ? { id: signedIn.account.id, name: signedIn.account.name, role: signedIn.role ?? null, quota: signedIn.account.quota, budget: signedIn.account.budget, keyPolicy: signedIn.account.keyPolicy ?? null, alertWebhook: signedIn.role === 'owner' || signedIn.person.admin ? webhookHost(signedIn.account) : null } : null,
      accounts: [...mine, ...others],
    };
  }

  return api;
}

const memberView = (member: MembershipRecord) => ({ email: member.email, role: member.role, addedAt: member.addedAt, addedBy: member.addedBy });

function describe(action: Action): string {
  return {
    'account.manage': 'change the account itself (a platform admin does)',
    'account.policy': "change this account's key policy (an owner does)",
    'members.read': 'see the members',
    'members.manage': "manage this account's members (an owner does)",
    'keys.read': 'see the keys',
    'keys.create': 'create keys',
    'key.manage': 'change this key',
    'usage.read': 'see the usage',
    'audit.read': "see this account's audit trail (an owner does)",
  }[action];
}
