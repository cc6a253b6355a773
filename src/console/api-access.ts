/**
 * The checks every group of the console's API (api.ts) asks its caller the same way: the signed-in
 * person the session check put on the response, them as an actor, their address, and whether their
 * role lets them do an action in their current account (and, if not, the words the 403 says).
 */
import type { Request, Response } from 'express';
import { allowed, type Action, type Actor } from '../accounts/roles';
import type { Role } from '../store/types';
import type { SignedIn } from '../accounts/sessions';
import { errors } from '../errors';

/** The signed-in person, put on the response by the session check (api.ts). */
export const signedInOf = (res: Response): SignedIn => res.locals.signedIn as SignedIn;
export const actorOf = (signedIn: SignedIn): Actor & { kind: 'person' } => ({ kind: 'person', email: signedIn.person.email, admin: signedIn.person.admin });
export const client = (req: Request) => req.ip;

/** The current account and the action allowed in it, or 403 (or 404 with no account at all). */
export function may(res: Response, action: Action) {
  const signedIn = signedInOf(res);
  const account = signedIn.account;
  if (!account) throw errors.permissionDenied('do this: you are not a member of any account yet');
  if (!allowed(actorOf(signedIn), signedIn.role, action)) throw errors.permissionDenied(describe(action));
  return { signedIn, account, accountId: account.id };
}

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

/**
 * What the page may offer in the current account, asked of the role rules (accounts/roles.ts) here so
 * that the page never copies them. A key's changes depend on who made it: every key's, or only one's own.
 */
export function permissionsOf(actor: Actor & { kind: 'person' }, role: Role | undefined) {
  const may = (action: Action) => allowed(actor, role, action);
  const anyKey = allowed(actor, role, 'key.manage', '');
  return {
    createKeys: may('keys.create'),
    manageKeys: anyKey ? 'all' : allowed(actor, role, 'key.manage', actor.email) ? 'own' : 'none',
    manageMembers: may('members.manage'),
    setPolicy: may('account.policy'),
    readAudit: may('audit.read'),
  };
}
