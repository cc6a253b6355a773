/**
 * Pure: who may do what. Platform admins (the admin token, or a person with the admin role) manage
 * every account. In an account, an owner manages every key and the members; a member sees the
 * account's keys and usage, and creates, rotates, edits and revokes the keys they created. Quotas of
 * accounts are the platform's to set; the audit trail and the key policy are the owners'.
 */
import type { Role } from '../store/types';

/**
 * Who acts: the admin token (admin API), the `chatgate` CLI on the store, the first start of a fresh
 * store, or a signed-in person. The first three have the platform admin's rights.
 */
export type Actor = { kind: 'admin-token' } | { kind: 'cli' } | { kind: 'first-start' } | { kind: 'person'; email: string; admin: boolean };

export type Action =
  | 'account.manage' // create an account, rename it, set its quota
  | 'account.policy' // how long the account's keys may live (its owners)
  | 'members.read'
  | 'members.manage'
  | 'keys.read'
  | 'keys.create'
  | 'key.manage' // edit, rotate, revoke a key (with the key's creator)
  | 'usage.read'
  | 'audit.read';

const MEMBER_MAY: ReadonlySet<Action> = new Set<Action>(['members.read', 'keys.read', 'keys.create', 'key.manage', 'usage.read']);

/** May `actor`, whose role in the account is `role` (undefined: not a member), do `action` there (to a key made by `keyCreatedBy`)? */
export function allowed(actor: Actor, role: Role | undefined, action: Action, keyCreatedBy?: string): boolean {
  if (actor.kind !== 'person' || actor.admin) return true;
  if (role === 'owner') return action !== 'account.manage';
  if (role === 'member') return MEMBER_MAY.has(action) && (action !== 'key.manage' || keyCreatedBy === actor.email);
  return false;
}

/** How an actor is named in the audit trail and on the keys they make: an email, `admin-token`, `cli` or `first-start`. */
export function actorName(actor: Actor): string {
  return actor.kind === 'person' ? actor.email : actor.kind;
}

/** Whether the actor has the platform admin's rights (what only an admin may set, such as limits past the platform's). */
export function isPlatformAdmin(actor: Actor): boolean {
  return actor.kind !== 'person' || actor.admin;
}
