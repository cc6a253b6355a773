/** Pure: the file store's changes that are more than a line, as new data from old. */
import { definedFields } from '../../src/common/defined-fields';
import { periodOf, sum, voidedBy, type Data } from '../../src/store/file-schema';
import { losesLastOwner } from './last-owner';
import { DuplicateRecord, LastOwner, type AuditEvent, type IdentityRecord, type KeyUse, type MembershipRecord, type OneTimeToken, type PersonRecord, type Role, type RoleChange, type SessionRecord } from '../../src/store/types';
import { addToDays } from './usage-ledger';

/** A batch of use added to each key's totals and latest use, and to its daily rows (those before `oldest` dropped). */
export function withUse(data: Data, uses: readonly KeyUse[], oldest: string): Data {
  const byKey = new Map<string, KeyUse[]>();
  for (const use of uses) byKey.set(use.keyId, [...(byKey.get(use.keyId) ?? []), use]);
  const keys = data.keys.map((k) => {
    const mine = byKey.get(k.id);
    if (!mine) return k;
    let latest = k.lastUsedAt ?? '';
    for (const use of mine) if (use.at.toISOString() > latest) latest = use.at.toISOString();
    return {
      ...k,
      lastUsedAt: latest || null,
      usage: {
        requests: k.usage.requests + sum(mine, 'requests'),
        promptTokens: k.usage.promptTokens + sum(mine, 'promptTokens'),
        completionTokens: k.usage.completionTokens + sum(mine, 'completionTokens'),
      },
    };
  });
  const usage = [...data.usage];
  addToDays(usage, uses);
  return { ...data, keys, usage: usage.filter((row) => row.date >= oldest) };
}

/** Each named counter plus one (made at 1 with its expiry; expired ones dropped): the new counts, in order. */
export function withCountersBumped(data: Data, counters: ReadonlyArray<{ name: string; expiresAt: Date }>, now: Date): { data: Data; result: number[] } {
  const at = now.toISOString();
  const live = new Map(data.counters.filter((c) => c.expiresAt > at).map((c) => [c.name, c]));
  const result = counters.map(({ name, expiresAt }) => {
    const counter = live.get(name) ?? { name, count: 0, expiresAt: expiresAt.toISOString() };
    const bumped = { ...counter, count: counter.count + 1 };
    live.set(name, bumped);
    return bumped.count;
  });
  return { data: { ...data, counters: [...live.values()] }, result };
}

/** Tokens added to quota counters; counters of periods before `oldest` (a day) are dropped: a scope ends with its period. */
export function withQuotaUsage(data: Data, amounts: ReadonlyMap<string, number>, oldest: string): Data {
  const quotaUsage = { ...data.quotaUsage };
  for (const [scope, tokens] of amounts) quotaUsage[scope] = (quotaUsage[scope] ?? 0) + tokens;
  for (const scope of Object.keys(quotaUsage)) if (periodOf(scope) < oldest.slice(0, periodOf(scope).length)) delete quotaUsage[scope];
  return { ...data, quotaUsage };
}

/** A person added, or one there changed (admin, a password given, passwordWithOidc): the person as kept. */
export function withPerson(data: Data, record: PersonRecord): { data: Data; result: PersonRecord } {
  const existing = data.people.find((p) => p.email === record.email);
  const person = existing ? { ...existing, admin: record.admin, passwordHash: record.passwordHash ?? existing.passwordHash, ...definedFields({ passwordWithOidc: record.passwordWithOidc }) } : record;
  return { data: { ...data, people: [...data.people.filter((p) => p.email !== record.email), person] }, result: person };
}

/** A person's password set (or cleared), their set-password links voided. */
export function withPassword(data: Data, email: string, passwordHash: string | null): { data: Data; result: PersonRecord | undefined } {
  const existing = data.people.find((p) => p.email === email);
  if (!existing) return { data, result: undefined };
  const person = { ...existing, passwordHash };
  const tokens = data.tokens.filter((t) => !(t.kind === 'password' && t.email === email));
  return { data: { ...data, people: data.people.map((p) => (p.email === email ? person : p)), tokens }, result: person };
}

/** A member added, or one there given the record's role (with keepOwner, never the only owner made a member: LastOwner). */
export function withMember(data: Data, record: MembershipRecord, options: { keepOwner?: boolean } = {}): { data: Data; result: MembershipRecord } {
  if (options.keepOwner && record.role !== 'owner' && losesLastOwner(data.members, record.accountId, record.email)) throw new LastOwner(record.accountId, record.email);
  const same = (m: MembershipRecord) => m.accountId === record.accountId && m.email === record.email;
  const existing = data.members.find(same);
  const member = existing ? { ...existing, role: record.role } : record;
  return { data: { ...data, members: [...data.members.filter((m) => !same(m)), member] }, result: member };
}

/** The role of a member there is changed (with keepOwner, never the only owner made a member: LastOwner); no such member: undefined, and nobody added. */
export function withMemberRole(data: Data, accountId: string, email: string, role: Role, options: { keepOwner?: boolean } = {}): { data: Data; result: RoleChange | undefined } {
  if (options.keepOwner && role !== 'owner' && losesLastOwner(data.members, accountId, email)) throw new LastOwner(accountId, email);
  const existing = data.members.find((m) => m.accountId === accountId && m.email === email);
  if (!existing) return { data, result: undefined };
  const member = { ...existing, role };
  return { data: { ...data, members: data.members.map((m) => (m === existing ? member : m)) }, result: { member, from: existing.role } };
}

/** A one-time token kept; expired ones, and those it voids (an older set-password link), go; one whose digest is kept already is refused. */
export function withToken(data: Data, token: OneTimeToken, now: Date): { data: Data; result: undefined } {
  const kept = data.tokens.filter((t) => t.expiresAt >= now.toISOString() && !voidedBy(token, t));
  if (kept.some((t) => t.digest === token.digest)) throw new DuplicateRecord('token', 'digest');
  return { data: { ...data, tokens: [...kept, token] }, result: undefined };
}

/** A one-time token taken (used once), with those it voids; it is the result while it has not expired. */
export function withTokenTaken(data: Data, digest: string, kind: OneTimeToken['kind'], now: Date): { data: Data; result: OneTimeToken | undefined } {
  const token = data.tokens.find((t) => t.digest === digest && t.kind === kind);
  const tokens = data.tokens.filter((t) => t !== token && !(token && voidedBy(token, t)));
  return { data: { ...data, tokens }, result: token && token.expiresAt > now.toISOString() ? token : undefined };
}

/** An OIDC identity bound, unless its subject, or another of the person's at that issuer, is bound already. */
export function withIdentity(data: Data, record: IdentityRecord): { data: Data; result: boolean } {
  const taken = data.identities.some((i) => i.issuer === record.issuer && (i.subject === record.subject || i.email === record.email));
  return taken ? { data, result: false } : { data: { ...data, identities: [...data.identities, record] }, result: true };
}

/** A member removed: whether there was one (with keepOwner, never the only owner: LastOwner). */
export function withoutMember(data: Data, accountId: string, email: string, options: { keepOwner?: boolean } = {}): { data: Data; result: boolean } {
  if (options.keepOwner && losesLastOwner(data.members, accountId, email)) throw new LastOwner(accountId, email);
  const members = data.members.filter((m) => !(m.accountId === accountId && m.email === email));
  return { data: { ...data, members }, result: members.length !== data.members.length };
}

/** A session kept; ended ones go as it comes (before its digest is checked: one that ended may be made again). */
export function withSession(data: Data, record: SessionRecord, now: Date): { data: Data; result: undefined } {
  const live = data.sessions.filter((s) => s.expiresAt >= now.toISOString());
  if (live.some((s) => s.digest === record.digest)) throw new DuplicateRecord('session', 'digest');
  return { data: { ...data, sessions: [...live, record] }, result: undefined };
}

/** An audit event appended, unless one with its id is kept already. */
export function withAudit(data: Data, event: AuditEvent): { data: Data; result: undefined } {
  if (data.audit.some((e) => e.id === event.id)) throw new DuplicateRecord('audit', 'id');
  return { data: { ...data, audit: [...data.audit, event] }, result: undefined };
}
