/**
 * Secrets never leak: a full scenario (both schemes, streams, errors, keys in the wrong places, the
 * admin API creating, rotating and revoking keys) against a gateway logging at debug level to a file
 * and a worker that records everything it receives. Then no key and no key digest may appear in any
 * log line, any /metrics series, any error body, any admin answer other than the one that hands a new
 * key out, or anything the worker received (headers, URL, body).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { digestKey } from '../../src/auth/keys';
import { startTestGateway, type TestGateway } from '../helpers/gateway';
import { basic, bearer, chatBody, request, type RawResponse } from '../helpers/http';
import { scrape } from '../helpers/metrics';
import { cuttableStore } from '../helpers/postgres';
import { startWorker, type WorkerProcess } from '../helpers/processes';

const ADMIN_TOKEN = 'admin-token-for-the-secrets-test';
let worker: WorkerProcess;
let gw: TestGateway;
let dir: string;
let logFile: string;
let store: Awaited<ReturnType<typeof cuttableStore>>;

beforeAll(async () => {
  worker = await startWorker();
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-secrets-'));
  logFile = path.join(dir, 'chatgate.log');
  // PostgreSQL through a relay, so that the test can take the store away (its errors are logged too).
  store = await cuttableStore();
  gw = await startTestGateway({
    keyStore: store.keyStore,
    admin: { host: '127.0.0.1', port: 0, token: ADMIN_TOKEN },
    log: { level: 'debug', destination: logFile },
    providers: { mock: { workers: [worker.url] } },
  });
});
afterAll(async () => {
  await worker?.stop();
  await store?.drop();
  rmSync(dir, { recursive: true, force: true });
});

async function admin(method: string, route: string): Promise<{ status: number; text: string }> {
  const response = await fetch(`${gw.adminUrl}/admin/api${route}`, { method, headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' }, body: method === 'POST' && route === '/keys' ? JSON.stringify({ name: 'made by admin' }) : undefined });
  return { status: response.status, text: await response.text() };
}

test('no key and no digest in logs, metrics, error bodies, admin answers or what the worker received', async () => {
  const { key, id } = await gw.issueKey({ name: 'scenario' });
  const { key: restrictedKey } = await gw.issueKey({ name: 'restricted', models: ['other/*'] });
  const created = await admin('POST', '/keys');
  expect(created.status).toBe(201);
  const adminKey = (JSON.parse(created.text) as { key: string; id: string }).key;
  const adminKeyId = (JSON.parse(created.text) as { id: string }).id;
  const answers: Array<{ what: string; response: RawResponse }> = [];
  const send = async (what: string, status: number, options: { method?: string; headers?: Record<string, string>; body?: string; path?: string }) => {
    const response = await request(gw.url, { ca: gw.ca, body: chatBody(), ...options });
    expect({ what, status: response.status }).toEqual({ what, status });
    answers.push({ what, response });
  };

  await send('bearer', 200, { headers: bearer(key) });
  await send('basic', 200, { headers: basic(key) });
  await send('stream', 200, { headers: bearer(adminKey), body: chatBody({ stream: true }) });
  await send('key in the query string too', 200, { headers: bearer(key), path: `/v1/chat/completions?api_key=${key}&key=${adminKey}` });
  await send('key in a cookie and API-key headers too', 200, { headers: { ...bearer(key), cookie: `key=${key}`, 'x-api-key': key, 'api-key': adminKey } });
  // Its last character changed (a key ends in 'A' one time in 16: then 'E' is the change).
  await send('a wrong key close to a real one', 401, { headers: bearer(`${key.slice(0, -1)}${key.endsWith('A') ? 'E' : 'A'}`) });
  await send('a key with a password', 401, { headers: { authorization: `Basic ${Buffer.from(`${key}:secret`).toString('base64')}` } });
  await send('a key sent under another scheme', 401, { headers: { authorization: `Token ${key}` } });
  await send('a key only in the query string', 401, { path: `/v1/chat/completions?api_key=${key}` });
  await send('a key in a body that is not JSON', 400, { headers: bearer(key), body: `{"model":"mock/echo","api_key":"${key}"` });
  await send('a key as the model', 400, { headers: bearer(key), body: JSON.stringify({ model: key, messages: [{ role: 'user', content: 'x' }] }) });
  await send('a key in the URL path', 404, { headers: bearer(key), path: `/v1/${key}` });
  await send('a key as the model of a key restricted to other models', 403, { headers: bearer(restrictedKey), body: JSON.stringify({ model: `mock/${key}`, messages: [{ role: 'user', content: 'x' }] }) });
  await send('a key as a provider', 404, { headers: bearer(key), body: JSON.stringify({ model: `${key}/m`, messages: [{ role: 'user', content: 'x' }] }) });
  await send('a key as a role', 400, { headers: bearer(key), body: JSON.stringify({ model: 'mock/echo', messages: [{ role: key, content: 'x' }] }) });

  const adminAnswers = [await admin('GET', '/keys'), await admin('GET', `/keys/${id}`), await admin('POST', `/keys/${adminKeyId}/revoke`), await admin('GET', `/keys/${key}`)];
  const rotated = await admin('POST', `/keys/${id}/rotate`);
  expect(rotated.status).toBe(200);
  const newKey = (JSON.parse(rotated.text) as { key: string }).key;
  await send('a revoked key', 401, { headers: bearer(adminKey) });
  await send('a rotated-away key', 401, { headers: bearer(key) });
  await send('the rotated key', 200, { headers: bearer(newKey) });
  // A 5xx is logged with its cause (the error log, not only the access line): the path must be redacted there too.
  store.cut();
  await send('a key in the path while the key store is down', 503, { method: 'GET', headers: bearer(`cgk_${'D'.repeat(43)}`), path: `/v1/models/${newKey}`, body: undefined });

  const metrics = await scrape(gw.adminUrl);
  const received = JSON.stringify(await worker.requests());
  await gw.stop(); // flushes the log
  const log = readFileSync(logFile, 'utf8');
  expect(log.split('\n').filter((line) => line.includes('"log":"access"')).length).toBe(answers.length);

  const secrets = [key, adminKey, newKey, restrictedKey].flatMap((secret) => [secret, digestKey(secret), secret.slice(4)]); // the secret part without its prefix too
  const places: Record<string, string> = {
    'the log': log,
    '/metrics': metrics,
    'what the worker received': received,
    'the admin answers': adminAnswers.map((answer) => answer.text).join('\n'),
    ...Object.fromEntries(answers.filter(({ response }) => response.status >= 400).map(({ what, response }) => [`the error body for "${what}"`, response.body])),
  };
  const leaks = Object.entries(places).flatMap(([place, text]) => secrets.filter((secret) => text.includes(secret)).map((secret) => `${place} holds ${secret === digestKey(key) || secret.length === 64 ? 'a digest' : 'a key'}`));
  expect(leaks).toEqual([]);
  expect(received).toContain('"url":"/v1/chat/completions"'); // the worker did get the requests, without their query strings
});
