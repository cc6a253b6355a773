/**
 * The admin API (/admin/api on the admin listener): accounts, their members and keys, for operators
 * and automation holding the admin token (the platform admin's rights). JSON in, JSON out,
 * OpenAI-shape errors. A clear key appears only in the answers to create and rotate; no answer ever
 * carries a digest or a password hash. Every change leaves an audit event by `admin-token`.
 */
import express, { type Request, type Router } from 'express';
import { publicView } from '../auth/issue';
import { budget, KEY_FIELDS, keyFields, noFields, objectBody, onlyFields, quota, rotationGrace } from '../auth/key-fields';
import { passwordPath, type Accounts } from '../accounts/service';
import type { Actor } from '../accounts/roles';
import { normalizeEmail } from '../accounts/emails';
import { keyPolicyField } from '../accounts/key-policy';
import { alertWebhookUrlField, webhookHost } from '../accounts/webhook-post';
import { endUserQuotaField } from '../accounts/end-users';
import { breakdownQuery, dateRange, shareRow, usageRow } from '../accounts/usage';
import { errors } from '../errors';
import { defaultAccountId } from '../store/default-account';
import type { AccountRecord, MembershipRecord } from '../store/types';

const ADMIN: Actor = { kind: 'admin-token' };
const client = (req: Request) => req.socket.remoteAddress;

/** The router behind the admin token guard (app.ts puts the guard in front of it). */
/** An account as the admin API shows it: `keyPolicy` and `endUserQuota` null when it has none; of its own webhook (a secret) the host only. */
const accountView = ({ alertWebhookUrl, ...account }: AccountRecord) => ({ ...account, keyPolicy: account.keyPolicy ?? null, endUserQuota: account.endUserQuota ?? null, alertWebhook: webhookHost({ alertWebhookUrl }) });

function expiringWithin(value: unknown): number | undefined {
  if (value === undefined) return undefined;
  const days = typeof value === 'string' && /^\d{1,4}$/.test(value) ? Number(value) : NaN;
  if (!(days >= 1 && days <= 3650)) throw errors.invalidBody('expiringWithinDays', "'expiringWithinDays' must be a whole number of days from 1 to 3650.");
  return days;
}

export function adminApi(accounts: Accounts, currency: () => string = () => 'USD'): Router {
  const store = accounts.store;
  const api = express.Router();
  api.use(express.json({ limit: '64kb' }));

  api.get('/keys', async (req, res) => {
    const account = typeof req.query.account === 'string' ? req.query.account : undefined;
    // ?expiringWithinDays=7: the live keys that expire within that many days, soonest first.
    const within = expiringWithin(req.query.expiringWithinDays);
    const now = Date.now();
    const keys = await store.list(account);
    const shown = within === undefined ? keys : keys.filter((key) => !key.revokedAt && key.expiresAt !== null && Date.parse(key.expiresAt) > now && Date.parse(key.expiresAt) <= now + within * 86_400_000).sort((a, b) => (a.expiresAt! < b.expiresAt! ? -1 : 1));
    res.json({ object: 'list', data: shown.map((key) => publicView(key)) });
  });

  api.post('/keys', async (req, res) => {
    const body = onlyFields(objectBody(req.body), [...KEY_FIELDS, 'account']);
    const fields = keyFields(body, true);
    // `account` is an account's id (acc_...), as GET /admin/api/accounts lists them; absent: `default`.
    if (body.account !== undefined && typeof body.account !== 'string') throw errors.invalidBody('account', "'account' must be an account id (acc_...), or absent for the account 'default'.");
    const accountId = body.account === undefined ? await defaultAccountId(store) : (await accounts.account(body.account)).id;
    const { key, record } = await accounts.createKey(accountId, fields, ADMIN, client(req));
    res.status(201).json({ ...publicView(record), key });
  });

  api.get('/keys/:id', async (req, res) => {
    res.json(publicView(await accounts.key(req.params.id, undefined)));
  });

  api.patch('/keys/:id', async (req, res) => {
    const fields = keyFields(onlyFields(objectBody(req.body), KEY_FIELDS), false);
    res.json(publicView(await accounts.editKey(await accounts.key(req.params.id, undefined), fields, ADMIN, client(req))));
  });

  // Other scanners' findings: {keys: [strings]}; each that is a key of this gateway is revoked and
  // audited (key.leaked). The answer names the key, never repeats the string.
  api.post('/keys/leaked', async (req, res) => {
    const strings = onlyFields(objectBody(req.body), ['keys']).keys;
    if (!Array.isArray(strings) || strings.length === 0 || strings.length > 1000 || !strings.every((s) => typeof s === 'string' && s.length > 0 && s.length <= 1000)) {
      throw errors.invalidBody('keys', "'keys' is a list of 1 to 1000 strings, each a leaked key as a scanner found it.");
    }
    const data = [];
    for (const found of strings as string[]) {
      const { label, keyId, revoked } = await accounts.leaks.report(found, { reporter: 'admin-token' }, client(req));
      data.push(keyId ? { label, keyId, revoked } : { label, revoked });
    }
    res.json({ object: 'list', data });
  });

  api.post('/keys/:id/revoke', async (req, res) => {
    noFields(req.body);
    res.json(publicView(await accounts.revokeKey(await accounts.key(req.params.id, undefined), ADMIN, client(req))));
  });

  api.post('/keys/:id/rotate', async (req, res) => {
    const graceSeconds = rotationGrace(req.body);
    const { record, key } = await accounts.rotateKey(await accounts.key(req.params.id, undefined), ADMIN, client(req), graceSeconds);
    res.json({ ...publicView(record), key });
  });

  api.post('/accounts', async (req, res) => {
    const body = onlyFields(objectBody(req.body), ['name', 'quota', 'budget', 'keyPolicy', 'endUserQuota']);
    res.status(201).json(accountView(await accounts.createAccount(body.name, ADMIN, client(req), quota(body.quota, 'quota'), budget(body.budget, 'budget'), keyPolicyField(body.keyPolicy), endUserQuotaField(body.endUserQuota))));
  });

  api.get('/accounts', async (_req, res) => {
    res.json({ object: 'list', data: (await store.listAccounts()).map(accountView) });
  });

  api.get('/accounts/:id', async (req, res) => {
    res.json(accountView(await accounts.account(req.params.id)));
  });

  api.patch('/accounts/:id', async (req, res) => {
    const body = onlyFields(objectBody(req.body), ['name', 'quota', 'budget', 'keyPolicy', 'endUserQuota', 'alertWebhookUrl']);
    const changes = { name: body.name, quota: quota(body.quota, 'quota'), budget: budget(body.budget, 'budget'), keyPolicy: keyPolicyField(body.keyPolicy), endUserQuota: endUserQuotaField(body.endUserQuota), alertWebhookUrl: alertWebhookUrlField(body.alertWebhookUrl) };
    res.json(accountView(await accounts.updateAccount(req.params.id, changes, ADMIN, client(req))));
  });

  api.get('/accounts/:id/members', async (req, res) => {
    await accounts.account(req.params.id);
    res.json({ object: 'list', data: (await store.listMembers(req.params.id)).map(memberView) });
  });

  api.post('/accounts/:id/members', async (req, res) => {
    const body = onlyFields(objectBody(req.body), ['email', 'role', 'password']);
    const { member, person } = await accounts.addMember(req.params.id, { email: body.email, role: body.role, password: body.password }, ADMIN, client(req));
    res.status(201).json({ ...memberView(member), passwordSet: person.passwordHash !== null });
  });

  // A member's role changed ({"role": "owner"|"member"}); an account keeps at least one owner.
  api.patch('/accounts/:id/members/:email', async (req, res) => {
    const body = onlyFields(objectBody(req.body), ['role']);
    res.json(memberView(await accounts.setMemberRole(req.params.id, req.params.email, body.role, ADMIN, client(req))));
  });

  // The member's keys in the account are revoked, unless ?transferKeysTo= names an owner who takes them.
  api.delete('/accounts/:id/members/:email', async (req, res) => {
    await accounts.removeMember(req.params.id, req.params.email, ADMIN, client(req), req.query.transferKeysTo);
    res.status(204).end();
  });

  api.post('/accounts/:id/members/:email/password-link', async (req, res) => {
    noFields(req.body);
    const email = normalizeEmail(req.params.email) ?? req.params.email;
    if (!(await store.listMembers(req.params.id)).some((m) => m.email === email)) throw errors.memberNotFound(email);
    const token = await accounts.passwordLink(email, req.params.id, ADMIN, client(req));
    res.status(201).json({ email, path: passwordPath(token) });
  });

  api.get('/accounts/:id/usage', async (req, res) => {
    await accounts.account(req.params.id);
    const { from, to } = dateRange(req.query.from, req.query.to);
    res.json({ object: 'list', currency: currency(), data: (await store.usage(req.params.id, from, to)).map(usageRow) });
  });

  // The account's usage by model or by end user (accounts/usage.ts: breakdownQuery), largest first.
  api.get('/accounts/:id/usage/breakdown', async (req, res) => {
    await accounts.account(req.params.id);
    const { from, to, query } = breakdownQuery(req.query, req.params.id);
    res.json({ object: 'list', by: query.by, from, to, currency: currency(), data: (await store.usageBreakdown(req.params.id, from, to, query)).map((share) => shareRow(share, query.by)) });
  });

  // The account's quota and budget alerts (of its keys too) since the first day of the last month, newest first.
  api.get('/accounts/:id/alerts', async (req, res) => {
    await accounts.account(req.params.id);
    const now = new Date();
    const since = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - 1, 1));
    res.json({ object: 'list', currency: currency(), data: (await store.listAlerts(req.params.id, since)).map(({ accountId: _account, ...shown }) => shown) });
  });

  api.get('/accounts/:id/audit', async (req, res) => {
    await accounts.account(req.params.id);
    res.json({ object: 'list', data: await store.listAudit(req.params.id, 500) });
  });

  api.patch('/people/:email', async (req, res) => {
    const body = onlyFields(objectBody(req.body), ['admin', 'passwordWithOidc']);
    if (body.admin === undefined && body.passwordWithOidc === undefined) throw errors.invalidBody(null, "Give 'admin' or 'passwordWithOidc' (or both).");
    for (const field of ['admin', 'passwordWithOidc'] as const) {
      if (body[field] !== undefined && typeof body[field] !== 'boolean') throw errors.invalidBody(field, `'${field}' must be true or false.`);
    }
    let person = typeof body.admin === 'boolean' ? await accounts.setAdmin(req.params.email, body.admin, ADMIN, client(req)) : undefined;
    if (typeof body.passwordWithOidc === 'boolean') person = await accounts.setPasswordWithOidc(req.params.email, body.passwordWithOidc, ADMIN, client(req));
    const updated = person!;
    res.json({ email: updated.email, admin: updated.admin, passwordWithOidc: updated.passwordWithOidc ?? false, createdAt: updated.createdAt });
  });

  return api;
}

const memberView = (member: MembershipRecord) => ({ accountId: member.accountId, email: member.email, role: member.role, addedAt: member.addedAt, addedBy: member.addedBy });
