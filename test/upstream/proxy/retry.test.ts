/**
 * What follows a failed attempt, before any byte of its answer came (src/upstream/proxy/retry.ts), and
 * the error it ends in (src/upstream/proxy/deadlines.ts): the decision alone, on attempts made by
 * hand. test/upstream/faults.test.ts and replay.test.ts see the same rules through real workers.
 */
import type { Attempt } from '../../../src/upstream/proxy/attempt';
import { failureBeforeAnswer, failureMidAnswer } from '../../../src/upstream/proxy/deadlines';
import { recourseAfter } from '../../../src/upstream/proxy/retry';

interface Shape {
  connected?: boolean;
  timedOut?: Attempt['timedOut'];
  reused?: boolean;
  retries?: number;
  replay?: boolean;
  endpoint?: string;
}

function attempt({ connected = false, timedOut, reused = false, retries = 2, replay = true, endpoint = 'chat' }: Shape = {}): Attempt {
  return {
    connected,
    timedOut,
    upstreamRequest: { reusedSocket: reused },
    provider: { settings: { retries }, replay },
    target: { endpoint },
  } as unknown as Attempt;
}

const reset = Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET', syscall: 'read' });
const hangUp = Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
const refused = Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED', syscall: 'connect' });

test('a request never sent is retried on another worker as many times as the provider allows (retries), then fails over', () => {
  expect(recourseAfter(attempt(), refused, 1, false, false)).toBe('unsent');
  expect(recourseAfter(attempt(), refused, 2, false, false)).toBe('unsent');
  expect(recourseAfter(attempt(), refused, 3, false, false)).toBe('fail_over');
  expect(recourseAfter(attempt({ retries: 0 }), refused, 1, false, false)).toBe('fail_over');
});

test('a reset on a reused connection is retried once as stale, even when the request was sent', () => {
  expect(recourseAfter(attempt({ connected: true, reused: true }), reset, 1, false, false)).toBe('stale');
  expect(recourseAfter(attempt({ connected: true, reused: true }), reset, 1, true, false)).toBe('replayed');
  expect(recourseAfter(attempt({ connected: true, reused: true, replay: false }), reset, 1, true, false)).toBe('fail');
});

test('neither a hang-up, nor a reset on a fresh connection, nor one after a timeout is stale', () => {
  expect(recourseAfter(attempt({ connected: true, reused: true }), hangUp, 1, false, true)).toBe('fail');
  expect(recourseAfter(attempt({ connected: true }), reset, 1, false, true)).toBe('fail');
  expect(recourseAfter(attempt({ connected: true, reused: true, timedOut: 'first_byte' }), reset, 1, false, false)).toBe('fail');
});

test('a sent request is replayed once, unless it timed out, the provider says replay: false, or it is a Responses request', () => {
  expect(recourseAfter(attempt({ connected: true }), hangUp, 1, false, false)).toBe('replayed');
  expect(recourseAfter(attempt({ connected: true }), hangUp, 2, false, true)).toBe('fail');
  expect(recourseAfter(attempt({ connected: true, timedOut: 'first_byte' }), hangUp, 1, false, false)).toBe('fail');
  expect(recourseAfter(attempt({ connected: true, replay: false }), hangUp, 1, false, false)).toBe('fail');
  expect(recourseAfter(attempt({ connected: true, endpoint: 'responses' }), hangUp, 1, false, false)).toBe('fail');
});

test('an attempt that passed its connect or first-byte deadline ends in a timeout, any other failure in unavailable', () => {
  expect(failureBeforeAnswer(attempt({ timedOut: 'connect' })).code).toBe('upstream_timeout');
  expect(failureBeforeAnswer(attempt({ connected: true, timedOut: 'first_byte' })).code).toBe('upstream_timeout');
  expect(failureBeforeAnswer(attempt({ connected: true })).code).toBe('upstream_unavailable');
  expect(failureMidAnswer(attempt({ connected: true, timedOut: 'idle' })).code).toBe('upstream_timeout');
  expect(failureMidAnswer(attempt({ connected: true })).code).toBe('upstream_unavailable');
});
