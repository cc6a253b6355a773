/**
 * Quotas across replicas: two gateway processes on one PostgreSQL, their quota counters in the key
 * store, then in Redis. An account's daily quota reached through both replicas is enforced by both
 * within a second; the refusal is 429 insufficient_quota (OpenAI's type and code) with Retry-After
 * until the UTC day turns; a stream already under way is not cut.
 */
import https from 'node:https';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { bearer, chatBody, request } from '../helpers/http';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres';
import { startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';
import { sharedRedisUrl } from '../helpers/redis';
import { eventually } from '../helpers/time';

const TOKEN = 'quota-test-admin-token-0123456789';
const QUOTA = 400;
let worker: WorkerProcess;
let dir: string;

beforeAll(async () => {
  worker = await startWorker({ tokensPerSecond: 20 });
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-quota-'));
});
afterAll(async () => {
  await worker?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe.each([
  ['the key store', false],
  ['Redis', true],
])('quota counters in %s', (_where, withRedis) => {
  let database: TestDatabase;
  let replicas: GatewayProcess[];

  beforeAll(async () => {
    database = await createTestDatabase();
    const settings = {
      admin: { host: '127.0.0.1', port: 0, token: TOKEN },
      providers: { mock: { workers: [worker.url] } },
      keyStore: { type: 'postgres', url: database.url },
      quota: { syncMs: 200 },
      ...(withRedis ? { rateLimit: { store: 'redis', url: await sharedRedisUrl() } } : {}),
    };
    replicas = await Promise.all(['a', 'b'].map((name) => startGatewayProcess(dir, `${name}-${withRedis ? 'redis' : 'pg'}`, settings)));
  });
  afterAll(async () => {
    await Promise.all((replicas ?? []).map((replica) => stopProcess(replica.child)));
    await database?.drop();
  });

  const admin = (method: string, apiPath: string, body?: unknown) =>
    request(replicas[0]!.adminUrl, { method, path: `/admin/api${apiPath}`, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
  // Each asks for at most 20 tokens: what it reserves fits in the quota until the quota is nearly spent.
  const chat = (replica: GatewayProcess, key: string, extra: Record<string, string> = {}) => request(replica.url, { ca: replica.ca, headers: { ...bearer(key), ...extra }, body: chatBody({ max_tokens: 20 }) });

  test('an account quota reached through both replicas is enforced by both within a second; a stream under way is not cut', async () => {
    const account = (await admin('POST', '/accounts', { name: `metered-${withRedis ? 'redis' : 'pg'}`, quota: { tokensPerDay: QUOTA } })).json<{ id: string }>().id;
    const first = (await admin('POST', '/keys', { name: 'first', account })).json<{ key: string }>().key;
    const second = (await admin('POST', '/keys', { name: 'second', account })).json<{ key: string }>().key;
    const [a, b] = replicas as [GatewayProcess, GatewayProcess];

    // A long stream, admitted before the quota is reached.
    const stream = new Promise<{ status: number; text: string }>((resolve, reject) => {
      const req = https.request(`${a.url}/v1/chat/completions`, { method: 'POST', ca: a.ca, servername: 'localhost', agent: false, headers: { ...bearer(first), 'x-mock-tokens': '40' } }, (res) => {
        let text = '';
        res.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      });
      req.on('error', reject);
      req.end(chatBody({ stream: true, max_tokens: 40 }));
    });

    // Spend the quota through both replicas, with both keys, until one refuses.
    const fast = { 'x-mock-tokens': '20', 'x-mock-tokens-per-second': '100000' };
    let refusedAt = 0;
    for (let i = 0; i < 400 && !refusedAt; i++) {
      const response = await chat(i % 2 ? b : a, i % 3 ? first : second, fast);
      if (response.status === 429) refusedAt = performance.now();
      else expect(response.status).toBe(200);
    }
    expect(refusedAt).toBeGreaterThan(0);
    // Within a second, both replicas refuse both keys of the account. A request still admitted meanwhile
    // (room another replica's lease or the last sync left) is answered at once, so that the time
    // measured is the gateway's, not a slow worker's.
    await eventually(async () => {
      const answers = await Promise.all([chat(a, first, fast), chat(a, second, fast), chat(b, first, fast), chat(b, second, fast)]);
      return answers.every((response) => response.status === 429) ? answers : undefined;
    }, 3000);
    expect(performance.now() - refusedAt).toBeLessThan(1500);
    const refused = await chat(b, second);
    expect(refused.json()).toEqual({ error: { message: expect.stringContaining('quota'), type: 'insufficient_quota', param: null, code: 'insufficient_quota' } });
    const untilMidnight = (Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth(), new Date().getUTCDate() + 1) - Date.now()) / 1000;
    expect(Math.abs(Number(refused.headers['retry-after']) - untilMidnight)).toBeLessThan(5);

    const streamed = await stream;
    expect(streamed.status).toBe(200);
    expect(streamed.text.endsWith('data: [DONE]\n\n')).toBe(true); // the stream under way finished whole

    // Another account is not touched.
    const other = (await admin('POST', '/accounts', { name: `unmetered-${withRedis ? 'redis' : 'pg'}` })).json<{ id: string }>().id;
    const otherKey = (await admin('POST', '/keys', { name: 'other', account: other })).json<{ key: string }>().key;
    expect((await chat(b, otherKey)).status).toBe(200);
  }, 60_000);
});
