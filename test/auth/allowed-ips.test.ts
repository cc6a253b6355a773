/**
 * Keys limited to client addresses (`allowedIps`), through a real gateway process and clients bound to
 * loopback addresses of their own (127.0.0.2, 127.0.0.3, 127.0.0.5): a key for 127.0.0.2 answers there
 * and is 403 ip_not_allowed from 127.0.0.3, a /30 lets in what it holds, `X-Forwarded-For` counts only
 * from a trusted proxy, the admin API refuses what is not an address or range (naming the entry) and
 * stores ranges in one form, the CLI takes them too, and a change reaches the cached key at once.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseCidr } from '../../src/auth/key-fields';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { bearer, chatBody, request } from '../helpers/http';
import { CLI, startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';
import { eventually } from '../helpers/time';

const TOKEN = 'allowed-ips-admin-token-0123456789';
let dir: string;
let worker: WorkerProcess;
let gateway: GatewayProcess;
/** The same store, behind a gateway that trusts 127.0.0.4 as its proxy. */
let proxied: GatewayProcess;

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-allowed-ips-'));
  worker = await startWorker();
  const store = { type: 'sqlite', path: path.join(dir, 'shared.db') };
  gateway = await startGatewayProcess(dir, 'direct', { admin: { host: '127.0.0.1', port: 0, token: TOKEN }, providers: { mock: { workers: [worker.url] } }, keyStore: store });
  proxied = await startGatewayProcess(dir, 'proxied', { providers: { mock: { workers: [worker.url] } }, keyStore: store, trustedProxies: ['127.0.0.4'] });
});
afterAll(async () => {
  await Promise.all([gateway, proxied].filter(Boolean).map((g) => stopProcess(g.child)));
  await worker?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const admin = (method: string, apiPath: string, body?: unknown) =>
  request(gateway.adminUrl, { method, path: `/admin/api${apiPath}`, headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) });
const from = (localAddress: string, key: string, target = gateway, headers: Record<string, string> = {}) => request(target.url, { ca: target.ca, localAddress, headers: { ...bearer(key), ...headers }, body: chatBody() });
type Made = { key: string; id: string; allowedIps: string[] };

test('a key for 127.0.0.2 answers from there, 403 ip_not_allowed from 127.0.0.3; a /30 lets in what it holds', async () => {
  const only2 = (await admin('POST', '/keys', { name: 'only .2', allowedIps: ['127.0.0.2'] })).json<Made>();
  expect(only2.allowedIps).toEqual(['127.0.0.2/32']);
  expect((await from('127.0.0.2', only2.key)).status).toBe(200);
  const refused = await from('127.0.0.3', only2.key);
  expect(refused.status).toBe(403);
  expect(refused.json()).toEqual({ error: { message: 'This API key may not be used from this address (its allowedIps).', type: 'permission_error', param: null, code: 'ip_not_allowed' } });
  expect(refused.body).not.toContain('127.0.0.3'); // the address is not echoed

  const range = (await admin('POST', '/keys', { name: 'a /30', allowedIps: ['127.0.0.0/30', '2001:DB8:0:0::/32'] })).json<Made>();
  expect(range.allowedIps).toEqual(['127.0.0.0/30', '2001:db8::/32']);
  expect((await from('127.0.0.2', range.key)).status).toBe(200);
  expect((await from('127.0.0.3', range.key)).status).toBe(200);
  expect((await from('127.0.0.5', range.key)).status).toBe(403);
  // A key with no list is usable from anywhere.
  const open = (await admin('POST', '/keys', { name: 'anywhere' })).json<Made>();
  expect(open.allowedIps).toEqual([]);
  expect((await from('127.0.0.5', open.key)).status).toBe(200);
});

test('a change of allowedIps reaches the cached key at once; [] opens it to any address', async () => {
  const made = (await admin('POST', '/keys', { name: 'changing', allowedIps: ['127.0.0.2/32'] })).json<Made>();
  expect((await from('127.0.0.3', made.key)).status).toBe(403);
  expect((await admin('PATCH', `/keys/${made.id}`, { allowedIps: ['127.0.0.3/32'] })).status).toBe(200);
  expect((await from('127.0.0.3', made.key)).status).toBe(200);
  expect((await from('127.0.0.2', made.key)).status).toBe(403);
  expect((await admin('PATCH', `/keys/${made.id}`, { allowedIps: [] })).json<Made>().allowedIps).toEqual([]);
  expect((await from('127.0.0.2', made.key)).status).toBe(200);
});

test('X-Forwarded-For counts only from a trusted proxy: a client cannot claim an allowed address', async () => {
  const made = (await admin('POST', '/keys', { name: 'office', allowedIps: ['10.0.0.0/8'] })).json<Made>();
  // The trusted proxy (127.0.0.4) forwards the office client's address.
  await eventually(async () => ((await from('127.0.0.4', made.key, proxied, { 'x-forwarded-for': '10.1.2.3' })).status === 200 ? true : undefined), 3000);
  expect((await from('127.0.0.4', made.key, proxied, { 'x-forwarded-for': '192.0.2.1' })).status).toBe(403);
  // Anyone else saying so is not believed, on either gateway.
  expect((await from('127.0.0.3', made.key, proxied, { 'x-forwarded-for': '10.1.2.3' })).status).toBe(403);
  expect((await from('127.0.0.3', made.key, gateway, { 'x-forwarded-for': '10.1.2.3' })).status).toBe(403);
});

test('what is not an address or range is refused, naming the entry; nothing is stored', async () => {
  for (const [allowedIps, param] of [
    [['127.0.0.1', '10.0.0.0/33'], 'allowedIps[1]'],
    [['::1/129'], 'allowedIps[0]'],
    [['10.0.0.0/8/8'], 'allowedIps[0]'],
    [['localhost'], 'allowedIps[0]'],
    [['10.0.0.0/-1'], 'allowedIps[0]'],
    [[' 10.0.0.0/ 8'], 'allowedIps[0]'],
    [[42], 'allowedIps[0]'],
    ['10.0.0.0/8', 'allowedIps'],
    [Array.from({ length: 101 }, (_, i) => `10.0.0.${i}`), 'allowedIps'],
  ] as const) {
    const answer = await admin('POST', '/keys', { name: 'bad', allowedIps });
    expect({ allowedIps, status: answer.status, param: answer.json<{ error: { param: string } }>().error.param }).toEqual({ allowedIps, status: 400, param });
  }
  expect((await admin('GET', '/keys')).body).not.toContain('"name":"bad"');
});

test('parseCidr: one canonical form for IPv4 and IPv6, single addresses as /32 and /128', () => {
  expect(parseCidr('10.0.0.1')).toBe('10.0.0.1/32');
  expect(parseCidr('0.0.0.0/0')).toBe('0.0.0.0/0');
  expect(parseCidr('2001:0DB8:0000::1')).toBe('2001:db8::1/128');
  expect(parseCidr('::/0')).toBe('::/0');
  for (const bad of ['', '/8', '10.0.0', '10.0.0.256', '10.0.0.0/', '10.0.0.0/08x', 'fe80::1%eth0', `${'1'.repeat(70)}`]) expect([bad, parseCidr(bad)]).toEqual([bad, undefined]);
});

test('the CLI takes --allowed-ips (repeated or comma-separated) and refuses what is not one', () => {
  const config = path.join(dir, 'direct.yaml');
  const made = spawnSync(process.execPath, [CLI, 'keys', 'create', '--name', 'cli', '--allowed-ips', '127.0.0.2', '--allowed-ips', '10.0.0.0/8,::1', '--json', '--config', config], { encoding: 'utf8' });
  expect(made.status).toBe(0);
  expect(JSON.parse(made.stdout).allowedIps).toEqual(['127.0.0.2/32', '10.0.0.0/8', '::1/128']);
  const refused = spawnSync(process.execPath, [CLI, 'keys', 'create', '--name', 'cli', '--allowed-ips', 'office', '--config', config], { encoding: 'utf8' });
  expect(refused.status).toBe(2);
  expect(refused.stderr).toMatch(/--allowed-ips office: not an IP address or CIDR range/);
});
