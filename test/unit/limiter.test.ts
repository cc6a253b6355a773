import { RateLimiter } from '../../src/ratelimit/limiter';
import type { RateLimitStore } from '../../src/ratelimit/store';
import { formatDuration } from '../../src/ratelimit/limit-rate';
import { keyRecord } from '../fakes/key-record';

const key = keyRecord;

const failingStore: RateLimitStore = {
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
