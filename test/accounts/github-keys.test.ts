/**
 * GitHub's signing keys fetched from where GitHub publishes them (`secretScanning.github.keysUrl`):
 * a gateway process, and an HTTPS server of the test's own standing in for GitHub's key list (its
 * certificate trusted through NODE_EXTRA_CA_CERTS). A report signed by a published key revokes; a
 * key GitHub rotated in is fetched when a report names it, and only then; made-up identifiers are
 * refused without a fetch each; a list that cannot be fetched leaves the keys known before in use.
 */
import { generateKeyPairSync, sign, type KeyObject } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { GithubSigningKeys, parsePublished } from '../../src/accounts/github-keys';
import { loadOrCreateDevCertificate } from '../../src/process/dev-certificate';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { bearer, chatBody, request, type RawResponse } from '../helpers/http';
import { startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';
import { eventually } from '../helpers/time';

const TOKEN = 'admin-token-for-github-keys-0123456789';
const pair = () => generateKeyPairSync('ec', { namedCurve: 'P-256' });
const first = { identifier: 'a'.repeat(64), ...pair() };
const rotated = { identifier: 'b'.repeat(64), ...pair() };
const pem = (key: KeyObject) => key.export({ type: 'spki', format: 'pem' }) as string;

let dir: string;
let worker: WorkerProcess;
let gateway: GatewayProcess;
let list: https.Server;
/** What the list answers, and how many times it was asked. */
let published: Array<{ key_identifier: string; key: string; is_current: boolean }> = [];
let listDown = false;
let fetches = 0;

beforeAll(async () => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-github-keys-'));
  const tls = await loadOrCreateDevCertificate(path.join(dir, 'list-tls'));
  list = https.createServer({ cert: tls.cert, key: tls.key }, (_req, res) => {
    fetches++;
    if (listDown) return void res.writeHead(503).end();
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ public_keys: published }));
  });
  await new Promise<void>((resolve) => list.listen(0, '127.0.0.1', resolve));
  published = [{ key_identifier: first.identifier, key: pem(first.publicKey), is_current: true }];
  worker = await startWorker();
  gateway = await startGatewayProcess(
    dir,
    'gw',
    {
      admin: { host: '127.0.0.1', port: 0, token: TOKEN },
      providers: { mock: { workers: [worker.url] } },
      secretScanning: { github: { keysUrl: `https://127.0.0.1:${(list.address() as AddressInfo).port}/meta/public_keys/secret_scanning` } },
    },
    { NODE_EXTRA_CA_CERTS: tls.certFile },
  );
}, 30_000);
afterAll(async () => {
  if (gateway) await stopProcess(gateway.child);
  await worker?.stop();
  list?.close();
  rmSync(dir, { recursive: true, force: true });
});

const issue = async (name: string) =>
  (await request(gateway.adminUrl, { path: '/admin/api/keys', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, body: JSON.stringify({ name }) })).json<{ key: string }>().key;
const chat = (key: string) => request(gateway.url, { ca: gateway.ca, headers: bearer(key), body: chatBody() });
const matches = (key: string) => JSON.stringify([{ token: key, type: 'chatgate_api_key', url: 'https://github.com/octo/repo/blob/abc/.env', source: 'content' }]);
const report = (body: string, signer: { identifier: string; privateKey: KeyObject }, identifier = signer.identifier): Promise<RawResponse> =>
  request(gateway.url, {
    ca: gateway.ca,
    path: '/secret-scanning/github',
    headers: { 'content-type': 'application/json', 'github-public-key-identifier': identifier, 'github-public-key-signature': sign('sha256', Buffer.from(body), signer.privateKey).toString('base64') },
    body,
  });

test('a report signed by a key GitHub publishes revokes the key; the list was fetched at start', async () => {
  const key = await issue('leaked through the published key');
  expect((await chat(key)).status).toBe(200);
  const answer = await report(matches(key), first);
  expect(answer.status).toBe(200);
  expect(answer.json<Array<{ label: string }>>()[0]!.label).toBe('true_positive');
  expect((await chat(key)).status).toBe(401);
  await eventually(() => (gateway.log.some((line) => line.msg === "fetched GitHub's secret-scanning keys" && line.keys === 1) ? true : undefined));
});

test('a key GitHub rotated in is fetched when a report first names it; a made-up identifier costs at most one fetch a minute', async () => {
  published = [...published, { key_identifier: rotated.identifier, key: pem(rotated.publicKey), is_current: true }];
  const key = await issue('leaked, reported with the new key');
  const before = fetches;
  const answer = await report(matches(key), rotated);
  expect(answer.status).toBe(200);
  expect((await chat(key)).status).toBe(401);
  expect(fetches).toBe(before + 1);
  // Identifiers nobody published: refused, and within the minute no more fetches, however many.
  const kept = await issue('not leaked');
  const stranger = { identifier: 'c'.repeat(64), ...pair() };
  const refused = await Promise.all(Array.from({ length: 20 }, (_, i) => report(matches(kept), stranger, `${'c'.repeat(63)}${i % 10}`)));
  expect(refused.map((r) => r.status)).toEqual(refused.map(() => 401));
  expect(refused[0]!.json().error.code).toBe('invalid_signature');
  expect(fetches).toBe(before + 1);
  expect((await chat(kept)).status).toBe(200);
});

test('the list away: the keys fetched before still verify, a forged report is still refused', async () => {
  listDown = true;
  const key = await issue('leaked while GitHub is away');
  const forged = await report(matches(key), { identifier: first.identifier, privateKey: rotated.privateKey });
  expect(forged.status).toBe(401);
  expect((await chat(key)).status).toBe(200);
  expect((await report(matches(key), first)).status).toBe(200);
  expect((await chat(key)).status).toBe(401);
});

test('the published list: P-256 public keys by identifier; anything else is left out, and a list that is not one is refused', () => {
  const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const keys = parsePublished(
    JSON.stringify({
      public_keys: [
        { key_identifier: 'good', key: pem(first.publicKey), is_current: true },
        { key_identifier: 'rsa', key: pem(rsa.publicKey) },
        { key_identifier: 'private', key: first.privateKey.export({ type: 'pkcs8', format: 'pem' }) },
        { key_identifier: 'x'.repeat(201), key: pem(first.publicKey) },
        { key: pem(first.publicKey) },
        'garbage',
      ],
    }),
  );
  expect([...keys.keys()]).toEqual(['good']);
  expect(() => parsePublished('not json')).toThrow(/not JSON/);
  expect(() => parsePublished('{"keys": []}')).toThrow(/no public_keys list/);
});

test('a list that cannot be fetched is reported once, not at every try; the configured keys stay', async () => {
  const closed = https.createServer();
  await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
  const port = (closed.address() as AddressInfo).port;
  await new Promise((resolve) => closed.close(resolve)); // nothing listens there now
  const failures: unknown[] = [];
  const keys = new GithubSigningKeys({ failed: (err) => failures.push(err), fetched: () => failures.push('fetched') });
  keys.configure(new Map([[first.identifier, first.publicKey]]), `https://127.0.0.1:${port}/keys`);
  try {
    await keys.refresh();
    await keys.refresh();
    expect(failures).toHaveLength(1);
    expect(String((failures[0] as Error).message)).toMatch(/fetch failed/);
    expect(keys.get(first.identifier)).toBe(first.publicKey);
    expect(await keys.resolve(rotated.identifier)).toBeUndefined();
  } finally {
    keys.stop();
  }
});
