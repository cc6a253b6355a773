/**
 * Model aliases end to end: a public name for configured models, a weighted split (a canary), a
 * fallback when the first pool is down, the key's allow-list by alias name and by target, what the
 * access line, metrics and /v1/models say; and a SIGHUP that swaps an alias under load.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import YAML from 'yaml';
import { issueKey } from '../../src/auth/issue';
import { SqliteKeyStore } from '../../src/store/sqlite/store';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { bearer, chatBody, openaiClient, request } from '../helpers/http';
import { sample, scrape } from '../helpers/metrics';
import { startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';
import { eventually } from '../helpers/time';

/** Runs `send` from `concurrency` loops until `count` requests are done; every status, in order of completion. */
async function load(count: number, concurrency: number, send: () => Promise<number>): Promise<number[]> {
  const statuses: number[] = [];
  let started = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (started < count) {
        started++;
        statuses.push(await send().catch(() => 0));
      }
    }),
  );
  return statuses;
}

const failures = (statuses: number[]) => statuses.filter((status) => status !== 200);

describe('in one gateway', () => {
  let canaryA: WorkerProcess;
  let canaryB: WorkerProcess;
  let primary: WorkerProcess;
  let backup: WorkerProcess;
  let gw: TestGateway;
  let key: string;

  beforeAll(async () => {
    [canaryA, canaryB, primary, backup] = await Promise.all([startWorker(), startWorker(), startWorker(), startWorker()]);
    gw = await startTestGateway({
      providers: {
        stable: { workers: [canaryA.url] },
        canary: { workers: [canaryB.url] },
        primary: { workers: [primary.url], upstream: { health: { intervalMs: 200, timeoutMs: 150, unhealthyThreshold: 1 } } },
        backup: { workers: [backup.url] },
      },
      models: {
        aliases: {
          'gpt-4o': { targets: [{ model: 'stable/echo', weight: 90 }, { model: 'canary/mock-1', weight: 10 }] },
          resilient: { targets: [{ model: 'primary/echo' }], fallback: ['backup/mock-1'] },
          fast: 'stable/echo',
        },
      },
      log: { level: 'info', destination: path.join(os.tmpdir(), `chatgate-aliases-${process.pid}.log`) },
    });
    ({ key } = await gw.issueKey());
  }, 30_000);
  afterAll(async () => {
    await gw?.stop();
    await Promise.all([canaryA, canaryB, primary, backup].map((worker) => worker?.stop()));
    rmSync(path.join(os.tmpdir(), `chatgate-aliases-${process.pid}.log`), { force: true });
  });

  test('weights split 1,000 requests 90/10 within tolerance; each worker gets its own model name', async () => {
    await Promise.all([canaryA.clear(), canaryB.clear()]);
    const statuses = await load(1000, 16, async () => (await request(gw.url, { ca: gw.ca, headers: bearer(key), body: chatBody({ model: 'gpt-4o' }) })).status);
    expect(failures(statuses)).toEqual([]);
    const [stable, canary] = [(await canaryA.requests()).length, (await canaryB.requests()).length];
    expect(stable + canary).toBe(1000);
    // Binomial(1000, 0.1): standard deviation 9.5; 100 ± 40 is more than four of them.
    expect(canary).toBeGreaterThanOrEqual(60);
    expect(canary).toBeLessThanOrEqual(140);
    expect(JSON.parse((await canaryA.requests())[0]!.body).model).toBe('echo');
    expect(JSON.parse((await canaryB.requests())[0]!.body).model).toBe('mock-1');
  });

  test('the answer, the access line and the token metric name both the alias and the target', async () => {
    const client = openaiClient(gw.url, key, gw.ca);
    const completion = await client.chat.completions.create({ model: 'fast', messages: [{ role: 'user', content: 'which?' }] }, { headers: { 'x-request-id': 'alias-line-1' } });
    expect(completion.choices[0]!.message.content).toMatch(/^echo: which\?/);
    const line = await eventually(async () => {
      const lines = readFileSync(path.join(os.tmpdir(), `chatgate-aliases-${process.pid}.log`), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
      return lines.find((entry) => entry.requestId === 'alias-line-1');
    });
    expect(line).toMatchObject({ endpoint: 'chat', model: 'fast', alias: 'fast', provider: 'stable', target: 'stable/echo', status: 200 });
    const text = await scrape(gw.adminUrl);
    expect(sample(text, 'chatgate_tokens_total{endpoint="chat",provider="stable",model="echo",alias="fast",kind="completion"}')).toBeGreaterThan(0);
  });

  test("the key's allow-list holds an alias by its name or by its target; /v1/models lists the aliases it may use", async () => {
    const byName = await gw.issueKey({ name: 'by alias name', models: ['fast'] });
    const byTarget = await gw.issueKey({ name: 'by target', models: ['canary/*'] });
    const neither = await gw.issueKey({ name: 'neither', models: ['backup/*'] });
    const send = (k: string, model: string) => request(gw.url, { ca: gw.ca, headers: bearer(k), body: chatBody({ model }) });

    expect((await send(byName.key, 'fast')).status).toBe(200);
    expect((await send(byName.key, 'stable/echo')).status).toBe(403); // the name, not what it points at
    expect((await send(byTarget.key, 'gpt-4o')).status).toBe(200); // only its allowed target: canary
    await canaryB.clear();
    for (let i = 0; i < 5; i++) expect((await send(byTarget.key, 'gpt-4o')).status).toBe(200);
    expect(await canaryB.requests()).toHaveLength(5);
    const refused = await send(neither.key, 'fast');
    expect(refused.status).toBe(403);
    expect(refused.json().error.code).toBe('model_not_allowed');

    const ids = async (k: string) => (await request(gw.url, { ca: gw.ca, method: 'GET', path: '/v1/models', headers: bearer(k) })).json<{ data: Array<{ id: string }> }>().data.map((m) => m.id);
    expect(await ids(byName.key)).toEqual(['fast']);
    expect(await ids(byTarget.key)).toEqual(expect.arrayContaining(['canary/echo', 'gpt-4o']));
    expect(await ids(byTarget.key)).not.toContain('fast');
    expect(await ids(key)).toEqual(expect.arrayContaining(['gpt-4o', 'resilient', 'fast', 'stable/echo']));
    expect((await request(gw.url, { ca: gw.ca, method: 'GET', path: '/v1/models/gpt-4o', headers: bearer(key) })).json()).toMatchObject({ id: 'gpt-4o', object: 'model' });
  });

  test('a name without a provider that is no alias is a malformed model: 400 invalid_body', async () => {
    const response = await request(gw.url, { ca: gw.ca, headers: bearer(key), body: chatBody({ model: 'gpt-5' }) });
    expect(response.status).toBe(400);
    expect(response.json().error).toMatchObject({ code: 'invalid_body', param: 'model' });
    expect(response.json().error.message).toContain('<provider>/<model_name>');
  });

  test('the first pool down: its requests go to the fallback, and not one fails', async () => {
    const send = async () => (await request(gw.url, { ca: gw.ca, headers: bearer(key), body: chatBody({ model: 'resilient' }) })).status;
    expect(failures(await load(50, 8, send))).toEqual([]);
    expect(await primary.requests()).toHaveLength(50);
    await primary.stop(); // connections refused: before any byte reached it, so the fallback takes each

    const whileRefused = await load(200, 8, send);
    expect(failures(whileRefused)).toEqual([]);
    expect(await backup.requests()).toHaveLength(200);
    expect(JSON.parse((await backup.requests())[0]!.body).model).toBe('mock-1');

    // Once the health check has marked it down, the pool has no worker: the fallback at once.
    await eventually(async () => (sample(await scrape(gw.adminUrl), `chatgate_worker_up{provider="primary",worker="127.0.0.1:${primary.port}"}`) === 0 ? true : undefined));
    const whileDown = await load(100, 8, send);
    expect(failures(whileDown)).toEqual([]);
    expect(sample(await scrape(gw.adminUrl), 'chatgate_alias_fallbacks_total{alias="resilient",provider="primary"}')).toBe(300);
  });
});

describe('a reload (SIGHUP)', () => {
  let before: WorkerProcess;
  let after: WorkerProcess;
  let dir: string;
  let gateway: GatewayProcess;
  let key: string;

  beforeAll(async () => {
    [before, after] = await Promise.all([startWorker(), startWorker()]);
    dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-alias-reload-'));
    mkdirSync(path.join(dir, 'alias'));
    ({ key } = await issueKey(new SqliteKeyStore(path.join(dir, 'alias', 'chatgate.db')), { name: 'reload' }));
    gateway = await startGatewayProcess(dir, 'alias', { providers: { old: { workers: [before.url] }, new: { workers: [after.url] } }, models: { aliases: { 'gpt-4o': 'old/echo' } } });
  }, 30_000);
  afterAll(async () => {
    if (gateway) await stopProcess(gateway.child);
    await Promise.all([before?.stop(), after?.stop()]);
    rmSync(dir, { recursive: true, force: true });
  });

  test('swaps an alias under load with no failed request', async () => {
    const configFile = path.join(dir, 'alias.yaml');
    const config = YAML.parse(readFileSync(configFile, 'utf8'));
    const send = async () => (await request(gateway.url, { ca: gateway.ca, headers: bearer(key), body: chatBody({ model: 'gpt-4o' }) })).status;
    const running = load(1500, 8, send);
    await before.reported(100, 10_000);
    writeFileSync(configFile, YAML.stringify({ ...config, listen: { host: '127.0.0.1', port: gateway.port }, admin: { host: '127.0.0.1', port: Number(new URL(gateway.adminUrl).port) }, models: { aliases: { 'gpt-4o': 'new/mock-1' } } }));
    gateway.child.kill('SIGHUP');
    await eventually(() => (gateway.log.some((line) => line.msg === 'config reloaded') ? true : undefined), 10_000);
    const statuses = await running;
    expect(failures(statuses)).toEqual([]);
    // Each worker reports what it received on its stdout, which may trail the answers.
    await eventually(() => (before.received.length + after.received.length === 1500 ? true : undefined));
    expect(before.received.length).toBeGreaterThanOrEqual(100);
    expect(after.received.length).toBeGreaterThan(0);
    // After the reload, the alias is the new target's.
    const [seenBefore, seenAfter] = [before.received.length, after.received.length];
    expect(await send()).toBe(200);
    await after.reported(seenAfter + 1);
    expect(before.received.length).toBe(seenBefore);
    expect(JSON.parse((await after.requests()).at(-1)!.body).model).toBe('mock-1');
  });
});
