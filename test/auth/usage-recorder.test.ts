/**
 * Key usage is counted in memory and written to the key store in batches. A write that fails (here: a
 * real PostgreSQL whose table is away for a while) loses nothing: the batch is kept and written with
 * the next one, once, and the failure is reported. One that landed after our deadline is not counted
 * again when it is sent again.
 */
import pg from 'pg';
import { issueKey } from '../../src/auth/issue';
import { PostgresKeyStore } from '../../src/store/postgres/store';
import { UsageRecorder } from '../../src/auth/usage-recorder';
import { SLICE, SORTED_RUN } from '../../src/auth/use-order';
import { GuardedKeyStore } from '../../src/store/guarded';
import { createTestDatabase, holdingRelay, type TestDatabase } from '../helpers/postgres';
import { eventually, sleep } from '../helpers/time';

let database: TestDatabase;
let store: PostgresKeyStore;
let admin: pg.Client;

beforeAll(async () => {
  database = await createTestDatabase();
  store = await PostgresKeyStore.open(database.url);
  admin = new pg.Client({ connectionString: database.url });
  await admin.connect();
});
afterAll(async () => {
  await admin?.end();
  await store?.close();
  await database?.drop();
});

test('a failed write keeps its batch: written once with the next, the latest use time kept, the failure reported', async () => {
  const { record } = await issueKey(store, { name: 'counted' });
  const failures: string[] = [];
  const recorder = new UsageRecorder(store, (err) => failures.push((err as Error).message));

  recorder.used(record, new Date('2030-01-01T00:00:00Z'));
  recorder.ended(record, true, new Date('2030-01-01T00:00:00Z'));
  recorder.tokens(record, 10, 5);
  await admin.query('alter table chatgate_keys rename to chatgate_keys_away');
  await recorder.flush();
  expect(failures).toHaveLength(1);
  expect(failures[0]).toMatch(/chatgate_keys/);

  // Used again while the store could not be written.
  recorder.used(record, new Date('2030-01-01T00:00:09Z'));
  recorder.ended(record, true, new Date('2030-01-01T00:00:09Z'));
  recorder.used(record, new Date('2030-01-01T00:00:10Z'));
  recorder.ended(record, true, new Date('2030-01-01T00:00:10Z'));
  recorder.tokens(record, 1, 2);
  await admin.query('alter table chatgate_keys_away rename to chatgate_keys');
  await recorder.flush();
  await recorder.flush(); // nothing pending: nothing written twice

  const stored = await store.get(record.id);
  expect(stored?.usage).toEqual({ requests: 3, promptTokens: 11, completionTokens: 7 });
  expect(stored?.lastUsedAt).toBe('2030-01-01T00:00:10.000Z');
  expect(failures).toHaveLength(1);
});

test('a use counted during a failing write is kept with the batch, and the later time wins', async () => {
  const { record } = await issueKey(store, { name: 'overlapping' });
  const recorder = new UsageRecorder(store, () => undefined);
  recorder.used(record, new Date('2030-02-01T00:00:00Z'));
  recorder.ended(record, true, new Date('2030-02-01T00:00:00Z'));
  await admin.query('alter table chatgate_keys rename to chatgate_keys_away');
  const failing = recorder.flush();
  recorder.used(record, new Date('2030-02-01T00:00:30Z')); // while the write is under way
  recorder.ended(record, true, new Date('2030-02-01T00:00:30Z'));
  await failing;
  await admin.query('alter table chatgate_keys_away rename to chatgate_keys');
  await recorder.stop();
  const stored = await store.get(record.id);
  expect(stored?.usage.requests).toBe(2);
  expect(stored?.lastUsedAt).toBe('2030-02-01T00:00:30.000Z');
});

test('a large batch is written in slices with the event loop free between two; a failed slice and those after it are kept, those before it written once', async () => {
  const calls: number[] = [];
  const written = new Map<string, number>();
  let failOn = 2;
  const events: string[] = [];
  const slicing = new UsageRecorder({
    async recordUse(uses) {
      calls.push(uses.length);
      events.push(`slice ${calls.length}`);
      if (calls.length === failOn) throw new Error('store away');
      for (const use of uses) written.set(use.keyId, (written.get(use.keyId) ?? 0) + use.requests);
    },
  });
  const KEYS = 2 * SLICE + SLICE / 2; // two whole slices and half of one
  for (let i = 0; i < KEYS; i++) slicing.ended({ id: `key_${i}`, accountId: 'acc' }, true);
  setImmediate(() => events.push('other work'));
  await slicing.flush();
  expect(calls).toEqual([SLICE, SLICE]);
  expect(events).toEqual(['slice 1', 'other work', 'slice 2']); // other work ran between the slices
  expect(written.size).toBe(SLICE);
  // The rest, and a use counted meanwhile, go with the next flush; nothing of the first slice again.
  slicing.ended({ id: 'key_0', accountId: 'acc' }, true);
  failOn = 0;
  await slicing.flush();
  expect(calls.slice(2)).toEqual([SLICE, KEYS - SLICE + 1 - SLICE]);
  expect(written.size).toBe(KEYS);
  expect([...written.values()].reduce((sum, n) => sum + n, 0)).toBe(KEYS + 1);
  expect(written.get('key_0')).toBe(2);
});

test('a slice that fails in the first of two sorted runs, its keys each of two models (either used last): the rest of its run and all of the next are kept, every use written once', async () => {
  const written = new Map<string, number>();
  let slices = 0;
  let failOn = 2;
  const recorder = new UsageRecorder({
    async recordUse(uses) {
      if (++slices === failOn) throw new Error('store away');
      for (const use of uses) written.set(`${use.keyId} ${use.model}`, (written.get(`${use.keyId} ${use.model}`) ?? 0) + use.requests);
    },
  });
  const KEYS = SORTED_RUN + SLICE; // a second run of SLICE keys
  const id = (i: number) => `key_${String(i).padStart(6, '0')}`;
  // A key's latest use carries its others: whether it sorts first or last, each is kept once.
  for (let i = 0; i < KEYS; i++) for (const model of i % 2 === 0 ? ['p/a', 'p/b'] : ['p/b', 'p/a']) recorder.ended({ id: id(i), accountId: 'acc' }, true, new Date('2030-06-01T12:00:00Z'), { model, endUser: '' });
  await recorder.flush();
  expect(written.size).toBe(SLICE); // the first slice only
  // One more use meanwhile, of a key of the second run: merged with its kept use.
  recorder.ended({ id: id(KEYS - 1), accountId: 'acc' }, true, new Date('2030-06-01T12:00:09Z'), { model: 'p/b', endUser: '' });
  failOn = 0;
  await recorder.flush();
  expect(written.size).toBe(2 * KEYS);
  expect([...written.values()].reduce((sum, n) => sum + n, 0)).toBe(2 * KEYS + 1);
  expect(written.get(`${id(KEYS - 1)} p/b`)).toBe(2);
  expect(written.get(`${id(KEYS - 1)} p/a`)).toBe(1);
});

test('a write that lands after our deadline is sent again under its id and counted once', async () => {
  // The store through a relay that holds PostgreSQL's answers back: the write commits there, and the
  // gateway's 300 ms deadline passes without a word, so it cannot know that it landed.
  const relay = await holdingRelay(new URL(database.url));
  const through = await PostgresKeyStore.open(relay.url, undefined, 2, 1_000);
  const guarded = new GuardedKeyStore(through, 300, { down: () => undefined, up: () => undefined });
  try {
    const { record } = await issueKey(store, { name: 'landed late' });
    const failures: unknown[] = [];
    const recorder = new UsageRecorder(guarded, (err) => failures.push(err));
    recorder.ended(record, true, new Date('2030-03-01T00:00:00Z'));
    recorder.tokens(record, 100, 50, new Date('2030-03-01T00:00:00Z'), 7_000);
    relay.hold();
    await recorder.flush();
    expect(failures).toHaveLength(1);
    // It landed all the same.
    await eventually(async () => ((await store.get(record.id))?.usage.requests === 1 ? true : undefined));
    relay.release();
    recorder.ended(record, true, new Date('2030-03-01T00:00:05Z')); // one more since
    await recorder.flush();
    expect(failures).toHaveLength(1);
    expect((await store.get(record.id))?.usage).toEqual({ requests: 2, promptTokens: 100, completionTokens: 50 });
    const [day] = await store.usage(record.accountId, '2030-03-01', '2030-03-01');
    expect(day).toMatchObject({ requests: 2, costNanos: 7_000, promptTokens: 100, completionTokens: 50 });
  } finally {
    await through.close();
    relay.cut();
  }
});

test('stop() waits for a flush under way: every slice is written before it resolves (the store closes after it)', async () => {
  const written = new Set<string>();
  const slow = new UsageRecorder({
    async recordUse(uses) {
      await sleep(20); // a store that takes its time over each slice
      for (const use of uses) written.add(use.keyId);
    },
  });
  for (let i = 0; i < 3 * SLICE; i++) slow.ended({ id: `key_${i}`, accountId: 'acc' }, true);
  void slow.flush(); // the interval's flush, under way when the gateway stops
  await slow.stop();
  expect(written.size).toBe(3 * SLICE);
});

test("the timer's flush spreads its slices over a quarter of the interval; an asked flush does not wait; stop() writes the rest at once", async () => {
  /** A store that notes how many slices it has been given. */
  const counting = () => {
    const slices: number[] = [];
    return { slices, store: { recordUse: async (uses: readonly unknown[]) => void slices.push(uses.length) } };
  };
  const fill = (recorder: UsageRecorder) => {
    for (let i = 0; i < 4 * SLICE; i++) recorder.ended({ id: `key_${i}`, accountId: 'acc' }, true);
  };

  // Control: a flush asked for (not the timer's) writes its 4 slices with only a turn between two.
  const asked = counting();
  const now = new UsageRecorder(asked.store);
  fill(now);
  const began = performance.now();
  await now.flush();
  const took = performance.now() - began;
  expect(asked.slices).toEqual([SLICE, SLICE, SLICE, SLICE]);

  // The timer's flush, with an interval of 400 s: 100 s of spread, 25 s between two slices. Within the
  // twice the time the asked flush took for all of its slices, it has written one.
  const spread = counting();
  const timed = new UsageRecorder(spread.store);
  timed.start(400_000);
  fill(timed);
  const flushing = timed.flush(true);
  await eventually(() => (spread.slices.length >= 1 ? true : undefined));
  await sleep(Math.max(50, 2 * took));
  expect(spread.slices).toEqual([SLICE]);

  // Stopping does not wait out the spread: the flush under way writes the rest at once.
  await timed.stop();
  await flushing;
  expect(spread.slices).toEqual([SLICE, SLICE, SLICE, SLICE]);
});

test('a batch goes to the store in the order of the usage tables: by key, then day, model and end user, across its slices', async () => {
  const given: string[] = [];
  const recorder = new UsageRecorder({ recordUse: async (uses) => void given.push(...uses.map((use) => `${use.keyId} ${use.date} ${use.model} ${use.endUser}`)) });
  // As the tables compare text: a key before the keys it begins (key_1, key_1 2030-…, key_10). Keys used in an order of their own (a shuffle of 2.5 slices' worth), each on two days and with two models.
  const ids = Array.from({ length: (5 * SLICE) / 2 }, (_, i) => `key_${((i * 7919) % ((5 * SLICE) / 2)).toString(36)}`);
  for (const day of ['2030-04-02', '2030-04-01']) {
    for (const id of ids) {
      for (const model of ['p/b', 'p/a']) recorder.ended({ id, accountId: 'acc' }, true, new Date(`${day}T12:00:00Z`), { model, endUser: '' });
    }
  }
  await recorder.flush();
  expect(given).toHaveLength(ids.length * 4);
  expect(given).toEqual([...given].sort());
  expect(given.slice(0, 4)).toEqual(['key_0 2030-04-01 p/a ', 'key_0 2030-04-01 p/b ', 'key_0 2030-04-02 p/a ', 'key_0 2030-04-02 p/b ']);
});

test('a batch of more than SORTED_RUN keys is sorted a run at a time, each run just before its slices, never all at once', async () => {
  const given: string[] = [];
  let slices = 0;
  const recorder = new UsageRecorder({
    recordUse: async (uses) => {
      given.push(...uses.map((use) => use.keyId));
      slices++;
    },
  });
  // Used in falling order: the second run holds the smallest keys, which a sort of the whole batch would send first.
  const count = SORTED_RUN + 2 * SLICE;
  const id = (i: number) => `key_${String(count - i).padStart(6, '0')}`;
  for (let i = 0; i < count; i++) recorder.ended({ id: id(i), accountId: 'acc' }, true, new Date('2030-05-01T12:00:00Z'));
  await recorder.flush();
  const first = given.slice(0, SORTED_RUN);
  const second = given.slice(SORTED_RUN);
  expect(first).toEqual([...first].sort());
  expect(second).toEqual([...second].sort());
  expect(first[0]).toBe(id(SORTED_RUN - 1)); // the least of the first run, not of the batch
  expect(second[0]).toBe(id(count - 1));
  expect(slices).toBe(SORTED_RUN / SLICE + 2);
});
