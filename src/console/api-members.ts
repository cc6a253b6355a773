/**
 * The console API's routes about the current account's people and settings (api.ts adds them after
 * the key routes): its members listed, added (with a one-time link to set a password, by email when
 * the console sends invitations), given another role and removed, and the owners' account settings
 * (key policy, alert webhook).
 */
import type { Router } from 'express';
import { objectBody, onlyFields } from '../auth/key-fields';
import { normalizeEmail } from '../accounts/emails';
import { keyPolicyField } from '../accounts/key-policy';
import type { Mailer } from '../accounts/mailer';
import { redirectOrigin } from '../accounts/oidc';
import { passwordPath, type Accounts } from '../accounts/service';
import { alertWebhookUrlField, webhookHost } from '../accounts/webhook-post';
import { errors } from '../errors';
import type { MembershipRecord } from '../store/types';
import { actorOf, client, may } from './api-access';

/** Invitations by email (console.smtp); ConsoleApiDeps (api.ts) says how the link is made. */
export interface Invites {
  mailer: Mailer;
  publicOrigin: string | undefined;
  trustedHosts: ReadonlySet<string>;
}

export function memberRoutes(api: Router, accounts: Accounts, invites: Invites | undefined): void {
  const store = accounts.store;

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

  // A member's role changed ({"role": "owner"|"member"}); an account keeps at least one owner.
  api.patch('/members/:email', async (req, res) => {
    const { accountId, signedIn } = may(res, 'members.manage');
    const body = onlyFields(objectBody(req.body), ['role']);
    const member = await accounts.setMemberRole(accountId, req.params.email, body.role, actorOf(signedIn), client(req));
    res.json(memberView(member));
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
}

const memberView = (member: MembershipRecord) => ({ email: member.email, role: member.role, addedAt: member.addedAt, addedBy: member.addedBy });
