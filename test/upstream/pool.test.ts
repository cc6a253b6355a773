import http from 'node:http';
import { ENDPOINT_PATHS, ENDPOINTS } from '../../src/common/endpoints';
import { GatewayError } from '../../src/errors';
import { Pool, type WorkerState } from '../../src/upstream/pool';
import type { Worker } from '../../src/upstream/worker';

const fakeWorker = (label: string, maxConcurrent?: number): Worker => ({
  label,
  base: `http://${label}`,
  chatCompletionsUrl: `http://${label}/v1/chat/completions`,
  proxyTargets: Object.fromEntries(ENDPOINTS.map((endpoint) => [endpoint, { protocol: 'http:', host: label, hostname: label, port: '80', path: ENDPOINT_PATHS[endpoint] }])) as Worker['proxyTargets'],
  agent: new http.Agent(),
  weight: 1,
  maxConcurrent,
});

function makePool(workers: Worker[], overrides: { queueSize?: number; queueTimeoutMs?: number; failures?: number } = {}) {
  let clock = 1_000_000;
  const ejections: Array<[string, number]> = [];
  const pool = new Pool(
    workers,
    {
      queue: { size: overrides.queueSize ?? 10, timeoutMs: overrides.queueTimeoutMs ?? 200 },
      ejection: { consecutiveFailures: overrides.failures ?? 2, baseMs: 1000, maxMs: 5000 },
    },
    { ejected: (state, forMs) => ejections.push([state.worker.label, forMs]) },
    () => clock,
  );
  return { pool, ejections, advance: (ms: number) => (clock += ms) };
}

const codeOf = async (promise: Promise<unknown>) => {
  try {
    await promise;
    return 'resolved';
  } catch (err) {
    return (err as GatewayError).code;
  }
};

test('picks the worker with the fewest outstanding requests and counts them', async () => {
  const { pool } = makePool([fakeWorker('a'), fakeWorker('b')]);
  const first = await pool.acquire();
  const second = await pool.acquire();
  expect(first).not.toBe(second);
  expect([first.outstanding, second.outstanding]).toEqual([1, 1]);
  pool.release(first, 'success');
  expect(await pool.acquire()).toBe(first);
});

test('excluded workers (already tried) are not picked; with none left it is 503 upstream_unavailable', async () => {
  const { pool } = makePool([fakeWorker('a'), fakeWorker('b')]);
  const a = await pool.acquire();
  pool.release(a, 'failure');
  const b = await pool.acquire(new Set([a]));
  expect(b).not.toBe(a);
  expect(await codeOf(pool.acquire(new Set([a, b])))).toBe('upstream_unavailable');
});

test('consecutive failures eject a worker for a backoff that doubles while it keeps failing, up to the cap', async () => {
  const { pool, ejections, advance } = makePool([fakeWorker('a')], { failures: 2 });
  const fail = async () => pool.release(await pool.acquire(), 'failure');
  await fail();
  expect(ejections).toEqual([]);
  await fail();
  expect(ejections).toEqual([['a', 1000]]);
  expect(await codeOf(pool.acquire())).toBe('upstream_unavailable');
  advance(1000);
  await fail();
  await fail();
  advance(2000);
  await fail();
  await fail();
  advance(4000);
  await fail();
  await fail();
  expect(ejections.map(([, ms]) => ms)).toEqual([1000, 2000, 4000, 5000]);
});

test('a success resets the failure count and the backoff', async () => {
  const { pool, ejections, advance } = makePool([fakeWorker('a')], { failures: 2 });
  const run = async (outcome: 'success' | 'failure') => pool.release(await pool.acquire(), outcome);
  await run('failure');
  await run('success');
  await run('failure');
  expect(ejections).toHaveLength(0);
  await run('failure');
  advance(1000);
  await run('success');
  await run('failure');
  await run('failure');
  expect(ejections.map(([, ms]) => ms)).toEqual([1000, 1000]);
});

test('neutral outcomes (a client that left) count neither way', async () => {
  const { pool, ejections } = makePool([fakeWorker('a')], { failures: 1 });
  pool.release(await pool.acquire(), 'neutral');
  pool.release(await pool.acquire(), 'neutral');
  expect(ejections).toHaveLength(0);
});

test('an unhealthy worker gets no traffic until it is healthy again', async () => {
  const { pool } = makePool([fakeWorker('a'), fakeWorker('b')]);
  const [a, b] = pool.workers as [WorkerState, WorkerState];
  pool.setHealthy(a, false);
  const served = [];
  for (let i = 0; i < 4; i++) {
    const state = await pool.acquire();
    served.push(state.worker.label);
    pool.release(state, 'success');
  }
  expect(served).toEqual([b.worker.label, b.worker.label, b.worker.label, b.worker.label]);
  expect(await pool.acquire()).toBe(b);
  pool.setHealthy(a, true);
  expect(await pool.acquire()).toBe(a);
  expect(pool.availableWorkers()).toHaveLength(2);
});

test('at maxConcurrent, requests wait in the queue and are served in order as workers free up', async () => {
  const { pool } = makePool([fakeWorker('a', 1)], { queueSize: 2, queueTimeoutMs: 5000 });
  const holder = await pool.acquire();
  const order: string[] = [];
  const first = pool.acquire().then((s) => {
    order.push('first');
    return s;
  });
  const second = pool.acquire().then((s) => {
    order.push('second');
    return s;
  });
  expect(pool.queued).toBe(2);
  expect(await codeOf(pool.acquire())).toBe('upstream_overloaded'); // the queue is full
  pool.release(holder, 'success');
  pool.release(await first, 'success');
  await second;
  expect(order).toEqual(['first', 'second']);
  expect(pool.queued).toBe(0);
});

test('a queued request past its deadline gets 503 upstream_overloaded with Retry-After', async () => {
  const { pool } = makePool([fakeWorker('a', 1)], { queueSize: 5, queueTimeoutMs: 30 });
  await pool.acquire();
  const waited = await pool.acquire().catch((err: GatewayError) => err);
  expect(waited).toBeInstanceOf(GatewayError);
  expect((waited as GatewayError).code).toBe('upstream_overloaded');
  expect((waited as GatewayError).headers['Retry-After']).toBe('1');
  expect(pool.queued).toBe(0);
});

test('closing the pool answers every waiter', async () => {
  const { pool } = makePool([fakeWorker('a', 1)], { queueTimeoutMs: 60_000 });
  await pool.acquire();
  const waiting = codeOf(pool.acquire());
  pool.close();
  expect(await waiting).toBe('upstream_unavailable');
});

test('a client that goes away while queued gives its place up at once', async () => {
  const { pool } = makePool([fakeWorker('a', 1)], { queueSize: 1, queueTimeoutMs: 5000 });
  const a = await pool.acquire();
  let leave: (() => void) | undefined;
  const gone = pool.acquire(undefined, (giveUp) => (leave = giveUp));
  expect(pool.queued).toBe(1);
  leave!();
  expect(await codeOf(gone)).toBe('upstream_overloaded');
  expect(pool.queued).toBe(0);
  const next = pool.acquire(); // the place is free again: queued, not refused
  expect(pool.queued).toBe(1);
  pool.release(a, 'success');
  expect(await next).toBe(a);
});

test('a queued retry that may not use the free worker does not hold up the requests behind it', async () => {
  const { pool } = makePool([fakeWorker('a', 1), fakeWorker('b', 1)], { queueSize: 5, queueTimeoutMs: 5000 });
  const a = await pool.acquire();
  const b = await pool.acquire();
  const retryNotOnA = pool.acquire(new Set([a]));
  const anyWorker = pool.acquire();
  pool.release(a, 'success');
  expect(await anyWorker).toBe(a);
  expect(pool.queued).toBe(1);
  pool.release(b, 'success');
  expect(await retryNotOnA).toBe(b);
});
