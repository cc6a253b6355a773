/**
 * A PostgreSQL connection cut while a query is under way on it (the network dropped, a proxy or the
 * server gone) fails that query, not the process: pg emits 'error' on a checked-out client, which
 * nothing but the store listens to then. Through a relay of the test's own that holds the server's
 * answers back and then cuts every connection.
 */
import { PostgresKeyStore } from '../../src/store/postgres/store';
import { createTestDatabase, holdingRelay, type TestDatabase } from '../helpers/postgres';
import { sleep } from '../helpers/time';

let database: TestDatabase;
beforeAll(async () => {
  database = await createTestDatabase();
});
afterAll(() => database?.drop());

test('a query under way when its connection is cut fails with the store error; the process goes on', async () => {
  const relay = await holdingRelay(new URL(database.url));
  const store = await PostgresKeyStore.open(relay.url, undefined, 2, 5_000);
  const uncaught: unknown[] = [];
  const onUncaught = (err: unknown) => uncaught.push(err);
  process.on('uncaughtException', onUncaught);
  try {
    expect(await store.findByDigest('0'.repeat(64))).toBeUndefined(); // the connection works
    relay.hold();
    const lookup = store.findByDigest('1'.repeat(64)).then(
      () => 'answered',
      (err: Error) => err.message,
    );
    await sleep(200); // the query is on the wire, its answer held
    relay.cut();
    expect(await lookup).toMatch(/Connection terminated unexpectedly/);
    await sleep(200); // an unheard 'error' would have been thrown by now
    expect(uncaught).toEqual([]);
  } finally {
    process.off('uncaughtException', onUncaught);
    await store.close().catch(() => undefined);
  }
});
