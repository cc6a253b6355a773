/**
 * Rotation with grace in both SQL stores (SQLite: two connections to one file; PostgreSQL: two
 * pools on one fresh database), as two processes or replicas see it: the replaced secret is found
 * (marked `previousKey`, with its end) while its grace lasts, a later rotation ends it at once, and
 * every change of the key announces it, so that no cache keeps it past a revocation.
 */
import { issueKey, rotateKey } from '../../src/auth/issue';
import { digestKey } from '../../src/auth/keys';
import { SqliteKeyStore } from '../../src/store/sqlite/store';
import { SQL_STORE_PAIRS, type StorePair } from '../helpers/store-pairs';
import { eventually } from '../helpers/time';

type Pair = StorePair;
const backends = SQL_STORE_PAIRS;

describe.each(backends)('%s', (_kind, open) => {
  let pair: Pair;
  beforeAll(async () => {
    pair = await open();
  });
  afterAll(() => pair?.close());

  test('the replaced secret is found, marked, until its grace ends; the new one is the key itself', async () => {
    const { store, other } = pair;
    const now = new Date();
    const { key: first, record } = await issueKey(store, { name: 'graceful' });
    const rotated = (await rotateKey(other, record.id, 3600, now))!;
    const until = new Date(now.getTime() + 3_600_000).toISOString();
    expect(rotated.record.previousKeyExpiresAt).toBe(until);
    const old = await store.findByDigest(digestKey(first));
    expect(old).toMatchObject({ id: record.id, previousKey: true, previousKeyExpiresAt: until, digest: digestKey(rotated.key) });
    const fresh = await store.findByDigest(digestKey(rotated.key));
    expect(fresh?.id).toBe(record.id);
    expect(fresh?.previousKey).toBeUndefined();
    expect((await other.get(record.id))?.previousKeyExpiresAt).toBe(until);
  });

  test('a later rotation ends an earlier grace at once: only the secret it replaces is in grace', async () => {
    const { store, other } = pair;
    const { key: first, record } = await issueKey(store, { name: 'rotated thrice' });
    const second = (await rotateKey(store, record.id, 600))!;
    const third = (await rotateKey(other, record.id, 600))!;
    expect(await store.findByDigest(digestKey(first))).toBeUndefined();
    expect(await store.findByDigest(digestKey(second.key))).toMatchObject({ previousKey: true });
    const fourth = (await rotateKey(other, record.id))!; // no grace: the one it replaces stops at once
    expect(await store.findByDigest(digestKey(second.key))).toBeUndefined();
    expect(await store.findByDigest(digestKey(third.key))).toBeUndefined();
    expect(fourth.record.previousKeyExpiresAt).toBeUndefined();
    expect((await store.findByDigest(digestKey(fourth.key)))?.id).toBe(record.id);
  });

  test('look-alikes: neither secret with a character changed is found', async () => {
    const { store } = pair;
    const { key: first, record } = await issueKey(store, { name: 'look-alike' });
    const next = (await rotateKey(store, record.id, 600))!;
    for (const secret of [first, next.key]) {
      const changed = secret.slice(0, -1) + (secret.endsWith('A') ? 'B' : 'A');
      expect(await store.findByDigest(digestKey(changed))).toBeUndefined();
    }
  });

  test('revoking a key in grace announces the replaced secret too, to the other handle', async () => {
    const { store, other } = pair;
    const { key: first, record } = await issueKey(store, { name: 'revoked in grace' });
    const next = (await rotateKey(store, record.id, 600))!;
    const seen: string[] = [];
    other.onChange((digests) => seen.push(...(digests ?? ['*'])));
    await store.revoke(record.id, new Date());
    await eventually(() => (seen.includes(digestKey(first)) && seen.includes(digestKey(next.key)) ? true : undefined), 3000);
    expect(await other.findByDigest(digestKey(first))).toMatchObject({ previousKey: true, revokedAt: expect.any(String) });
  });
});

describe.each(backends)('%s: a secret changed by other means ends the grace', (kind, open) => {
  test('a rotation that writes only the digest (as a chatgate without grace does) leaves the replaced secret dead', async () => {
    const pair = await open();
    try {
      const { key: first, record } = await issueKey(pair.store, { name: 'old writer' });
      await rotateKey(pair.store, record.id, 600);
      // What a replica of an earlier version does on rotate (a rolling deploy, a rollback): another
      // digest (its first hex digit changed: to 'd' alone left one in 16 digests as they were).
      const sql = `update chatgate_keys set digest = (case when substr(digest, 1, 1) = 'd' then 'e' else 'd' end)||substr(digest, 2), prefix = prefix where id = ${kind === 'sqlite' ? '?' : '$1'}`;
      if (pair.store instanceof SqliteKeyStore) pair.store.sql.db.prepare(sql).run(record.id);
      else await (pair.store as unknown as { query(sql: string, params: unknown[]): Promise<unknown> }).query(sql, [record.id]);
      expect(await pair.other.findByDigest(digestKey(first))).toBeUndefined();
      expect((await pair.other.get(record.id))?.previousKeyExpiresAt).toBeUndefined();
    } finally {
      await pair.close();
    }
  });
});
