import { OWED_RETRY_MS, RateLimiter } from '../../src/ratelimit/limiter';
import { StoreNotReached, type RateLimitStore } from '../../src/ratelimit/store';
import { formatDuration } from '../../src/ratelimit/limit-rate';
import { keyRecord } from '../fakes/key-record';
import { sleep } from '../helpers/time';

const key = keyRecord;

const failingStore: RateLimitStore = {
  shared: true,
  reachable: false,
  admit: () => Promise.reject(new Error('redis down')),
  release: () => Promise.reject(new Error('redis down')),
  debitTokens: () => Promise.reject(new Error('redis down')),
  close: async () => undefined,
};

const settings = (failOpen: boolean) => ({ store: 'memory' as const, failOpen, timeoutMs: 100, requestsPerMinute: 60, tokensPerMinute: 1000 });

test("a key's own limits override the defaults; null keeps the default; 0 lifts the limit", () => {
  const limiter = new RateLimiter(failingStore, settings(true), { storeFailed: () => undefined, storeRecovered: () => undefined });
  expect(limiter.limitsFor(key())).toEqual({ requestsPerMinute: 60, tokensPerMinute: 1000, maxConcurrent: undefined });
  expect(limiter.limitsFor(key({ requestsPerMinute: 10, tokensPerMinute: 0, maxConcurrent: 2 }))).toEqual({ requestsPerMinute: 10, tokensPerMinute: undefined, maxConcurrent: 2 });
});

test('a failing store: fail open admits (degraded), fail closed refuses; the failure is reported', async () => {
  const failures: unknown[] = [];
  const events = { storeFailed: (err: unknown) => failures.push(err), storeRecovered: () => undefined };
  expect(await new RateLimiter(failingStore, settings(true), events).admit('key_1', { requestsPerMinute: 1 }, 's')).toEqual({ allowed: true, degraded: true });
  expect(await new RateLimiter(failingStore, settings(false), events).admit('key_1', { requestsPerMinute: 1 }, 's')).toEqual({ allowed: false, unavailable: true });
  expect(failures).toHaveLength(2);
});

test('recovery is reported once when the store answers again', async () => {
  let down = true;
  const flaky: RateLimitStore = { ...failingStore, admit: () => (down ? Promise.reject(new Error('down')) : Promise.resolve({ allowed: true, retryAfterMs: 0, quota: {} })) };
  let recovered = 0;
  const limiter = new RateLimiter(flaky, settings(true), { storeFailed: () => undefined, storeRecovered: () => recovered++ });
  await limiter.admit('k', {}, 's');
  down = false;
  await limiter.admit('k', {}, 's');
  await limiter.admit('k', {}, 's');
  expect(recovered).toBe(1);
});

test('durations read like OpenAI headers', () => {
  expect([formatDuration(59), formatDuration(999.2), formatDuration(1000), formatDuration(5100), formatDuration(60_000), formatDuration(90_500)]).toEqual([
    '59ms',
    '1s',
    '1s',
    '6s',
    '1m0s',
    '1m31s',
  ]);
});

describe('releases and token debits the store could not take are owed', () => {
  /** A store that refuses everything while `down`, and records what it took. */
  function recordingStore() {
    const taken: string[] = [];
    const store = {
      down: true,
      ...failingStore,
      release: async (keyId: string, requestId: string) => {
        if (store.down) throw new Error('redis down');
        taken.push(`release ${keyId} ${requestId}`);
      },
      debitTokens: async (keyId: string, tokensPerMinute: number, amount: number) => {
        if (store.down) throw new StoreNotReached('redis down');
        taken.push(`debit ${keyId} ${amount} of ${tokensPerMinute}/min`);
      },
    };
    return { store, taken };
  }
  const quietEvents = { storeFailed: () => undefined, storeRecovered: () => undefined };
  const settle = () => new Promise((resolve) => setImmediate(resolve));

  test('paid once the store is back: each release once, the tokens owed per key added up into one debit', async () => {
    const { store, taken } = recordingStore();
    const limiter = new RateLimiter(store, settings(true), quietEvents);
    limiter.release('key_1', 'slot-a');
    limiter.debitTokens('key_1', 1000, 10);
    limiter.debitTokens('key_1', 1000, 5);
    limiter.debitTokens('key_2', 500, 7);
    await settle();
    expect(limiter.owed()).toBe(3);

    await sleep(OWED_RETRY_MS + 100); // a round while still down
    expect(taken).toEqual([]);
    store.down = false;
    await sleep(OWED_RETRY_MS + 100);
    expect(taken).toEqual(['release key_1 slot-a', 'debit key_1 15 of 1000/min', 'debit key_2 7 of 500/min']);
    expect(limiter.owed()).toBe(0);
    await sleep(OWED_RETRY_MS + 100);
    expect(taken).toHaveLength(3); // nothing paid twice
  });

  test('a debit that may have been applied (a timeout) is not repeated; debts are capped at a minute of tokens and dropped after a minute', async () => {
    const { store, taken } = recordingStore();
    let now = 1_000_000;
    const limiter = new RateLimiter(store, settings(true), quietEvents, () => now);
    const timedOut = new RateLimiter({ ...store, debitTokens: () => Promise.reject(new Error('Command timed out')) }, settings(true), quietEvents);
    timedOut.debitTokens('key_1', 1000, 10);
    limiter.debitTokens('key_1', 1000, 700);
    limiter.debitTokens('key_1', 1000, 700); // 1,400 used during the outage: a minute's worth is owed
    limiter.debitTokens('key_2', 1000, 5);
    await settle();
    expect(timedOut.owed()).toBe(0);
    now += 30_000;
    limiter.debitTokens('key_3', 1000, 9); // owed since 30 s later
    await settle();
    now += 31_000; // key_1 and key_2 owed for 61 s: the bucket has refilled since
    store.down = false;
    await limiter.settleOwed();
    expect(taken).toEqual(['debit key_3 9 of 1000/min']);

    limiter.debitTokens('key_4', 1000, 700);
    store.down = true;
    limiter.debitTokens('key_4', 1000, 700);
    limiter.debitTokens('key_4', 1000, 700);
    await settle();
    store.down = false;
    await limiter.settleOwed();
    expect(taken.slice(1)).toEqual(['debit key_4 700 of 1000/min', 'debit key_4 1000 of 1000/min']);
  });

  test('settling pays what is owed at once (a retired serving unit, shutdown)', async () => {
    const { store, taken } = recordingStore();
    const limiter = new RateLimiter(store, settings(true), quietEvents);
    limiter.release('key_1', 'slot-b');
    await settle();
    store.down = false;
    await limiter.settleOwed();
    expect(taken).toEqual(['release key_1 slot-b']);
    expect(limiter.owed()).toBe(0);
  });
});

test('an admission that timed out may still run when the store wakes: its concurrency slot is released once the store takes commands', async () => {
  const released: string[] = [];
  let awake = false;
  const store: RateLimitStore = {
    shared: true,
    get reachable() {
      return awake;
    },
    admit: () => Promise.reject(new Error('Command timed out')), // sent, never answered
    release: async (_keyId, slot) => {
      if (!awake) throw new Error('Command timed out');
      released.push(slot);
    },
    debitTokens: async () => undefined,
    close: async () => undefined,
  };
  const limiter = new RateLimiter(store, settings(true), { storeFailed: () => undefined, storeRecovered: () => undefined });
  expect(await limiter.admit('key_1', { maxConcurrent: 2 }, 'slot-a')).toEqual({ allowed: true, degraded: true });
  expect(limiter.owed()).toBe(1);
  await sleep(OWED_RETRY_MS + 100);
  expect(released).toEqual([]); // still asleep: still owed
  awake = true;
  await sleep(OWED_RETRY_MS + 100);
  expect(released).toEqual(['slot-a']);
  expect(limiter.owed()).toBe(0);
});

test('an admission that certainly never reached the store owes nothing', async () => {
  const store: RateLimitStore = { ...failingStore, admit: () => Promise.reject(new StoreNotReached('redis is connecting')) };
  const limiter = new RateLimiter(store, settings(true), { storeFailed: () => undefined, storeRecovered: () => undefined });
  await limiter.admit('key_1', { maxConcurrent: 2 }, 'slot-b');
  expect(limiter.owed()).toBe(0);
});
