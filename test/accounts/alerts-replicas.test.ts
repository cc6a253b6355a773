/**
 * Quota alerts end to end, on two gateway replicas sharing one PostgreSQL, with a webhook receiver
 * of the test's own on loopback: an account's daily token quota spent through both replicas gives
 * one POST per threshold (0.5, 0.8, 1), no more however many syncs see it (shown by later syncs on
 * each replica telling other accounts' crossings), each soon after its crossing; the admin API lists
 * them; the audit trail has one `alert.sent` each.
 */
import http from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { bearer, chatBody, request } from '../helpers/http';
import { listenOnLoopback } from '../helpers/net';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres';
import { startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';
import { eventually } from '../helpers/time';

const TOKEN = 'alerts-replicas-admin-token-0123456789';
const QUOTA = 2000;
let worker: WorkerProcess;
let database: TestDatabase;
let dir: string;
let replicas: GatewayProcess[] = [];
const received: Array<{ at: number; body: Record<string, unknown> }> = [];
const receiver = http.createServer((req, res) => {
  let text = '';
  req.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
  req.on('end', () => {
    received.push({ at: Date.now(), body: JSON.parse(text) as Record<string, unknown> });
    res.end();
  });
});

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-alerts-'));
  const [receiverUrl] = await Promise.all([listenOnLoopback(receiver), (async () => ([worker, database] = await Promise.all([startWorker(), createTestDatabase()])))()]);
  const settings = {
    admin: { host: '127.0.0.1', port: 0, token: TOKEN },
    providers: { mock: { workers: [worker.url] } },
    keyStore: { type: 'postgres', url: database.url },
    quota: { syncMs: 200 },
    alerts: { webhookUrl: `${receiverUrl}/hook` },
  };
  replicas = await Promise.all(['a', 'b'].map((name) => startGatewayProcess(dir, name, settings)));
});
afterAll(async () => {
  await Promise.all(replicas.map((replica) => stopProcess(replica.child)));
  await worker?.stop();
  await database?.drop();
  receiver.closeAllConnections();
  await new Promise((resolve) => receiver.close(resolve));
  rmSync(dir, { recursive: true, force: true });
});

const admin = (method: string, apiPath: string, body?: unknown) =>
  request(replicas[0]!.adminUrl, { method, path: `/admin/api${apiPath}`, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });

test("an account's daily quota spent through two replicas: one POST per threshold, soon after it, listed and audited once each", async () => {
  const account = (await admin('POST', '/accounts', { name: 'Alerted team', quota: { tokensPerDay: QUOTA } })).json<{ id: string }>().id;
  const key = (await admin('POST', '/keys', { name: 'spender', account })).json<{ key: string }>().key;
  let spentAt = 0;
  for (let i = 0; i < 60; i++) {
    const answer = await request(replicas[i % 2]!.url, { ca: replicas[i % 2]!.ca, headers: { ...bearer(key), 'x-mock-tokens': '100' }, body: chatBody({ max_tokens: 100 }) });
    if (answer.status === 429) break;
    expect(answer.status).toBe(200);
    spentAt = Date.now();
  }
  const ours = () => received.filter((entry) => entry.body.accountId === account);
  await eventually(() => (ours().length >= 3 ? true : undefined), 20_000);
  const lastAt = ours().at(-1)!.at;
  // The control: syncs that came after, twice on each replica, each shown by the POST for a crossing
  // it alone can see (an account of its own, spent through it alone, past half its quota). A sync
  // that told our account's thresholds again would have set off its POST before this one's.
  for (let round = 0; round < 2; round++) {
    for (const [index, replica] of replicas.entries()) {
      const control = (await admin('POST', '/accounts', { name: `control ${round}.${index}`, quota: { tokensPerDay: 200 } })).json<{ id: string }>().id;
      const controlKey = (await admin('POST', '/keys', { name: 'control', account: control })).json<{ key: string }>().key;
      expect((await request(replica.url, { ca: replica.ca, headers: { ...bearer(controlKey), 'x-mock-tokens': '100' }, body: chatBody({ max_tokens: 100 }) })).status).toBe(200);
      await eventually(() => (received.some((entry) => entry.body.accountId === control) ? true : undefined), 20_000);
    }
  }
  expect(ours().map((entry) => entry.body.threshold as number).sort((x, y) => x - y)).toEqual([0.5, 0.8, 1]); // two crossed in one sync go out together, in either order
  for (const { body } of ours()) expect(body).toMatchObject({ event: 'quota.threshold', accountId: account, accountName: 'Alerted team', period: 'day', budget: QUOTA, currency: 'tokens', text: expect.stringContaining('Account “Alerted team” has used') });
  expect(lastAt - spentAt).toBeLessThan(15_000);
  const listed = (await admin('GET', `/accounts/${account}/alerts`)).json<{ data: Array<{ threshold: number; sentAt: string | null }> }>().data;
  expect(listed.map((alert) => alert.threshold).sort((x, y) => x - y)).toEqual([0.5, 0.8, 1]);
  expect(listed.every((alert) => alert.sentAt !== null)).toBe(true);
  const audit = (await admin('GET', `/accounts/${account}/audit`)).json<{ data: Array<{ action: string }> }>().data;
  expect(audit.filter((event) => event.action === 'alert.sent')).toHaveLength(3);
});
