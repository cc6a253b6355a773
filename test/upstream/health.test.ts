/** Active health checks against a real HTTP server whose answers the test controls. */
import http from 'node:http';
import { parseConfig } from '../../src/config';
import { HealthChecker, probe } from '../../src/upstream/health';
import { buildProviders, closeProviders, type ProviderTable } from '../../src/upstream/providers';
import { listenOnLoopback } from '../helpers/net';

let server: http.Server;
let base: string;
let healthStatus = 200;
let models: unknown = { object: 'list', data: [{ id: 'alpha' }, { id: 'beta' }] };
let providers: ProviderTable;

beforeAll(async () => {
  server = http.createServer((req, res) => {
    if (req.url === '/healthy') return void res.writeHead(healthStatus).end();
    if (req.url === '/v1/models') return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(models));
    if (req.url === '/slow') return; // never answers
    res.writeHead(404).end();
  });
  base = await listenOnLoopback(server);
});
afterAll(async () => {
  closeProviders(providers);
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
});

test('probe: a 2xx in time is healthy; an error status, a refused port or silence is not', async () => {
  expect(await probe(`${base}/healthy`, 500)).toBe(true);
  expect(await probe(`${base}/missing`, 500)).toBe(false);
  expect(await probe(`${base}/slow`, 100)).toBe(false);
  expect(await probe('http://127.0.0.1:1/health', 500)).toBe(false);
});

test('a worker turns unhealthy after the threshold of failed checks, and healthy again after good ones', async () => {
  const config = parseConfig({
    providers: {
      p: { workers: [base], upstream: { health: { path: '/healthy', intervalMs: 60_000, healthyThreshold: 2, unhealthyThreshold: 2 } } },
      named: { workers: [base], models: ['fixed'] },
    },
  });
  providers = buildProviders(config, { ejected: () => undefined });
  const changes: Array<[string, boolean]> = [];
  const checker = new HealthChecker(providers, { changed: (provider, _state, healthy) => changes.push([provider.name, healthy]) });
  const state = providers.get('p')!.pool.workers[0]!;

  await checker.checkAll();
  expect(state.healthy).toBe(true);
  expect(state.models).toEqual(['alpha', 'beta']);
  expect(providers.get('named')!.pool.workers[0]!.models).toEqual([]); // named in config: not asked

  healthStatus = 503;
  await checker.checkAll();
  expect(state.healthy).toBe(true); // one failure is below the threshold
  await checker.checkAll();
  expect(state.healthy).toBe(false);
  expect(providers.get('p')!.pool.availableWorkers()).toHaveLength(0);

  healthStatus = 200;
  models = 'not json at all';
  await checker.checkAll();
  expect(state.healthy).toBe(false);
  await checker.checkAll();
  expect(state.healthy).toBe(true);
  expect(state.models).toEqual(['alpha', 'beta']); // a bad model list keeps the last good one
  expect(changes.filter(([name]) => name === 'p')).toEqual([
    ['p', false],
    ['p', true],
  ]);
  checker.stop();
});
