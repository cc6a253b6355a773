/**
 * Console sessions. A session is a random token in an HttpOnly, Secure, SameSite=Strict cookie; the
 * store keeps only its SHA-256, so every replica knows it and signing out ends it on every replica at
 * once (sessions are read from the store on each console request: the console is not the hot path).
 * A session ends after `idleMs` without use and, whatever the use, `absoluteMs` after it began.
 *
 * Password sign-in: a wrong email and a wrong password are refused alike, in the same time (a decoy
 * hash is checked for an email without one). Failures are counted per email in the store (so across
 * replicas); past `maxFailures` within `windowMs`, that email gets 429 until the window has passed:
 * a guesser is slowed, and the owner is locked out for one window at most.
 */
import { randomBytes } from 'node:crypto';
import { sha256Hex } from '../common/sha256';
import { errors } from '../errors';
import type { AccountRecord, MembershipRecord, PersonRecord, Role, SessionRecord, Store } from '../store/types';
import type { Auditor } from './audit';
import { normalizeEmail } from './emails';
import { decoyHash, verifyPassword } from './passwords';

export const SESSION_COOKIE = 'chatgate_session';
/** A session's last use is written at most this often (each console request reads it). */
const TOUCH_EVERY_MS = 60_000;

export interface SessionSettings {
  idleMs: number;
  absoluteMs: number;
  signIn: { maxFailures: number; windowMs: number };
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

export class Sessions {
  constructor(
    private readonly store: Store,
    private readonly auditor: Auditor,
    readonly settings: SessionSettings,
    private readonly now: () => Date = () => new Date(),
  ) {}

  /** A new session for an email and password, or 401 / 429. */
  async signInWithPassword(emailInput: unknown, password: unknown, client: string | undefined): Promise<{ token: string; signedIn: SignedIn }> {
    const email = normalizeEmail(emailInput);
    if (!email || typeof password !== 'string' || password.length === 0 || password.length > 1024) throw errors.invalidCredentials();
    const { maxFailures, windowMs } = this.settings.signIn;
    const now = this.now();
    const recent = await this.store.signInFailures(email, now, windowMs);
    if (recent.failures >= maxFailures) throw errors.tooManyFailedAttempts(recent.since.getTime() + windowMs - now.getTime());

    const person = await this.store.getPerson(email);
    const matches = await verifyPassword(password, person?.passwordHash ?? (await decoyHash()));
    if (!person?.passwordHash || !matches) {
      const { failures } = await this.store.noteSignInFailure(email, now, windowMs);
      const accounts = person ? (await this.store.membershipsOf(email)).map((m) => m.accountId) : [];
      for (const accountId of accounts.length > 0 ? accounts : [null]) {
        await this.auditor.record({ accountId, actor: email, action: 'session.failed', target: email, client, details: { failures } });
      }
      throw errors.invalidCredentials();
    }
    if (recent.failures > 0) await this.store.clearSignInFailures(email);
    return this.start(person, 'password', client);
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
  return `${SESSION_COOKIE}=${token}; Path=/console; Max-Age=${Math.max(0, Math.floor(maxAgeSeconds))}; HttpOnly; Secure; SameSite=Strict`;
}

/** The session token a request's Cookie header carries, if any. */
export function sessionTokenOf(cookieHeader: string | undefined): string | undefined {
  if (!cookieHeader) return undefined;
  for (const part of cookieHeader.split(';')) {
    const [name, ...value] = part.trim().split('=');
    if (name === SESSION_COOKIE) return value.join('=');
  }
  return undefined;
}
