/** A file store's keys.json holding every record kind, for the tests of `chatgate store import`, and what its import must read back as. */
import { issueKey } from '../../src/auth/issue';
import { FileKeyStore } from '../fakes/file-store';
import type { KeyRecord, Store } from '../../src/store/types';

const monthsBack = (months: number, day: number) => { const now = new Date(); return new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() - months, day)).toISOString().slice(0, 10); };
/** The 10th of the month before last, and that month's first and last days. */
const PAST_DAY = monthsBack(2, 10);
const PAST_MONTH = { from: monthsBack(2, 1), to: monthsBack(1, 0) };

/** A file store holding every record kind, made through the store interface as the gateway makes them. */
export async function fileStoreWithEverything(file: string) {
  const source = new FileKeyStore(file);
  const now = new Date();
  const later = new Date(now.getTime() + 3600_000).toISOString();
  await source.createAccount({ id: 'acc_team', name: 'team', createdAt: now.toISOString(), quota: { tokensPerDay: 1000, tokensPerMonth: null }, budget: { perDay: 12.5, perMonth: null } });
  const { key, record } = await issueKey(source, { name: 'imported', models: ['mock/*'], endpoints: ['chat'], rateLimit: { requestsPerMinute: 7 }, quota: { tokensPerDay: 50 }, budget: { perDay: 1.25, perMonth: 30 } });
  const { record: teamKey } = await issueKey(source, { name: 'team key', accountId: 'acc_team', expiresAt: new Date('2099-01-01T00:00:00Z') });
  await source.revoke(teamKey.id, now);
  await source.recordUse([{ keyId: record.id, accountId: record.accountId, date: '2030-01-02', at: now, requests: 4, refused: 2, costNanos: 123_456_789, promptTokens: 40, completionTokens: 12, model: '', endUser: '' }]);
  // A day of a month that is over: the import sums it into its month too (whole months are read from their sums).
  await source.recordUse([{ keyId: record.id, accountId: record.accountId, date: PAST_DAY, at: new Date(`${PAST_DAY}T12:00:00Z`), requests: 3, refused: 1, costNanos: 5, promptTokens: 30, completionTokens: 6, model: '', endUser: '' }]);
  await source.putPerson({ email: 'owner@example.com', admin: true, passwordHash: 'scrypt$hash', createdAt: now.toISOString(), passwordWithOidc: true });
  await source.putPerson({ email: 'member@example.com', admin: false, passwordHash: null, createdAt: now.toISOString() });
  await source.bindIdentity({ issuer: 'https://idp.example', subject: 'sub-1', email: 'owner@example.com', createdAt: now.toISOString() });
  await source.putMember({ accountId: 'acc_team', email: 'owner@example.com', role: 'owner', addedAt: now.toISOString(), addedBy: 'admin-token' });
  await source.putMember({ accountId: 'acc_team', email: 'member@example.com', role: 'member', addedAt: now.toISOString(), addedBy: 'owner@example.com' });
  await source.createSession({ digest: 'd'.repeat(64), email: 'owner@example.com', accountId: 'acc_team', via: 'oidc', createdAt: now.toISOString(), lastSeenAt: now.toISOString(), expiresAt: later });
  await source.createToken({ digest: 't'.repeat(64), kind: 'password', email: 'member@example.com', data: {}, expiresAt: later });
  await source.bumpCounters([{ name: 'sign-in:member@example.com', expiresAt: new Date(later) }], now);
  await source.bumpCounters([{ name: 'sign-in:member@example.com', expiresAt: new Date(later) }], now);
  for (const [i, action] of ['key.created', 'member.added', 'key.revoked'].entries()) {
    await source.appendAudit({ id: `aud_${i}`, accountId: 'acc_team', at: new Date(now.getTime() + i).toISOString(), actor: 'owner@example.com', action, target: teamKey.id, client: '127.0.0.1', details: { i } });
  }
  await source.addQuotaUsage(new Map([[`key:${record.id}:d:${now.toISOString().slice(0, 10)}`, 52]]));
  return { source, key, record, teamKey };
}


/** `chatgate store import`'s report: kind -> [imported, already there]. */
export const importCounts = (stdout: string) => Object.fromEntries([...stdout.matchAll(/^ {2}(\w+) +(\d+) imported, (\d+) already there/gm)].map((m): [string, [number, number]] => [m[1]!, [Number(m[2]), Number(m[3])]]));

/** What a store holds after the import reads, kind by kind, as the file store held it (once, not twice). */
export async function expectReadsBackAs(store: Store, source: FileKeyStore, { record, teamKey }: { record: KeyRecord; teamKey: KeyRecord }): Promise<void> {
  const byId = (a: { id: string }, b: { id: string }) => a.id.localeCompare(b.id);
  const byEmail = (a: { email: string }, b: { email: string }) => a.email.localeCompare(b.email);
  expect(await store.get(record.id)).toEqual(await source.get(record.id));
  expect((await store.list()).sort(byId)).toEqual((await source.list()).sort(byId));
  expect((await store.get(record.id))?.usage).toEqual({ requests: 7, promptTokens: 70, completionTokens: 18 });
  expect(await store.usageBreakdown(record.accountId, PAST_MONTH.from, PAST_MONTH.to, { by: 'endUser', limit: 10 })).toEqual([{ group: '', requests: 3, refused: 1, costNanos: 5, promptTokens: 30, completionTokens: 6 }]);
  expect((await store.get(teamKey.id))?.revokedAt).not.toBeNull();
  expect((await store.listAccounts()).find((a) => a.id === 'acc_team')).toEqual((await source.listAccounts()).find((a) => a.id === 'acc_team'));
  expect(await store.getPerson('owner@example.com')).toEqual(await source.getPerson('owner@example.com'));
  expect(await store.getPerson('member@example.com')).toEqual({ ...(await source.getPerson('member@example.com')), passwordWithOidc: false });
  expect(await store.identitiesOf('owner@example.com')).toEqual(await source.identitiesOf('owner@example.com'));
  expect((await store.listMembers('acc_team')).sort(byEmail)).toEqual((await source.listMembers('acc_team')).sort(byEmail));
  expect(await store.findSession('d'.repeat(64))).toEqual(await source.findSession('d'.repeat(64)));
  expect(await store.listAudit(null, 10)).toEqual(await source.listAudit(null, 10));
  expect(await store.usage(record.accountId, '2030-01-01', '2030-12-31')).toEqual(await source.usage(record.accountId, '2030-01-01', '2030-12-31'));
  const scope = `key:${record.id}:d:${new Date().toISOString().slice(0, 10)}`;
  expect(await store.quotaUsage([scope])).toEqual(new Map([[scope, 52]]));
  expect(await store.bumpCounters([{ name: 'sign-in:member@example.com', expiresAt: new Date(Date.now() + 60_000) }], new Date())).toEqual([3]);
  expect(await store.takeToken('t'.repeat(64), 'password', new Date())).toEqual(await source.takeToken('t'.repeat(64), 'password', new Date()));
}
