/**
 * A flood of guessed keys: each is refused and counted in chatgate_auth_failures_total, none reaches
 * a worker, and a guess repeated is answered from the cache of unknown keys without asking the store
 * again. (That this cache is bounded, and that concurrent misses share one store lookup, is shown with
 * a counting store in test/auth/cache.test.ts.)
 */
import { generateKey } from '../../src/auth/keys';
import { gatewayWithWorker } from '../helpers/fixture';
import { bearer, chatBody, request } from '../helpers/http';
import { sample, scrape } from '../helpers/metrics';

const f = gatewayWithWorker({ auth: { createFirstKey: false, negativeCacheSize: 100 } });

test('guessed keys: all refused, all counted, a repeated guess answered from the cache, and real keys still served', async () => {
  const before = await scrape(f.gw.adminUrl);
  const guesses = Array.from({ length: 2000 }, () => generateKey());
  const statuses: number[] = [];
  for (let i = 0; i < guesses.length; i += 100) {
    statuses.push(...(await Promise.all(guesses.slice(i, i + 100).map(async (guess) => (await request(f.gw.url, { ca: f.gw.ca, headers: bearer(guess), body: chatBody() })).status))));
  }
  const repeated = generateKey();
  const guessAgain = async () => (await request(f.gw.url, { ca: f.gw.ca, headers: bearer(repeated), body: chatBody() })).status;
  const repeats = [await guessAgain(), ...(await Promise.all(Array.from({ length: 199 }, guessAgain)))];
  const after = await scrape(f.gw.adminUrl);
  const delta = (series: string) => sample(after, series) - sample(before, series);

  expect(statuses).toEqual(Array(2000).fill(401));
  expect(repeats).toEqual(Array(200).fill(401));
  expect(delta('chatgate_auth_failures_total{reason="unknown"}')).toBe(2200);
  expect(delta('chatgate_key_cache_misses_total')).toBe(2000 + 1); // every new guess once, the repeated one once
  expect(delta('chatgate_key_cache_hits_total')).toBe(199);
  expect((await request(f.gw.url, { ca: f.gw.ca, headers: bearer(f.key), body: chatBody() })).status).toBe(200);
  expect(await f.worker.requests()).toHaveLength(1); // no guess reached the worker
}, 60_000); // 2,200 fresh TLS connections: roomy on a loaded machine
