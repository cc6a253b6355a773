/**
 * Who an OIDC sign-in (oidc.ts) signs in, once the provider's answer has passed its checks: the
 * person bound to the issuer and subject; else the person with the email, linked when the linking
 * rule allows it; else a person made for a mapping. The mappings then give them their accounts,
 * roles and the admin role. oidc.ts's header sets out the rules; this module applies them to the
 * store, and refuses (logged and audited by the callback's `refuse`) whatever they do not allow.
 */
import { errors, GatewayError } from '../errors';
import type { Logger } from '../telemetry/log';
import type { IdentityRecord, PersonRecord, Role, Store } from '../store/types';
import type { Auditor } from './audit';
import { isNfkcStable, normalizeEmail } from './emails';
import type { Actor } from './roles';
import type { Accounts } from './service';
import { describeClaim, linkRefusal, type OidcSettings, type Said } from './oidc-provider';

/** The refusals (of the callback, oidc.ts, and of who signs in, here). */
export const refusals = {
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

/** Logs and audits a refused sign-in, then refuses it (the callback's, oidc.ts). */
export type Refuse = (reason: string, error: GatewayError, email?: string) => Promise<never>;

export class OidcIdentities {
  constructor(
    private readonly settings: OidcSettings,
    private readonly store: Store,
    private readonly accounts: Accounts,
    private readonly auditor: Auditor,
    private readonly log: Logger,
  ) {}

  /**
   * Who signs in: the person bound to the issuer and subject; else, bound now, the person with the
   * email when it may be linked, or a person made for it when a mapping lets them in. The mappings
   * are applied to them. Anything else is refused.
   */
  async personFor(said: Said, client: string | undefined, refuse: Refuse): Promise<PersonRecord> {
    const { settings, store } = this;
    const matched = settings.mappings.filter((mapping) => said.values.includes(mapping.value));
    const bound = await store.findIdentity(said.issuer, said.subject);
    if (bound) return this.provision(bound.email, matched, client, refuse);

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
    await this.bind(said, email, !existing, client, refuse);
    return this.provision(email, matched, client, refuse);
  }

  /**
   * Binds the issuer and subject to the person. When another sign-in bound first: the same binding
   * is taken as it is; another (this person has another subject of this issuer) is refused. A person
   * bound now loses the password set before (an inviter may know it) unless an admin allows it, and
   * every session of theirs open until now.
   */
  private async bind(said: Said, email: string, created: boolean, client: string | undefined, refuse: Refuse): Promise<void> {
    const { store } = this;
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
    await this.auditor.record({
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
  private async provision(email: string, matched: OidcSettings['mappings'], client: string | undefined, refuse: Refuse): Promise<PersonRecord> {
    const { store } = this;
    let person = await store.getPerson(email);
    if (!person) return refuse('the person this identity is bound to is gone', refusals.notSignedIn(), email);
    const admin = matched.some((mapping) => mapping.admin);
    if (admin && !person.admin) {
      person = await store.putPerson({ ...person, admin: true });
      const granting = matched.filter((mapping) => mapping.admin).map((mapping) => mapping.value);
      await this.auditor.record({ accountId: null, actor: 'oidc', action: 'admin.granted', target: email, client, details: { claim: this.settings.claim, values: granting } });
    }
    // Several mappings may name one account: the higher role wins.
    const roles = new Map<string, Role>();
    for (const mapping of matched) {
      if (mapping.account !== undefined && roles.get(mapping.account) !== 'owner') roles.set(mapping.account, mapping.role);
    }
    const actor: Actor = { kind: 'person', email, admin: person.admin };
    const memberships = await store.membershipsOf(email);
    for (const [name, role] of roles) {
      const account = await this.accountNamed(name, actor, client);
      if (memberships.find((m) => m.accountId === account.id)?.role === role) continue;
      try {
        await this.accounts.addMember(account.id, { email, role }, actor, client);
      } catch (err) {
        if (!(err instanceof GatewayError && err.code === 'last_owner')) throw err;
        this.log.warn({ email, account: name }, 'OIDC sign-in: the mapping would leave the account without an owner; the role is kept');
      }
    }
    return person;
  }

  /** The account with this name, made if missing (by another replica at the same time: then that one). */
  private async accountNamed(name: string, actor: Actor, client: string | undefined) {
    const existing = await this.store.findAccountByName(name);
    if (existing) return existing;
    try {
      return await this.accounts.createAccount(name, actor, client);
    } catch (err) {
      const raced = err instanceof GatewayError && err.code === 'account_name_taken' ? await this.store.findAccountByName(name) : undefined;
      if (raced) return raced;
      throw err;
    }
  }
}
