/**
 * An account's own alert webhook is written by its owners, so it is aimed like an attacker would aim
 * it: at the gateway's loopback, the cloud metadata address, private networks, IPv6 forms that carry
 * those, and names that resolve to them. Each is refused before any connection (a receiver on
 * 127.0.0.1 counts what reaches it); the platform's own webhook is posted as configured.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { AddressNotPublic, alertWebhookUrlField, postJson, publicAddress, webhookHost } from '../../src/accounts/webhook-post';
import { GatewayError } from '../../src/errors';

let server: http.Server;
let port: number;
let connections = 0;
let posted: string[] = [];

beforeAll(async () => {
  server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      posted.push(body);
      res.writeHead(204).end();
    });
  });
  server.on('connection', () => connections++);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));
beforeEach(() => {
  connections = 0;
  posted = [];
});

test('public addresses pass; loopback, private, link-local, shared, reserved and their IPv6 forms do not', () => {
  for (const address of ['8.8.8.8', '1.1.1.1', '140.82.112.3', '2606:4700:4700::1111', '2a00:1450:4001:80b::200e']) expect({ address, public: publicAddress(address) }).toEqual({ address, public: true });
  const hostile = [
    '127.0.0.1', '127.255.255.254', '0.0.0.0', '10.1.2.3', '172.16.0.1', '172.31.255.255', '192.168.1.1', '169.254.169.254', '100.64.0.1', '198.18.0.1', '224.0.0.1', '255.255.255.255',
    '::', '::1', '::ffff:127.0.0.1', '::ffff:7f00:1', '::ffff:a9fe:a9fe', '::7f00:1', '64:ff9b::7f00:1', '2002:7f00:1::', 'fc00::1', 'fd12:3456::1', 'fe80::1', 'ff02::1', '2001:db8::1',
    // Outside global unicast: IPv4-translated, site-local, the reserved ::/8.
    '::ffff:0:7f00:1', 'fec0::1', '1::', '::1:0:0:1',
    'localhost', 'not an address', '',
  ];
  for (const address of hostile) expect({ address, public: publicAddress(address) }).toEqual({ address, public: false });
});

test('an account webhook URL is an https URL to a name or a public address, without credentials; errors never echo it', () => {
  const secret = 'T0000/B0000/XXXXXXXXSECRET';
  expect(alertWebhookUrlField(`https://hooks.slack.com/services/${secret}`)).toBe(`https://hooks.slack.com/services/${secret}`);
  expect(alertWebhookUrlField(null)).toBeNull();
  expect(alertWebhookUrlField(undefined)).toBeUndefined();
  const refused = [
    `http://hooks.slack.com/services/${secret}`, `https://user:pass@hooks.slack.com/${secret}`, `https://127.0.0.1/${secret}`, `https://[::1]/${secret}`, `https://169.254.169.254/latest/${secret}`,
    `https://[::ffff:7f00:1]/${secret}`, `https://10.0.0.8:8443/${secret}`, `ftp://hooks.example.com/${secret}`, `javascript:alert(1)//${secret}`, `hooks.slack.com/${secret}`, `https://x/${'a'.repeat(2100)}${secret}`, 42, { url: 'https://x' }, ['https://x'],
  ];
  for (const value of refused) {
    let error: unknown;
    try {
      alertWebhookUrlField(value);
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(GatewayError);
    expect((error as GatewayError).status).toBe(400);
    expect((error as GatewayError).param).toBe('alertWebhookUrl');
    expect((error as Error).message).not.toContain(secret);
  }
  expect(webhookHost({ alertWebhookUrl: `https://hooks.slack.com:8443/services/${secret}` })).toBe('hooks.slack.com:8443');
  expect(webhookHost({})).toBeNull();
  // A value put in the store by hand is shown as such, never breaking the page that shows it.
  expect(webhookHost({ alertWebhookUrl: 'garbage' })).toBe('(not a URL)');
  // The bound holds for the URL as it is kept (normalised), not only as it was sent.
  expect(() => alertWebhookUrlField(`https://hooks.example.com/${'é'.repeat(2000)}`)).toThrow(/at most 2048/);
});

test('public only: loopback by name, by literal, by IPv6 forms and the metadata address are refused before connecting', async () => {
  for (const host of ['localhost', '127.0.0.1', '[::ffff:127.0.0.1]', '[::1]', '169.254.169.254', '127.1']) {
    await expect(postJson(`http://${host}:${port}/hook`, '{"a":1}', { timeoutMs: 5000, publicOnly: true })).rejects.toBeInstanceOf(AddressNotPublic);
  }
  expect(connections).toBe(0);
  // Not public-only (the operator's own webhook, or allowPrivateAccountWebhooks): posted.
  expect(await postJson(`http://localhost:${port}/hook`, '{"a":1}', { timeoutMs: 5000, publicOnly: false })).toBe(204);
  expect(posted).toEqual(['{"a":1}']);
});

test('the status is the answer: a body without end is not read; the deadline holds against a webhook that never answers', async () => {
  const endless = http.createServer((_req, res) => {
    res.writeHead(200);
    const timer = setInterval(() => res.write('.'.repeat(65_536)), 5);
    res.on('close', () => clearInterval(timer));
  });
  await new Promise<void>((resolve) => endless.listen(0, '127.0.0.1', resolve));
  try {
    await expect(postJson(`http://127.0.0.1:${(endless.address() as AddressInfo).port}/`, '{}', { timeoutMs: 2000, publicOnly: false })).resolves.toBe(200);
  } finally {
    endless.closeAllConnections();
    endless.close();
  }
  const silent = http.createServer(() => undefined);
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  try {
    await expect(postJson(`http://127.0.0.1:${(silent.address() as AddressInfo).port}/`, '{}', { timeoutMs: 300, publicOnly: false })).rejects.toThrow('no answer within 300 ms');
  } finally {
    silent.closeAllConnections();
    silent.close();
  }
});
