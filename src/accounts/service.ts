/**
 * What people and scripts do to accounts, members and keys, in one place for every way in (the admin
 * API with the admin token, the console's API with a session, the CLI, sign-in provisioning): each
 * operation checks its input, changes the store, and leaves its audit event. Who may do it is the
 * caller's to check first (roles.ts); this module trusts its caller on that, and on nothing else.
 */
import { randomBytes } from 'node:crypto';
import { sha256Hex } from '../common/sha256';
import { issueKey, rotateKey } from '../auth/issue';
import { requiredName, type KeyFields } from '../auth/key-fields';
import { errors } from '../errors';
import { AccountNameTaken, LastOwner, NO_BUDGET, NO_QUOTA, type AccountRecord, type Budget, type EndUserQuota, type KeyPolicy, type KeyRecord, type MembershipRecord, type PersonRecord, type Quota, type Role, type Store } from '../store/types';
import { actorName, type Actor } from './roles';
import type { Auditor } from './audit';
import { LeakReports } from './leak-reports';
import { expiryUnderPolicy } from './key-policy';
import { mergedEndUserQuota } from './end-users';
import { isNfkcStable, normalizeEmail } from './emails';
import { hashPassword, passwordProblem } from './passwords';
import { webhookHost } from './webhook-post';

/** A set-password link is good for this long, once. */
export const PASSWORD_LINK_TTL_MS = 7 * 24 * 3600_000;

export class Accounts {
  /** Leaked keys reported by a scanner: revoked and audited (leak-reports.ts). */
  readonly leaks: LeakReports;

  constructor(
    readonly store: Store,
    private readonly auditor: Auditor,
    private readonly now: () => Date = () => new Date(),
  ) {
    this.leaks = new LeakReports(store, auditor, now);
  }

  async createAccount(name: unknown, by: Actor, client: string | undefined, quota: Partial<Quota> = {}, budget: Partial<Budget> = {}, keyPolicy?: KeyPolicy | null, endUserQuota?: Partial<EndUserQuota> | null): Promise<AccountRecord> {
    const perEndUser = endUserQuota ? mergedEndUserQuota(undefined, endUserQuota) : null;
    const record: AccountRecord = { id: `acc_${randomBytes(9).toString('base64url')}`, name: requiredName(name), createdAt: this.now().toISOString(), quota: { ...NO_QUOTA, ...quota }, budget: { ...NO_BUDGET, ...budget }, ...(keyPolicy ? { keyPolicy } : {}), ...(perEndUser ? { endUserQuota: perEndUser } : {}) };
    try {
      await this.store.createAccount(record);
    } catch (err) {
      if (err instanceof AccountNameTaken) throw errors.accountNameTaken(record.name);
      throw err;
    }
    await this.auditor.record({ accountId: record.id, actor: actorName(by), action: 'account.created', target: record.id, client, details: { name: record.name, quota: record.quota, budget: record.budget } });
    return record;
  }

  async account(id: string): Promise<AccountRecord> {
    const account = await this.store.getAccount(id);
    if (!account) throw errors.accountNotFound(id);
    return account;
  }

  async updateAccount(id: string, changes: { name?: unknown; quota?: Partial<Quota>; budget?: Partial<Budget>; keyPolicy?: KeyPolicy | null; endUserQuota?: Partial<EndUserQuota> | null; alertWebhookUrl?: string | null }, by: Actor, client: string | undefined): Promise<AccountRecord> {
    const before = await this.account(id);
    const name = changes.name === undefined ? undefined : requiredName(changes.name);
    const endUserQuota = changes.endUserQuota === undefined ? undefined : mergedEndUserQuota(before.endUserQuota, changes.endUserQuota);
    let after: AccountRecord | undefined;
    try {
      after = await this.store.updateAccount(id, { name, quota: changes.quota, budget: changes.budget, keyPolicy: changes.keyPolicy, endUserQuota, alertWebhookUrl: changes.alertWebhookUrl });
    } catch (err) {
      if (err instanceof AccountNameTaken) throw errors.accountNameTaken(err.accountName);
      throw err;
    }
    if (!after) throw errors.accountNotFound(id);
    if (name !== undefined && name !== before.name) await this.auditor.record({ accountId: id, actor: actorName(by), action: 'account.renamed', target: id, client, details: { from: before.name, to: name } });
    if (changes.quota && JSON.stringify(after.quota) !== JSON.stringify(before.quota)) {
      await this.auditor.record({ accountId: id, actor: actorName(by), action: 'quota.changed', target: id, client, details: { from: before.quota, to: after.quota } });
    }
    if (changes.budget && JSON.stringify(after.budget) !== JSON.stringify(before.budget)) {
      await this.auditor.record({ accountId: id, actor: actorName(by), action: 'budget.changed', target: id, client, details: { from: before.budget, to: after.budget } });
    }
    if (changes.keyPolicy !== undefined && JSON.stringify(after.keyPolicy ?? null) !== JSON.stringify(before.keyPolicy ?? null)) {
      await this.auditor.record({ accountId: id, actor: actorName(by), action: 'key_policy.changed', target: id, client, details: { from: before.keyPolicy ?? null, to: after.keyPolicy ?? null } });
    }
    if (endUserQuota !== undefined && JSON.stringify(after.endUserQuota ?? null) !== JSON.stringify(before.endUserQuota ?? null)) {
      await this.auditor.record({ accountId: id, actor: actorName(by), action: 'end_user_quota.changed', target: id, client, details: { from: before.endUserQuota ?? null, to: after.endUserQuota ?? null } });
    }
    // The URL is a secret: the audit names its host only.
    if (changes.alertWebhookUrl !== undefined && (after.alertWebhookUrl ?? null) !== (before.alertWebhookUrl ?? null)) {
      await this.auditor.record({ accountId: id, actor: actorName(by), action: 'alert_webhook.changed', target: id, client, details: { from: webhookHost(before), to: webhookHost(after) } });
    }
    return after;
  }

  /**
   * Adds a person to an account (made on first mention: `created`), or changes their role; with a
   * password, sets it. A person who already exists keeps their password: an account's owner has no
   * say over a person who may belong to other accounts.
   */
  async addMember(accountId: string, input: { email: unknown; role: unknown; password?: unknown }, by: Actor, client: string | undefined): Promise<{ member: MembershipRecord; person: PersonRecord; created: boolean }> {
    await this.account(accountId);
    const email = normalizeEmail(input.email);
    if (!email) throw errors.invalidBody('email', "'email' must be an email address.");
    // A look-alike (a Kelvin sign for a k, full-width letters) would show as another person's address.
    if (!isNfkcStable(email)) throw errors.invalidBody('email', "'email' holds characters that imitate others (NFKC changes it): write the address in its plain form.");
    if (input.role !== 'owner' && input.role !== 'member') throw errors.invalidBody('role', "'role' must be 'owner' or 'member'.");
    const role: Role = input.role;
    if (input.password !== undefined) {
      const problem = passwordProblem(input.password);
      if (problem) throw errors.invalidBody('password', `'password' ${problem}.`);
    }
    const existing = await this.store.getPerson(email);
    const passwordHash = input.password === undefined ? (existing?.passwordHash ?? null) : await hashPassword(input.password as string);
    const person = await this.store.putPerson({ email, admin: existing?.admin ?? false, passwordHash, createdAt: existing?.createdAt ?? this.now().toISOString() });
    const previous = (await this.store.listMembers(accountId)).find((m) => m.email === email);
    // Adding someone already in the account with the role they hold changes nothing (and says
    // nothing in the audit trail); a new role keeps when and by whom they were first added.
    // The store keeps the last owner, in the change's own step: of two owners demoting each other at
    // once, one is refused. A member seen here is changed by an update only: removed meanwhile, they
    // are added anew (when and by whom now, audited member.added), never put back as they were. The
    // audit's `from` is the role the store replaced, not the one read above: a change made meanwhile
    // is not told twice.
    let member: MembershipRecord | undefined = previous?.role === role ? previous : undefined;
    if (previous && !member) {
      const changed = await this.store.setMemberRole(accountId, email, role, { keepOwner: true }).catch(lastOwner);
      member = changed?.member;
      if (changed) await this.roleChanged(accountId, email, changed.from, role, by, client);
    }
    if (!member) {
      member = await this.store.putMember({ accountId, email, role, addedAt: this.now().toISOString(), addedBy: actorName(by) }, { keepOwner: true }).catch(lastOwner);
      await this.auditor.record({ accountId, actor: actorName(by), action: 'member.added', target: email, client, details: { role } });
    }
    if (input.password !== undefined) await this.auditor.record({ accountId, actor: actorName(by), action: 'password.set', target: email, client });
    return { member, person, created: !existing };
  }

  /**
   * Changes a member's role in the account (`member.role_changed`, as addMember audits it). The
   * member must be one already: this never adds anyone. An account keeps at least one owner.
   */
  async setMemberRole(accountId: string, emailInput: unknown, roleInput: unknown, by: Actor, client: string | undefined): Promise<MembershipRecord> {
    await this.account(accountId);
    const email = normalizeEmail(emailInput) ?? String(emailInput);
    if (roleInput !== 'owner' && roleInput !== 'member') throw errors.invalidBody('role', "'role' must be 'owner' or 'member'.");
    const role: Role = roleInput;
    const previous = (await this.store.listMembers(accountId)).find((m) => m.email === email);
    if (!previous) throw errors.memberNotFound(email);
    if (previous.role === role) return previous;
    // Update-only, in the store's one step: removed meanwhile (by another owner, on any replica), the
    // member stays gone. Audited from the role the store replaced: of two owners making the same
    // change at once, the trail tells it once.
    const changed = await this.store.setMemberRole(accountId, email, role, { keepOwner: true }).catch(lastOwner);
    if (!changed) throw errors.memberNotFound(email);
    await this.roleChanged(accountId, email, changed.from, role, by, client);
    return changed.member;
  }

  /** `member.role_changed`, when the role did change (`from` as the store replaced it). */
  private async roleChanged(accountId: string, email: string, from: Role, role: Role, by: Actor, client: string | undefined, reason?: 'removing'): Promise<void> {
    if (from === role) return;
    await this.auditor.record({ accountId, actor: actorName(by), action: 'member.role_changed', target: email, client, details: reason ? { from, role, reason } : { from, role } });
  }

  /** Makes a person a platform admin, or no longer one; a change is audited (platform-wide: no account). */
  async setAdmin(emailInput: unknown, admin: boolean, by: Actor, client: string | undefined): Promise<PersonRecord> {
    const email = normalizeEmail(emailInput);
    const person = email ? await this.store.getPerson(email) : undefined;
    if (!person) throw errors.memberNotFound(String(emailInput));
    if (person.admin === admin) return person;
    const updated = await this.store.putPerson({ ...person, admin });
    await this.auditor.record({ accountId: null, actor: actorName(by), action: admin ? 'admin.granted' : 'admin.revoked', target: updated.email, client });
    return updated;
  }

  /**
   * Removes a member. The keys they made in the account leave with them (revoked, each audited with
   * the reason), unless `transferKeysTo` names an owner of the account who takes them over (audited
   * `key.transferred`). Who may be named is the caller's rule: the console lets an owner name only
   * themself. An owner is made a member first (never the last owner: 409 last_owner, nothing done),
   * audited then as `member.role_changed` with the reason `removing`.
   * The keys are handled before the membership goes (a failure half way leaves the member, and a
   * retry finishes the job), and again after it, for a key the member made meanwhile.
   */
  async removeMember(accountId: string, emailInput: unknown, by: Actor, client: string | undefined, transferKeysTo?: unknown): Promise<{ revoked: number; transferred: number }> {
    await this.account(accountId);
    const email = normalizeEmail(emailInput) ?? String(emailInput);
    const members = await this.store.listMembers(accountId);
    const member = members.find((m) => m.email === email);
    if (!member) throw errors.memberNotFound(email);
    let heir: string | undefined;
    if (transferKeysTo !== undefined) {
      heir = normalizeEmail(transferKeysTo);
      if (!heir || heir === email || !members.some((m) => m.email === heir && m.role === 'owner')) {
        throw errors.invalidBody('transferKeysTo', "'transferKeysTo' must name another owner of this account, who takes over the member's keys.");
      }
    }
    // An owner is first made a member, in a step of the store's that keeps the account an owner: of
    // two owners removing (or demoting) each other at once, one is refused before any key is touched.
    // Update-only: removed meanwhile by someone else, the member is not brought back (404). Audited at
    // once: should a later step fail, the member stays, demoted, and the trail says so and why; a
    // member another owner demoted meanwhile is not told demoted again.
    if (member.role === 'owner') {
      const demoted = await this.store.setMemberRole(accountId, email, 'member', { keepOwner: true }).catch(lastOwner);
      if (!demoted) throw errors.memberNotFound(email);
      await this.roleChanged(accountId, email, demoted.from, 'member', by, client, 'removing');
    }
    const first = await this.keysLeave(accountId, email, heir, by, client);
    // Removed meanwhile by another owner (their removal tells it): 404, not a second member.removed.
    if (!(await this.store.removeMember(accountId, email, { keepOwner: true }).catch(lastOwner))) throw errors.memberNotFound(email);
    await this.auditor.record({ accountId, actor: actorName(by), action: 'member.removed', target: email, client, details: heir ? { keysTransferredTo: heir } : {} });
    const late = await this.keysLeave(accountId, email, heir, by, client);
    // The heir was an owner when this began. Removed meanwhile, their removal's last look at their
    // keys may have come before ours landed: what we gave them is revoked, as their removal would
    // have (read after our last transfer, so either this read sees them gone or their removal sees the keys).
    const orphaned = heir && !(await this.store.listMembers(accountId)).some((m) => m.email === heir) ? await this.keysLeave(accountId, heir, undefined, by, client) : { revoked: 0 };
    return { revoked: first.revoked + late.revoked + orphaned.revoked, transferred: first.transferred + late.transferred };
  }

  /** The live keys `email` made in the account: revoked, or handed to `heir`. */
  private async keysLeave(accountId: string, email: string, heir: string | undefined, by: Actor, client: string | undefined): Promise<{ revoked: number; transferred: number }> {
    const theirs = (await this.store.list(accountId)).filter((key) => key.createdBy === email && key.revokedAt === null);
    let done = 0;
    for (const key of theirs) {
      if (heir) {
        if (!(await this.store.update(key.id, { createdBy: heir }))) continue;
        await this.auditor.record({ accountId, actor: actorName(by), action: 'key.transferred', target: key.id, client, details: { from: email, to: heir } });
      } else {
        if (!(await this.store.revoke(key.id, this.now()))) continue;
        await this.auditor.record({ accountId, actor: actorName(by), action: 'key.revoked', target: key.id, client, details: { reason: 'member_removed', member: email } });
      }
      done++;
    }
    return heir ? { revoked: 0, transferred: done } : { revoked: done, transferred: 0 };
  }

  /**
   * Whether a person bound to an identity provider may still sign in with a password (a platform
   * admin's choice); a change is audited.
   */
  async setPasswordWithOidc(emailInput: unknown, allowed: boolean, by: Actor, client: string | undefined): Promise<PersonRecord> {
    const email = normalizeEmail(emailInput);
    const person = email ? await this.store.getPerson(email) : undefined;
    if (!person) throw errors.memberNotFound(String(emailInput));
    if ((person.passwordWithOidc ?? false) === allowed) return person;
    const updated = await this.store.putPerson({ ...person, passwordWithOidc: allowed });
    await this.auditor.record({ accountId: null, actor: actorName(by), action: 'password_with_oidc.changed', target: updated.email, client, details: { from: person.passwordWithOidc ?? false, to: allowed } });
    return updated;
  }

  /**
   * Sends the person a one-time link by `send` (email: to their own mailbox), so that it never passes
   * through whoever asked. True when it was sent; a failure is audited and the link left to expire.
   */
  async sendPasswordLink(email: string, accountId: string | null, by: Actor, client: string | undefined, send: (token: string) => Promise<void>): Promise<boolean> {
    const token = await this.passwordLink(email, accountId, by, client, { delivery: 'email' });
    try {
      await send(token);
    } catch (err) {
      await this.auditor.record({ accountId, actor: actorName(by), action: 'invite.failed', target: email, client, details: { reason: (err as Error).message.slice(0, 200) } });
      return false;
    }
    await this.auditor.record({ accountId, actor: actorName(by), action: 'invite.sent', target: email, client });
    return true;
  }

  /**
   * A one-time link's token for the person to set their password (good for a week, once). Making it
   * voids every older link of theirs (the store does, in the same step): only the newest works.
   */
  async passwordLink(emailInput: unknown, accountId: string | null, by: Actor, client: string | undefined, details: Record<string, unknown> = {}): Promise<string> {
    const email = normalizeEmail(emailInput);
    if (!email || !(await this.store.getPerson(email))) throw errors.memberNotFound(String(emailInput));
    const token = randomBytes(32).toString('base64url');
    await this.store.createToken({ digest: tokenDigest(token), kind: 'password', email, data: {}, expiresAt: new Date(this.now().getTime() + PASSWORD_LINK_TTL_MS).toISOString() });
    await this.auditor.record({ accountId, actor: actorName(by), action: 'password.link_created', target: email, client, details });
    return token;
  }

  /**
   * Whether setting a password with this link would be let through, as the console's page opens
   * with it: invalid_link as setPasswordWithLink would answer, else nothing. It only looks (the link
   * stays, and so do its siblings), and says nothing of whose link it is.
   */
  async checkPasswordLink(token: unknown): Promise<void> {
    const found = typeof token === 'string' && token.length < 200 ? await this.store.findToken(tokenDigest(token), 'password', this.now()) : undefined;
    if (!found?.email || !(await this.store.getPerson(found.email))) throw errors.invalidLink();
  }

  /**
   * Sets the password of the person a one-time link was made for: the link is spent, every other link
   * of theirs is void, and every session of theirs ends.
   */
  async setPasswordWithLink(token: unknown, password: unknown, client: string | undefined): Promise<string> {
    const problem = passwordProblem(password);
    if (problem) throw errors.invalidBody('password', `'password' ${problem}.`);
    const spent = typeof token === 'string' && token.length < 200 ? await this.store.takeToken(tokenDigest(token), 'password', this.now()) : undefined;
    if (!spent?.email) throw errors.invalidLink();
    const person = await this.store.getPerson(spent.email);
    if (!person) throw errors.invalidLink();
    // setPassword voids the person's other links in the same step; whoever held a session (someone
    // who knew the old password, say) is signed out: the link's holder signs in afresh.
    if (!(await this.store.setPassword(person.email, await hashPassword(password as string)))) throw errors.invalidLink();
    const sessionsEnded = await this.store.deleteSessionsOf(person.email);
    for (const membership of await this.store.membershipsOf(person.email)) {
      await this.auditor.record({ accountId: membership.accountId, actor: person.email, action: 'password.set', target: person.email, client, details: { sessionsEnded } });
    }
    return person.email;
  }

  async createKey(accountId: string, fields: KeyFields, by: Actor, client: string | undefined): Promise<{ key: string; record: KeyRecord }> {
    const account = await this.account(accountId);
    const now = this.now(); // the key's creation, which its policy's bound counts from
    const expiresAt = expiryUnderPolicy(account.keyPolicy, fields.expiresAt, now, true);
    const issued = await issueKey(this.store, {
      name: fields.name!,
      models: fields.models ?? [],
      endpoints: fields.endpoints ?? [],
      allowedIps: fields.allowedIps ?? [],
      expiresAt: expiresAt ? new Date(expiresAt) : null,
      rateLimit: fields.rateLimit,
      quota: fields.quota,
      budget: fields.budget,
      accountId,
      createdBy: actorName(by),
    }, now);
    await this.auditor.record({ accountId, actor: actorName(by), action: 'key.created', target: issued.record.id, client, details: { name: issued.record.name } });
    return issued;
  }

  /** A key of this account (of any, for the admin token: accountId undefined), or 404. */
  async key(id: string, accountId: string | undefined): Promise<KeyRecord> {
    const record = await this.store.get(id);
    if (!record || (accountId !== undefined && record.accountId !== accountId)) throw errors.keyNotFound(id);
    return record;
  }

  async editKey(record: KeyRecord, fields: KeyFields, by: Actor, client: string | undefined): Promise<KeyRecord> {
    if (fields.expiresAt !== undefined) expiryUnderPolicy((await this.account(record.accountId)).keyPolicy, fields.expiresAt, new Date(record.createdAt), false, record.expiresAt, this.now());
    const updated = await this.store.update(record.id, fields);
    if (!updated) throw errors.keyNotFound(record.id);
    const changed = Object.keys(fields).filter((field) => fields[field as keyof KeyFields] !== undefined);
    await this.auditor.record({ accountId: record.accountId, actor: actorName(by), action: 'key.edited', target: record.id, client, details: { fields: changed } });
    if (fields.quota) await this.auditor.record({ accountId: record.accountId, actor: actorName(by), action: 'quota.changed', target: record.id, client, details: { from: record.quota, to: updated.quota } });
    if (fields.budget) await this.auditor.record({ accountId: record.accountId, actor: actorName(by), action: 'budget.changed', target: record.id, client, details: { from: record.budget, to: updated.budget } });
    return updated;
  }

  /** `graceSeconds`: how long the replaced secret keeps working (0: it stops at once). */
  async rotateKey(record: KeyRecord, by: Actor, client: string | undefined, graceSeconds = 0): Promise<{ key: string; record: KeyRecord }> {
    const rotated = await rotateKey(this.store, record.id, graceSeconds);
    if (!rotated) throw errors.keyNotFound(record.id);
    await this.auditor.record({ accountId: record.accountId, actor: actorName(by), action: 'key.rotated', target: record.id, client, ...(graceSeconds > 0 ? { details: { graceSeconds } } : {}) });
    return rotated;
  }

  async revokeKey(record: KeyRecord, by: Actor, client: string | undefined): Promise<KeyRecord> {
    const revoked = await this.store.revoke(record.id, this.now());
    if (!revoked) throw errors.keyNotFound(record.id);
    await this.auditor.record({ accountId: record.accountId, actor: actorName(by), action: 'key.revoked', target: record.id, client });
    return revoked;
  }

}

/** The store's LastOwner as the API's 409 `last_owner`; any other failure as it is. */
function lastOwner(err: unknown): never {
  throw err instanceof LastOwner ? errors.lastOwner() : err;
}

/** Where a person sets their password with a one-time link, on the console (the token rides in the fragment: it reaches no log). */
export const passwordPath = (token: string) => `/console/#set-password=${token}`;

/** One-time tokens are kept by digest, as keys are: the store never holds one that works. */
export function tokenDigest(token: string): string {
  return sha256Hex(token);
}
