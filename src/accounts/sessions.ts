/**
 * Console sessions. A session is a random token in the cookie `__Host-chatgate_session` (HttpOnly,
 * Secure, SameSite=Strict, Path=/, no Domain: the prefix makes a browser refuse one that a sibling
 * host sets); the store keeps only its SHA-256, so every replica knows it and signing out ends it on
 * every replica at once (sessions are read from the store on each console request: the console is not
 * the hot path, and a membership removed is gone from the next request). A session ends after `idleMs`
 * without use and, whatever the use, `absoluteMs` after it began. A request carrying two session
 * cookies (one planted for a parent domain by a sibling host, say) is signed in as nobody.
 *
 * Password sign-in: a wrong email and a wrong password are refused alike, in the same time (a decoy
 * hash is checked for an email without one), and so is a person bound to the identity provider unless
 * an admin let them keep a password (`passwordWithOidc`). The throttle's rule lives here, above the
 * stores, in fixed windows of `windowMs`, counted by the store's atomic counters (so across replicas):
 * - every attempt is counted before its password is checked, in one store operation (an email's
 *   count from this client address and its count from everywhere), so concurrent guesses each see
 *   their own count and buy nothing;
 * - past `maxFailures` for (email, client address): 429 from that address until the window ends;
 *   a right password clears that address's count;
 * - past `emailMaxFailures` for the email from everywhere: slowed, never locked. One attempt (the
 *   first to reach it) is checked per slot of windowMs / emailMaxFailures; a second store operation
 *   takes the slot, made only by attempts their address let through, so an attacker throttled at
 *   their own address cannot take the owner's slots.
 * Before any of it a password check reserves a place in the bounded hashing queue (passwords.ts), so
 * a flood is refused (429 sign_in_busy) before it costs a store write. One audit row per burst: the
 * first failure of an address's window (`session.failed`), the first refusal there
 * (`session.throttled`), and the email's first slowed attempt (`session.slowed`); for an email of
 * nobody, a warn line instead (the store keeps nothing for made-up emails).
 */
import { randomBytes } from 'node:crypto';
import { sha256Hex } from '../common/sha256';
import { errors } from '../errors';
import type { AccountRecord, MembershipRecord, PersonRecord, Role, SessionRecord, Store } from '../store/types';
import type { Logger } from '../telemetry/log';
import type { Auditor } from './audit';
import { normalizeEmail } from './emails';
import { decoyHash, hashPassword, MAX_PASSWORD_LENGTH, passwordProblem, reserveHashing, verifyPassword, type HashingTurn } from './passwords';

export const SESSION_COOKIE = '__Host-chatgate_session';
/** A session's last use is written at most this often (each console request reads it). */
const TOUCH_EVERY_MS = 60_000;

export interface SessionSettings {
  idleMs: number;
  absoluteMs: number;
  signIn: { maxFailures: number; emailMaxFailures: number; windowMs: number };
}

/** Who is signed in, and where they work now. */
export interface SignedIn {
  session: SessionRecord;
  person: PersonRecord;
  memberships: MembershipRecord[];
  /** The account they work in now (any account, for an admin). */
  account: AccountRecord | undefined;
  /** Their role there; undefined for an admin who is not a member. */
  role: Role | undefined;
}

/** The store's counters for one email's attempts; names are `signin:<kind>:<window or slot>:<email>[ <client>]`. */
export const signInCounters = {
  /** An email from one client address (an email has no white space, so the space divides them). */
  pair: (window: number, email: string, client: string | undefined) => `signin:pair:${window}:${email} ${client ?? '-'}`,
  email: (window: number, email: string) => `signin:email:${window}:${email}`,
  slot: (slot: number, email: string) => `signin:slot:${slot}:${email}`,
};

/** An attempt the throttle let through: the counter a right password clears, and its count. */
interface Admitted {
  pair: string;
  pairCount: number;
}

export class Sessions {
  constructor(
    private readonly store: Store,
    private readonly auditor: Auditor,
    readonly settings: SessionSettings,
    private readonly log: Logger,
    private readonly now: () => Date = () => new Date(),
  ) {}

  /** A new session for an email and password, or 401 / 429. */
  async signInWithPassword(emailInput: unknown, password: unknown, client: string | undefined): Promise<{ token: string; signedIn: SignedIn }> {
    const email = normalizeEmail(emailInput);
    if (!email || typeof password !== 'string' || password.length === 0 || password.length > MAX_PASSWORD_LENGTH) throw errors.invalidCredentials();
    const turn = reserveHashing();
    if (!turn) throw errors.signInBusy();
    try {
      const admitted = await this.admit(email, client);
      const person = await this.passwordHolder(email, password, turn);
      if (!person) {
        if (admitted.pairCount === 1) await this.noteBurst(email, 'session.failed', client, { via: 'password' });
        throw errors.invalidCredentials();
      }
      await this.store.clearCounters([admitted.pair]);
      return await this.start(person, 'password', client);
    } finally {
      turn.release();
    }
  }

  /**
   * The signed-in person changes their own password, proving the current one (counted by the same
   * throttle as a sign-in): their other sessions end; this one goes on.
   */
  async changePassword(signedIn: SignedIn, currentPassword: unknown, password: unknown, client: string | undefined): Promise<void> {
    const problem = passwordProblem(password);
    if (problem) throw errors.invalidBody('password', `'password' ${problem}.`);
    if (typeof currentPassword !== 'string' || currentPassword.length === 0 || currentPassword.length > MAX_PASSWORD_LENGTH) {
      throw errors.invalidBody('currentPassword', "'currentPassword' must be your current password.");
    }
    const email = signedIn.person.email;
    const person = await this.store.getPerson(email);
    if (person && !person.passwordWithOidc && (await this.store.identitiesOf(email)).length > 0) {
      throw errors.permissionDenied('set a password: you sign in with your identity provider (an admin can allow a password too)');
    }
    const turn = reserveHashing();
    if (!turn) throw errors.signInBusy();
    try {
      const admitted = await this.admit(email, client);
      if (!(await this.passwordHolder(email, currentPassword, turn))) {
        if (admitted.pairCount === 1) await this.noteBurst(email, 'session.failed', client, { via: 'password change' });
        throw errors.invalidBody('currentPassword', "'currentPassword' is not your current password: nothing was changed.");
      }
      await this.store.clearCounters([admitted.pair]);
    } finally {
      turn.release();
    }
    await this.store.setPassword(email, await hashPassword(password as string));
    const ended = await this.store.deleteSessionsOf(email, signedIn.session.digest);
    for (const accountId of this.accountsOf(signedIn.memberships)) {
      await this.auditor.record({ accountId, actor: email, action: 'password.changed', target: email, client, details: { otherSessionsEnded: ended } });
    }
  }

  /**
   * Counts the attempt (one store operation) and lets it through, or refuses it: 429 from this
   * address past maxFailures; slowed to one per slot past the email's emailMaxFailures.
   */
  private async admit(email: string, client: string | undefined): Promise<Admitted> {
    const { maxFailures, emailMaxFailures, windowMs } = this.settings.signIn;
    const now = this.now();
    const at = now.getTime();
    const window = Math.floor(at / windowMs);
    const windowEnds = new Date((window + 1) * windowMs);
    const pair = signInCounters.pair(window, email, client);
    const [pairCount = Infinity, emailCount = Infinity] = await this.store.bumpCounters(
      [
        { name: pair, expiresAt: windowEnds },
        { name: signInCounters.email(window, email), expiresAt: windowEnds },
      ],
      now,
    );
    if (emailCount === emailMaxFailures + 1) await this.noteBurst(email, 'session.slowed', client, { attempts: emailCount, limit: emailMaxFailures });
    if (pairCount > maxFailures) {
      if (pairCount === maxFailures + 1) await this.noteBurst(email, 'session.throttled', client, { attempts: pairCount, limit: maxFailures });
      throw errors.tooManyFailedAttempts(windowEnds.getTime() - at);
    }
    if (emailCount > emailMaxFailures) {
      const slotMs = windowMs / emailMaxFailures;
      const slot = Math.floor(at / slotMs);
      const slotEnds = Math.ceil((slot + 1) * slotMs);
      const [taken = Infinity] = await this.store.bumpCounters([{ name: signInCounters.slot(slot, email), expiresAt: new Date(slotEnds) }], now);
      if (taken > 1) throw errors.signInSlowed(slotEnds - at);
    }
    return { pair, pairCount };
  }

  /**
   * The person, when the password is theirs and they may sign in with one; otherwise undefined, after
   * the same work (a decoy hash for an email of nobody or without a password).
   */
  private async passwordHolder(email: string, password: string, turn: HashingTurn): Promise<PersonRecord | undefined> {
    const [person, identities] = await Promise.all([this.store.getPerson(email), this.store.identitiesOf(email)]);
    const matches = await verifyPassword(password, person?.passwordHash ?? (await decoyHash()), turn);
    if (!person?.passwordHash || !matches) return undefined;
    // Bound to the identity provider: the provider decides, unless an admin allowed a password too.
    if (identities.length > 0 && person.passwordWithOidc !== true) return undefined;
    return person;
  }

  /** One audit row (per account of the person) for a burst; for an email of nobody, a warn line only. */
  private async noteBurst(email: string, action: string, client: string | undefined, details: Record<string, unknown>): Promise<void> {
    const person = await this.store.getPerson(email);
    if (!person) {
      this.log.warn({ log: 'sign-in', action, email, client, ...details }, 'password sign-in for an email nobody has');
      return;
    }
    for (const accountId of this.accountsOf(await this.store.membershipsOf(email))) {
      await this.auditor.record({ accountId, actor: email, action, target: email, client, details });
    }
  }

  /** The accounts an event about a person is recorded in: each of theirs, or none (the platform's). */
  private accountsOf(memberships: MembershipRecord[]): Array<string | null> {
    return memberships.length > 0 ? memberships.map((m) => m.accountId) : [null];
  }

  /** A session for a person whose identity was proven (a password, or the identity provider). */
  async start(person: PersonRecord, via: SessionRecord['via'], client: string | undefined): Promise<{ token: string; signedIn: SignedIn }> {
    const token = randomBytes(32).toString('base64url');
    const now = this.now();
    const memberships = await this.store.membershipsOf(person.email);
    const first = memberships[0]?.accountId ?? (person.admin ? (await this.store.listAccounts())[0]?.id : undefined) ?? null;
    const session: SessionRecord = {
      digest: sessionDigest(token),
      email: person.email,
      accountId: first,
      via,
      createdAt: now.toISOString(),
      lastSeenAt: now.toISOString(),
      expiresAt: new Date(now.getTime() + this.settings.absoluteMs).toISOString(),
    };
    await this.store.createSession(session);
    await this.auditor.record({ accountId: first, actor: person.email, action: 'session.created', target: person.email, client, details: { via } });
    return { token, signedIn: await this.describe(session, person, memberships) };
  }

  /** The session a cookie's token names, if it is live; an expired one is deleted. */
  async resolve(token: string | undefined): Promise<SignedIn | undefined> {
    if (!token || token.length > 100) return undefined;
    const session = await this.store.findSession(sessionDigest(token));
    if (!session) return undefined;
    const now = this.now();
    if (now.toISOString() >= session.expiresAt || now.getTime() - Date.parse(session.lastSeenAt) >= this.settings.idleMs) {
      await this.store.deleteSession(session.digest);
      return undefined;
    }
    const person = await this.store.getPerson(session.email);
    if (!person) return undefined;
    if (now.getTime() - Date.parse(session.lastSeenAt) >= TOUCH_EVERY_MS) {
      session.lastSeenAt = now.toISOString();
      await this.store.updateSession(session.digest, { lastSeenAt: session.lastSeenAt });
    }
    return this.describe(session, person, await this.store.membershipsOf(person.email));
  }

  /** Ends the session everywhere at once (it is gone from the store every replica reads). */
  async end(signedIn: SignedIn, client: string | undefined): Promise<void> {
    await this.store.deleteSession(signedIn.session.digest);
    await this.auditor.record({ accountId: signedIn.account?.id ?? null, actor: signedIn.person.email, action: 'session.ended', target: signedIn.person.email, client });
  }

  /** Signs the person out everywhere: every session of theirs ends, this one included. */
  async endEverywhere(signedIn: SignedIn, client: string | undefined): Promise<number> {
    const ended = await this.store.deleteSessionsOf(signedIn.person.email);
    await this.auditor.record({
      accountId: signedIn.account?.id ?? null,
      actor: signedIn.person.email,
      action: 'session.ended_everywhere',
      target: signedIn.person.email,
      client,
      details: { sessions: ended },
    });
    return ended;
  }

  /** Works in another account: one the person is a member of (any, for an admin). */
  async switchAccount(signedIn: SignedIn, accountId: string): Promise<SignedIn> {
    const member = signedIn.memberships.some((m) => m.accountId === accountId);
    if (!member && !signedIn.person.admin) throw errors.accountNotFound(accountId);
    if (!(await this.store.getAccount(accountId))) throw errors.accountNotFound(accountId);
    await this.store.updateSession(signedIn.session.digest, { accountId });
    return this.describe({ ...signedIn.session, accountId }, signedIn.person, signedIn.memberships);
  }

  private async describe(session: SessionRecord, person: PersonRecord, memberships: MembershipRecord[]): Promise<SignedIn> {
    // A session may point at an account the person has left since: then it works in none.
    const stillMember = memberships.some((m) => m.accountId === session.accountId);
    const accountId = stillMember || person.admin ? session.accountId : (memberships[0]?.accountId ?? null);
    const account = accountId ? await this.store.getAccount(accountId) : undefined;
    return { session, person, memberships, account, role: memberships.find((m) => m.accountId === account?.id)?.role };
  }
}

export function sessionDigest(token: string): string {
  return sha256Hex(token);
}

/** The Set-Cookie value for a session (or, with an empty token, the one that clears it). */
export function sessionCookie(token: string, maxAgeSeconds: number): string {
  return `${SESSION_COOKIE}=${token}; Path=/; Max-Age=${Math.max(0, Math.floor(maxAgeSeconds))}; HttpOnly; Secure; SameSite=Strict`;
}

/**
 * The session token a request's Cookie header carries, if it carries exactly one: with two (one
 * planted by a sibling host for the parent domain, say), neither is trusted.
 */
export function sessionTokenOf(cookieHeader: string | undefined): string | undefined {
  if (!cookieHeader) return undefined;
  const tokens: string[] = [];
  for (const part of cookieHeader.split(';')) {
    const [name = '', ...value] = part.split('=');
    if (name.trim() === SESSION_COOKIE) tokens.push(value.join('=').trim());
  }
  return tokens.length === 1 ? tokens[0] : undefined;
}
