import http from 'node:http';
import type { AddressInfo } from 'node:net';
import express from 'express';
import { createContext } from '../../src/context';
import { createMetrics } from '../../src/telemetry/metrics';
import { limitRate } from '../../src/ratelimit/limit-rate';
import { RateLimiter } from '../../src/ratelimit/limiter';
import { MemoryRateLimitStore } from '../../src/ratelimit/memory';
import { keyRecord } from '../fakes/key-record';
import { eventually, sleep } from '../helpers/time';

const key = keyRecord({ requestsPerMinute: null, tokensPerMinute: null, maxConcurrent: 1 });

/** A store that answers admissions late (a slow Redis), counts the slots it holds and the admissions it has answered. */
class SlowStore extends MemoryRateLimitStore {
  held = 0;
  answered = 0;
  override async admit(...args: Parameters<MemoryRateLimitStore['admit']>) {
    await sleep(150);
    const admission = await super.admit(...args);
    if (admission.allowed) this.held++;
    this.answered++;
    return admission;
  }
  override async release(...args: Parameters<MemoryRateLimitStore['release']>) {
    this.held--;
    return super.release(...args);
  }
}

test('a client that leaves while its admission is awaited does not keep its concurrency slot', async () => {
  const store = new SlowStore();
  const limiter = new RateLimiter(store, { store: 'memory', failOpen: false, timeoutMs: 1000 }, { storeFailed: () => undefined, storeRecovered: () => undefined });
  const app = express();
  app.use((_req, res, next) => {
    createContext(res, performance.now()).key = key;
    next();
  });
  app.post('/', limitRate(limiter, createMetrics()), (_req, res) => {
    res.json({ ok: true });
  });
  app.use((err: { status?: number }, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
    res.status(err.status ?? 500).end();
  });
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  try {
    const leaving = http.request(url, { method: 'POST' });
    leaving.on('error', () => undefined);
    leaving.end();
    await sleep(30);
    leaving.destroy(); // gone before the store admits it

    // The store admits it (at 150 ms); the release follows as the answer is handled (microtasks), so a
    // turn after the answer the slot is given back, however late the store was.
    await eventually(() => (store.answered === 1 ? true : undefined));
    await new Promise((resolve) => setImmediate(resolve));
    expect(store.held).toBe(0);
    const next = await fetch(url, { method: 'POST' });
    expect(next.status).toBe(200); // the only slot (maxConcurrent 1) is free
  } finally {
    server.close();
    await store.close();
  }
});
