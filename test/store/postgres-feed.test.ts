/**
 * PostgreSQL's change feed as the key cache relies on it: `changeFeedLive` says true only while the
 * LISTEN connection delivers, so a cached key may live past the TTL exactly then. A killed connection
 * and one cut silently (no FIN, no error: only the heartbeat can tell) both turn it false; back, it
 * announces that anything may have changed. And the cache over a real store: past the old TTL a key
 * is served without a query, and a revocation made through another replica evicts it at once.
 */
import net from 'node:net';
import pg from 'pg';
import { KeyCache } from '../../src/auth/cache';
import { issueKey } from '../../src/auth/issue';
import { GuardedKeyStore } from '../../src/store/guarded';
import { PostgresKeyStore } from '../../src/store/postgres/store';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres';
import { eventually } from '../helpers/time';

let database: TestDatabase;
const opened: PostgresKeyStore[] = [];

beforeAll(async () => {
  database = await createTestDatabase();
});
afterAll(async () => {
  await Promise.all(opened.map((store) => store.close()));
  await database?.drop();
});

async function open(url = database.url, states: string[] = []): Promise<PostgresKeyStore> {
  const store = await PostgresKeyStore.open(url, { listener: (state) => states.push(state) });
  opened.push(store);
  return store;
}

async function sql<R extends pg.QueryResultRow>(text: string, params: unknown[] = []): Promise<R[]> {
  const client = new pg.Client({ connectionString: database.url });
  await client.connect();
  try {
    return (await client.query<R>(text, params)).rows;
  } finally {
    await client.end();
  }
}

/** A TCP relay to the database that can stop forwarding without closing anything: a silent cut. */
async function freezableRelay(target: string) {
  const { hostname, port } = new URL(target);
  let frozen = false;
  const pairs = new Set<[net.Socket, net.Socket]>();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(port), hostname);
    for (const socket of [client, upstream]) socket.on('error', () => undefined);
    pairs.add([client, upstream]);
    if (!frozen) client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(target);
  url.hostname = '127.0.0.1';
  url.port = String((server.address() as net.AddressInfo).port);
  return {
    url: url.href,
    freeze() {
      frozen = true;
      for (const [client, upstream] of pairs) {
        client.unpipe(upstream);
        upstream.unpipe(client);
        client.pause();
        upstream.pause();
      }
    },
    thaw() {
      frozen = false; // connections made from now on pass; the frozen ones stay stuck
    },
    close() {
      for (const pair of pairs) for (const socket of pair) socket.destroy();
      server.close();
    },
  };
}

test('hasKeys: false on an empty store, true once it holds a key, revoked or not', async () => {
  const empty = await createTestDatabase();
  try {
    const store = await PostgresKeyStore.open(empty.url);
    try {
      expect(await store.hasKeys()).toBe(false);
      const { record } = await issueKey(store, { name: 'only' });
      expect(await store.hasKeys()).toBe(true);
      await store.revoke(record.id, new Date());
      expect(await store.hasKeys()).toBe(true);
    } finally {
      await store.close();
    }
  } finally {
    await empty.drop();
  }
});

test('the LISTEN connection killed: the feed is down at once, then back, announcing that anything may have changed', async () => {
  const states: string[] = [];
  const store = await open(`${database.url}?application_name=feed-killed`, states);
  const notices: Array<string[] | undefined> = [];
  store.onChange((digests) => notices.push(digests));
  expect(store.changeFeedLive).toBe(true);
  await sql("select pg_terminate_backend(pid) from pg_stat_activity where application_name = 'feed-killed' and query ilike 'listen%'");
  await eventually(() => (store.changeFeedLive ? undefined : true));
  await eventually(() => (store.changeFeedLive ? true : undefined));
  expect(states).toEqual(['lost', 'restored']);
  expect(notices).toContainEqual(undefined);
});

test('the LISTEN connection cut silently: the heartbeat notices within 10 s; back, the feed says so', async () => {
  const relay = await freezableRelay(database.url);
  try {
    const states: string[] = [];
    const store = await open(relay.url, states);
    const notices: Array<string[] | undefined> = [];
    store.onChange((digests) => notices.push(digests));
    expect(store.changeFeedLive).toBe(true);
    const cut = performance.now();
    relay.freeze();
    await eventually(() => (store.changeFeedLive ? undefined : true), 15_000);
    const noticed = performance.now() - cut;
    process.stdout.write(`a silent cut of the change feed noticed after ${(noticed / 1000).toFixed(1)} s\n`);
    expect(noticed).toBeLessThan(12_000); // at most 5 s to the next heartbeat, 5 s for its answer, and timer slack
    expect(states).toEqual(['lost']);
    relay.thaw();
    await eventually(() => (store.changeFeedLive ? true : undefined), 10_000);
    expect(states).toEqual(['lost', 'restored']);
    expect(notices).toContainEqual(undefined);
  } finally {
    relay.close();
  }
}, 30_000);

test('the cache over PostgreSQL: past the old TTL a key is served without a query; a revocation through another replica evicts it at once', async () => {
  const store = new GuardedKeyStore(await open(), 1000);
  const elsewhere = await open();
  let queries = 0;
  const counted = Object.assign(Object.create(store) as GuardedKeyStore, {
    findByDigest: (digest: string) => {
      queries++;
      return store.findByDigest(digest);
    },
  });
  let at = 0;
  const cache = new KeyCache(counted, { size: 100, ttlMs: 30_000, maxAgeMs: 3_600_000, maxStaleMs: 3_600_000, negativeSize: 100, negativeTtlMs: 5_000 }, { hit: () => undefined, miss: () => undefined }, () => at);
  const heard: string[] = [];
  store.onChange((digests) => {
    heard.push(...(digests ?? []));
    cache.applyChanges(digests);
  });
  const { key, record } = await issueKey(elsewhere, { name: 'cached' });
  await eventually(() => (heard.includes(record.digest) ? true : undefined)); // the insert's own notice, past
  expect((await cache.lookup(key))?.id).toBe(record.id);
  at += 20 * 60_000; // forty of the old TTLs
  expect(cache.cached(key)?.record?.revokedAt).toBeNull();
  expect(queries).toBe(1);

  await elsewhere.revoke(record.id, new Date('2030-01-01T00:00:00Z'));
  const revokedAt = performance.now();
  await eventually(() => (cache.cached(key) === undefined ? true : undefined), 2000);
  process.stdout.write(`revocation through another replica evicted the cached key after ${(performance.now() - revokedAt).toFixed(1)} ms\n`);
  expect((await cache.lookup(key))?.revokedAt).toBe('2030-01-01T00:00:00.000Z');
  expect(queries).toBe(2);
});
