/**
 * Replay of what no worker answered: real worker processes SIGKILLed while requests they had read are
 * in flight. With three workers and 20 concurrent requests of 150 ms, two kills cost no request: each
 * request the dead worker had read is run once more on another worker, counted as
 * `chatgate_retries_total{reason="replayed"}`. A provider with `replay: false` fails them as
 * before. (A stream already relaying when its worker dies ends with the SSE error event: faults.test.ts.)
 */
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { bearer, chatBody, request, type RawResponse } from '../helpers/http';
import { scrape } from '../helpers/metrics';
import { startWorker, type WorkerProcess } from '../helpers/processes';
import { eventually } from '../helpers/time';

const LATENCY_MS = 150;

/** Every sample of a counter with these labels, summed over the others. */
function total(metrics: string, name: string, labels: Record<string, string>): number {
  let sum = 0;
  for (const line of metrics.split('\n')) {
    if (!line.startsWith(`${name}{`)) continue;
    if (!Object.entries(labels).every(([label, value]) => line.includes(`${label}="${value}"`))) continue;
    sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

interface Loaded {
  results: Array<{ id: string; response: RawResponse }>;
  stop: () => Promise<void>;
}

/** `clients` clients sending back to back until stopped, each request with its own id. */
function load(gw: TestGateway, key: string, model: string, clients: number): Loaded {
  const results: Loaded['results'] = [];
  let running = true;
  let sent = 0;
  const client = async () => {
    while (running) {
      const id = `${model.replace('/', '-')}-${sent++}`;
      results.push({ id, response: await request(gw.url, { ca: gw.ca, headers: { ...bearer(key), 'x-request-id': id }, body: chatBody({ model }) }) });
    }
  };
  const all = Promise.all(Array.from({ length: clients }, client));
  return {
    results,
    stop: async () => {
      running = false;
      await all;
    },
  };
}

/** Kills a worker once it holds requests it has read and not answered (its reports lag; the latency does not). */
async function killWhileBusy(victim: WorkerProcess): Promise<void> {
  const before = victim.received.length;
  await eventually(() => (victim.received.length >= before + 3 ? true : undefined), 5000);
  victim.child.kill('SIGKILL');
  await new Promise((resolve) => victim.child.once('exit', resolve));
}

let workers: WorkerProcess[];
let gw: TestGateway;
let key: string;

beforeAll(async () => {
  workers = await Promise.all([0, 1, 2, 3, 4].map(() => startWorker({ latencyMs: LATENCY_MS })));
  gw = await startTestGateway({
    upstream: { health: { enabled: false }, ejection: { consecutiveFailures: 1, baseMs: 60_000, maxMs: 60_000 } },
    providers: {
      pool: { workers: workers.slice(0, 3).map((w) => w.url) },
      once: { workers: workers.slice(3, 5).map((w) => w.url), replay: false },
    },
  });
  ({ key } = await gw.issueKey());
});
afterAll(async () => {
  await gw?.stop();
  await Promise.all(workers.map((w) => w.stop()));
});

test('two of three workers killed under 20 concurrent requests of 150 ms: no request fails; each one they had read is replayed once', async () => {
  const running = load(gw, key, 'pool/echo', 20);
  const [first, second] = [workers[0]!, workers[1]!];
  await killWhileBusy(first);
  // The second kill once the first one's replays are answered: a request replayed onto a worker that
  // dies too is not sent a third time, and fails.
  const afterFirst = running.results.length;
  await eventually(() => (running.results.length >= afterFirst + 40 ? true : undefined), 10_000);
  await killWhileBusy(second);
  await eventually(() => (running.results.length >= 120 ? true : undefined), 20_000);
  await running.stop();

  const failures = running.results.filter((r) => r.response.status !== 200).map((r) => ({ id: r.id, status: r.response.status, body: r.response.body.slice(0, 200) }));
  expect(failures).toEqual([]);
  // The requests the dead workers had read and not answered were answered all the same, by another
  // worker: read by two workers, never by three; no more of them than replays (a worker killed
  // before it could report a request it read leaves that one's replay uncounted here).
  const metrics = await scrape(gw.adminUrl);
  const replayed = total(metrics, 'chatgate_retries_total', { provider: 'pool', reason: 'replayed' });
  expect(replayed).toBeGreaterThanOrEqual(2);
  expect(total(metrics, 'chatgate_upstream_retries_total', { provider: 'pool', reason: 'replayed' })).toBe(replayed); // the same, by worker
  const readers = (id: string) => workers.slice(0, 3).filter((w) => w.received.includes(id)).length;
  const readByTwo = await eventually(() => {
    const count = running.results.filter(({ id }) => readers(id) === 2).length;
    return count >= 1 ? count : undefined; // the survivors' reports trail their answers
  }, 5000);
  expect(readByTwo).toBeLessThanOrEqual(replayed);
  expect(running.results.filter(({ id }) => readers(id) > 2)).toEqual([]);
});

test('replay: false: the requests the killed worker had read fail as before (502 upstream_unavailable), none replayed', async () => {
  const running = load(gw, key, 'once/echo', 10);
  const victim = workers[3]!;
  await killWhileBusy(victim);
  await eventually(() => (running.results.length >= 40 ? true : undefined), 20_000);
  await running.stop();
  const failures = running.results.filter((r) => r.response.status !== 200);
  expect(failures.length).toBeGreaterThanOrEqual(1);
  for (const failure of failures) {
    expect(failure.response.status).toBe(502);
    expect(failure.response.json<{ error: { code: string } }>().error.code).toBe('upstream_unavailable');
  }
  expect(total(await scrape(gw.adminUrl), 'chatgate_retries_total', { provider: 'once', reason: 'replayed' })).toBe(0);
});
