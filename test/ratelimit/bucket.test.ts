import { admit, debit, msUntil, refilled, WINDOW_MS } from '../../src/ratelimit/bucket';

const T0 = 1_000_000;

test('a fresh key has its whole limit', () => {
  const decision = admit({}, { requestsPerMinute: 10 }, T0);
  expect(decision.allowed).toBe(true);
  expect(decision.quota.requests).toEqual({ limit: 10, remaining: 9, resetMs: 6000 });
});

test('exactly the limit passes in a burst; the next waits one refill interval', () => {
  let state = {};
  const allowed: boolean[] = [];
  let last = admit(state, { requestsPerMinute: 10 }, T0);
  for (let i = 0; i < 11; i++) {
    last = admit(state, { requestsPerMinute: 10 }, T0);
    state = { requests: last.requests };
    allowed.push(last.allowed);
  }
  expect(allowed).toEqual([...Array(10).fill(true), false]);
  expect(last.reason).toBe('requests');
  expect(last.retryAfterMs).toBe(6000);
  expect(last.quota.requests).toEqual({ limit: 10, remaining: 0, resetMs: 60_000 });
});

test('refill is continuous: after 6 s one more request, after a minute the full limit, never more', () => {
  const empty = { level: 0, at: T0 };
  expect(refilled(empty, 10, T0 + 5999).level).toBeLessThan(1);
  expect(refilled(empty, 10, T0 + 6000).level).toBeCloseTo(1);
  expect(refilled(empty, 10, T0 + WINDOW_MS).level).toBe(10);
  expect(refilled(empty, 10, T0 + 10 * WINDOW_MS).level).toBe(10);
  expect(refilled(empty, 10, T0 - 1000).level).toBe(0); // a clock going back gives nothing
});

test('tokens are admitted while the bucket is above zero, debited after the fact, and may go negative', () => {
  let tokens = refilled(undefined, 100, T0);
  expect(admit({ tokens }, { tokensPerMinute: 100 }, T0).allowed).toBe(true);
  tokens = debit(tokens, 100, T0, 130); // the answer used more than was left
  expect(tokens.level).toBe(-30);
  const refused = admit({ tokens }, { tokensPerMinute: 100 }, T0);
  expect(refused).toMatchObject({ allowed: false, reason: 'tokens' });
  expect(refused.retryAfterMs).toBe(msUntil(tokens, 100, 1));
  expect(refused.retryAfterMs).toBe(Math.ceil((31 * WINDOW_MS) / 100));
  expect(refused.quota.tokens).toMatchObject({ limit: 100, remaining: 0 });
  expect(admit({ tokens }, { tokensPerMinute: 100 }, T0 + refused.retryAfterMs).allowed).toBe(true);
});

test('a request refused for tokens takes no request unit', () => {
  const state = { requests: refilled(undefined, 5, T0), tokens: { level: -1, at: T0 } };
  const decision = admit(state, { requestsPerMinute: 5, tokensPerMinute: 100 }, T0);
  expect(decision.allowed).toBe(false);
  expect(decision.requests?.level).toBe(5);
});

test('no limits: always allowed, no quota', () => {
  expect(admit({}, {}, T0)).toMatchObject({ allowed: true, quota: {} });
});
