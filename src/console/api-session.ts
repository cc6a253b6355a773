/**
 * The console API's routes about the signed-in person's own session (api.ts adds them first after
 * the session check): who is signed in and where, signing out (here or everywhere), their own
 * password, and switching the current account. Signing in needs no session, so it stays in api.ts;
 * it answers with the same view, sessionView.
 */
import type { Router } from 'express';
import { noFields, objectBody, onlyFields } from '../auth/key-fields';
import { sessionCookie, type Sessions, type SignedIn } from '../accounts/sessions';
import { webhookHost } from '../accounts/webhook-post';
import { errors } from '../errors';
import type { Store } from '../store/types';
import { actorOf, client, permissionsOf, signedInOf } from './api-access';

export function sessionRoutes(api: Router, sessions: Sessions, store: Store): void {
  api.get('/session', async (_req, res) => {
    res.json(await sessionView(store, signedInOf(res)));
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
    res.json(await sessionView(store, await sessions.switchAccount(signedInOf(res), body.account)));
  });
}

export async function sessionView(store: Store, signedIn: SignedIn) {
  const names = new Map((await store.listAccounts()).map((account) => [account.id, account]));
  const mine = signedIn.memberships.map((m) => ({ id: m.accountId, name: names.get(m.accountId)?.name ?? m.accountId, role: m.role }));
  const others = signedIn.person.admin ? [...names.values()].filter((a) => !mine.some((m) => m.id === a.id)).map((a) => ({ id: a.id, name: a.name, role: null })) : [];
  return {
    email: signedIn.person.email,
    admin: signedIn.person.admin,
    via: signedIn.session.via,
    expiresAt: signedIn.session.expiresAt,
    account: signedIn.account ? { id: signedIn.account.id, name: signedIn.account.name, role: signedIn.role ?? null, quota: signedIn.account.quota, budget: signedIn.account.budget, keyPolicy: signedIn.account.keyPolicy ?? null, alertWebhook: signedIn.role === 'owner' || signedIn.person.admin ? webhookHost(signedIn.account) : null, permissions: permissionsOf(actorOf(signedIn), signedIn.role) } : null,
    accounts: [...mine, ...others],
  };
}
