/**
 * What a graceful stop says about Redis: a gateway process with Redis for its limits and quotas,
 * Redis healthy throughout, stopped with SIGTERM five times over: no line says Redis is unreachable,
 * none says it answers again (there was nothing to answer again after), and each run ends in `stopped`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startGatewayProcess } from '../helpers/gateway-process';
import { bearer, chatBody, request } from '../helpers/http';
import { startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';
import { sharedRedisUrl } from '../helpers/redis';

const TOKEN = 'shutdown-logs-admin-token-0123456789';
let dir: string;
let worker: WorkerProcess;

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-shutdown-logs-'));
  worker = await startWorker();
});
afterAll(async () => {
  await worker?.stop();
  rmSync(dir, { recursive: true, force: true });
});

test('SIGTERM with Redis healthy: no "unreachable", no "answers again", five times over', async () => {
  const redisUrl = await sharedRedisUrl();
  for (let run = 0; run < 5; run++) {
    const gateway = await startGatewayProcess(dir, `run-${run}`, {
      admin: { host: '127.0.0.1', port: 0, token: TOKEN },
      providers: { mock: { workers: [worker.url] } },
      rateLimit: { store: 'redis', url: redisUrl },
    });
    const made = await request(gateway.adminUrl, { path: '/admin/api/keys', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify({ name: 'k', quota: { tokensPerDay: 100_000 } }) });
    expect((await request(gateway.url, { ca: gateway.ca, headers: bearer(made.json<{ key: string }>().key), body: chatBody({ max_tokens: 5 }) })).status).toBe(200);
    await stopProcess(gateway.child);
    const said = gateway.log.map((line) => String(line.msg));
    expect({ run, redisLines: said.filter((msg) => /unreachable|answers again/.test(msg)) }).toEqual({ run, redisLines: [] });
    expect(said).toContain('stopped');
  }
}, 120_000);
