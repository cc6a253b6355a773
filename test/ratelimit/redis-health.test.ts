/**
 * The Redis rate limit store's health check against a real throwaway redis-server: frozen (SIGSTOP,
 * the socket stays open and nothing answers) it is noticed within 5 s by the ping's deadline, reported
 * once, and every admission gives up within timeoutMs as timed by the gateway, then at once; thawed
 * (SIGCONT) it is reported back once. A close is no outage; a Redis down at start is reported lost
 * before it is reported back.
 */
import { RedisRateLimitStore, type RedisEvents } from '../../src/ratelimit/redis';
import { StoreNotReached } from '../../src/ratelimit/store';
import { ThrowawayRedis } from '../helpers/redis';
import { eventually } from '../helpers/time';

const TIMEOUT_MS = 200;
let redis: ThrowawayRedis;

beforeEach(async () => {
  redis = await ThrowawayRedis.start();
});
afterEach(async () => {
  redis?.child?.kill('SIGCONT');
  await redis?.stop();
});

function openStore() {
  const events: Array<{ state: Parameters<RedisEvents['connection']>[0]; reason?: string; at: number }> = [];
  const store = new RedisRateLimitStore(redis.url, TIMEOUT_MS, { connection: (state, reason) => events.push({ state, reason, at: performance.now() }) });
  return { store, events };
}

/** How long an admission takes to settle, and how. */
async function timedAdmit(store: RedisRateLimitStore): Promise<{ ms: number; outcome: 'admitted' | 'not reached' | 'timed out' }> {
  const started = performance.now();
  try {
    await store.admit('key_1', { requestsPerMinute: 1000 }, `slot-${started}`);
    return { ms: performance.now() - started, outcome: 'admitted' };
  } catch (err) {
    return { ms: performance.now() - started, outcome: err instanceof StoreNotReached ? 'not reached' : 'timed out' };
  }
}

test('frozen: unreachable within 5 s, reported once; no admission waits past timeoutMs; thawed: reported back once; a close reports nothing', async () => {
  const { store, events } = openStore();
  await store.connected();
  expect(store.reachable).toBe(true);
  expect((await timedAdmit(store)).outcome).toBe('admitted');

  redis.child!.kill('SIGSTOP');
  const frozenAt = performance.now();
  const waits: Array<{ ms: number; outcome: string }> = [];
  // Admissions all along, until the freeze is noticed: each gives up within the deadline.
  await eventually(async () => {
    waits.push(await timedAdmit(store));
    return store.reachable ? undefined : true;
  }, 10_000);
  const detectedMs = performance.now() - frozenAt;
  expect(detectedMs).toBeLessThan(5_000);
  expect(waits.length).toBeGreaterThanOrEqual(1);
  for (const wait of waits) expect(wait.ms).toBeLessThan(TIMEOUT_MS + 50);
  // Noticed: admissions fail at once, without being sent.
  const after = await timedAdmit(store);
  expect(after.outcome).toBe('not reached');
  expect(after.ms).toBeLessThan(20);
  expect(events.map((event) => event.state)).toEqual(['connected', 'lost']);
  expect(events[1]!.reason).toMatch(/no answer to PING/);

  redis.child!.kill('SIGCONT');
  const thawedAt = performance.now();
  await eventually(() => (store.reachable ? true : undefined), 5_000);
  expect(performance.now() - thawedAt).toBeLessThan(2_000);
  expect((await timedAdmit(store)).outcome).toBe('admitted');
  expect(events.map((event) => event.state)).toEqual(['connected', 'lost', 'restored']);

  await store.close();
  await redis.stop();
  redis.child = undefined; // stopped: nothing for afterEach to stop
  // The close and the server's exit report nothing: give a lost report every chance to come.
  const closedAt = performance.now();
  await eventually(() => (performance.now() - closedAt > 2_500 ? true : undefined), 5_000);
  expect(events.map((event) => event.state)).toEqual(['connected', 'lost', 'restored']);
  console.log(`frozen Redis noticed after ${Math.round(detectedMs)} ms; admissions meanwhile gave up after at most ${Math.round(Math.max(...waits.map((w) => w.ms)))} ms`);
}, 30_000);

test('killed: unreachable at once, back when it answers again', async () => {
  const { store, events } = openStore();
  await store.connected();
  await redis.stop();
  await eventually(() => (store.reachable ? undefined : true), 3_000);
  expect((await timedAdmit(store)).outcome).toBe('not reached');
  await redis.resume();
  await eventually(() => (store.reachable ? true : undefined), 5_000);
  expect(events.map((event) => event.state)).toEqual(['connected', 'lost', 'restored']);
  await store.close();
}, 20_000);

test('down at start: reported unreachable, then back; never "back" without "unreachable" first', async () => {
  await redis.stop();
  const { store, events } = openStore();
  await store.connected(); // settles once Redis counts as down
  expect(store.reachable).toBe(false);
  expect(events.map((event) => event.state)).toEqual(['lost']);
  await redis.resume();
  await eventually(() => (store.reachable ? true : undefined), 5_000);
  expect(events.map((event) => event.state)).toEqual(['lost', 'restored']);
  await store.close();
}, 20_000);
