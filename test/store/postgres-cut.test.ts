/**
 * A PostgreSQL connection cut while a query is under way on it (the network dropped, a proxy or the
 * server gone) fails that query, not the process: pg emits 'error' on a checked-out client, which
 * nothing but the store listens to then. Through a relay of the test's own that holds the server's
 * answers back and then cuts every connection.
 */
import pg from 'pg';
import { PostgresKeyStore } from '../../src/store/postgres/store';
import { createTestDatabase, holdingRelay, type TestDatabase } from '../helpers/postgres';
import { eventually, sleep } from '../helpers/time';

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
    // The control: a client of the test's own on the same relay, cut with the store's, whose 'error'
    // the test hears. Once it has come, so has the store's client's (the same cut, the same path).
    const control = new pg.Client({ connectionString: relay.url });
    const heard: Error[] = [];
    control.on('error', (err) => heard.push(err));
    await control.connect();
    relay.hold();
    const controlQuery = control.query('SELECT 1').catch((err: Error) => err.message);
    const lookup = store.findByDigest('1'.repeat(64)).then(
      () => 'answered',
      (err: Error) => err.message,
    );
    await sleep(200); // the query is on the wire, its answer held
    relay.cut();
    expect(await lookup).toMatch(/Connection terminated unexpectedly/);
    expect(await controlQuery).toMatch(/Connection terminated unexpectedly/);
    await eventually(() => (heard.length > 0 ? true : undefined));
    expect(heard[0]!.message).toMatch(/Connection terminated unexpectedly/);
    expect(uncaught).toEqual([]);
  } finally {
    process.off('uncaughtException', onUncaught);
    await store.close().catch(() => undefined);
  }
});
