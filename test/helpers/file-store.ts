/** A file store's keys.json holding every record kind, for the tests of `chatgate store import`. */
import { issueKey } from '../../src/auth/issue';
import { FileKeyStore } from '../../src/store/file';

/** A file store holding every record kind, made through the store interface as the gateway makes them. */
export async function fileStoreWithEverything(file: string) {
  const source = new FileKeyStore(file);
  const now = new Date();
  const later = new Date(now.getTime() + 3600_000).toISOString();
  await source.createAccount({ id: 'acc_team', name: 'team', createdAt: now.toISOString(), quota: { tokensPerDay: 1000, tokensPerMonth: null } });
  const { key, record } = await issueKey(source, { name: 'imported', models: ['mock/*'], endpoints: ['chat'], rateLimit: { requestsPerMinute: 7 }, quota: { tokensPerDay: 50 } });
  const { record: teamKey } = await issueKey(source, { name: 'team key', accountId: 'acc_team', expiresAt: new Date('2099-01-01T00:00:00Z') });
  await source.revoke(teamKey.id, now);
  await source.recordUse([{ keyId: record.id, accountId: record.accountId, date: '2030-01-02', at: now, requests: 4, refused: 2, costNanos: 123_456_789, promptTokens: 40, completionTokens: 12 }]);
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

