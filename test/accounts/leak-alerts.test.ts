/**
 * A leaked key's owners are told: a key revoked by a leak report (here the admin API's, for other
 * scanners) gives one `key.leaked` POST to the alert webhook (a receiver of the test's own on
 * loopback), naming the key, its account and where it was found, never the key itself; a second
 * report of the same key tells nobody again; the console's alerts list the leak for the account.
 */
import http from 'node:http';
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { request } from '../helpers/http';
import { listenOnLoopback } from '../helpers/net';
import { startWorker, type WorkerProcess } from '../helpers/processes';
import { eventually } from '../helpers/time';

const TOKEN = 'admin-token-for-leak-alerts-0123456789';
let worker: WorkerProcess;
let gw: TestGateway;
const received: string[] = [];
const receiver = http.createServer((req, res) => {
  let text = '';
  req.on('data', (chunk: Buffer) => (text += chunk.toString('utf8')));
  req.on('end', () => {
    received.push(text);
    res.end();
  });
});

beforeAll(async () => {
  const [url, started] = await Promise.all([listenOnLoopback(receiver), startWorker()]);
  worker = started;
  gw = await startTestGateway({ providers: { mock: { workers: [worker.url] } }, admin: { host: '127.0.0.1', port: 0, token: TOKEN }, auth: { createFirstKey: false }, alerts: { webhookUrl: `${url}/hook` } });
});
afterAll(async () => {
  await gw?.stop();
  await worker?.stop();
  receiver.closeAllConnections();
  await new Promise((resolve) => receiver.close(resolve));
});

const admin = (method: string, apiPath: string, body?: unknown) =>
  request(gw.adminUrl, { method, path: `/admin/api${apiPath}`, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });

test("a key revoked as leaked: one key.leaked POST naming it and its account, never the key; the console lists it", async () => {
  const account = (await admin('POST', '/accounts', { name: 'Leaky team' })).json<{ id: string }>().id;
  await admin('POST', `/accounts/${account}/members`, { email: 'leaky-owner@example.com', role: 'owner', password: 'a leaky owner password' });
  const { id, key } = (await admin('POST', '/keys', { name: 'pushed to github', account })).json<{ id: string; key: string }>();
  expect((await admin('POST', '/keys/leaked', { keys: [key] })).json<{ data: Array<{ revoked: boolean }> }>().data[0]?.revoked).toBe(true);
  await eventually(() => (received.length > 0 ? true : undefined), 10_000);
  expect((await admin('POST', '/keys/leaked', { keys: [key] })).json<{ data: Array<{ revoked: boolean }> }>().data[0]?.revoked).toBe(false); // revoked before
  // The control: a key first reported after that second report is told of. A POST for the second
  // report would have been set off before this one's, by the same path: once this one is here, so is that.
  const later = (await admin('POST', '/keys', { name: 'reported after', account })).json<{ id: string; key: string }>();
  expect((await admin('POST', '/keys/leaked', { keys: [later.key] })).json<{ data: Array<{ revoked: boolean }> }>().data[0]?.revoked).toBe(true);
  const told = (keyId: string) => received.filter((text) => (JSON.parse(text) as { keyId?: string }).keyId === keyId);
  await eventually(() => (told(later.id).length > 0 ? true : undefined), 10_000);
  expect(told(id)).toHaveLength(1);
  expect(received).toHaveLength(2);
  const body = JSON.parse(received[0]!) as Record<string, unknown>;
  expect(body).toEqual({
    event: 'key.leaked',
    accountId: account,
    accountName: 'Leaky team',
    keyId: id,
    keyName: 'pushed to github',
    reporter: 'admin-token',
    text: 'Key “pushed to github” of account “Leaky team” was found in public (reported by a scanner) and is revoked: programs using it need a new key.',
  });
  expect(received[0]).not.toContain(key);
  const origin = `https://${new URL(gw.url).host}`;
  const signedIn = await request(gw.url, { ca: gw.ca, path: '/console/api/session', headers: { origin, 'content-type': 'application/json' }, body: JSON.stringify({ email: 'leaky-owner@example.com', password: 'a leaky owner password' }) });
  const cookie = String(signedIn.headers['set-cookie']).split(';')[0]!;
  const alerts = await request(gw.url, { ca: gw.ca, method: 'GET', path: '/console/api/alerts', headers: { cookie, origin } });
  const leaks = alerts.json<{ leaks: Array<{ keyId: string }> }>().leaks;
  expect(leaks).toHaveLength(2);
  expect(leaks).toEqual(expect.arrayContaining([{ keyId: id, at: expect.any(String) }, { keyId: later.id, at: expect.any(String) }]));
  // A member sees the account's usage alerts, not its leak reports (where a key was found is the owners').
  await admin('POST', `/accounts/${account}/members`, { email: 'leaky-member@example.com', role: 'member', password: 'a leaky member password' });
  const member = await request(gw.url, { ca: gw.ca, path: '/console/api/session', headers: { origin, 'content-type': 'application/json' }, body: JSON.stringify({ email: 'leaky-member@example.com', password: 'a leaky member password' }) });
  const memberCookie = String(member.headers['set-cookie']).split(';')[0]!;
  const theirs = await request(gw.url, { ca: gw.ca, method: 'GET', path: '/console/api/alerts', headers: { cookie: memberCookie, origin } });
  expect(theirs.status).toBe(200);
  expect(theirs.json<{ leaks: unknown[] }>().leaks).toEqual([]);
});
