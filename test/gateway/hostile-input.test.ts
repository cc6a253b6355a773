/**
 * Input a key holder can send to hurt the gateway or those behind it, against a gateway process:
 * - 16 MiB of nested arrays (`[` x 8M, `]` x 8M), three at once: each refused with 400 naming the
 *   limit within 100 ms, the process's memory barely moving, other clients served meanwhile (before:
 *   5 s of JSON.parse each, 1.38 GB of RSS for three, 502s for innocent clients);
 * - a prompt of 16 MiB of plain text is still served;
 * - a key-shaped X-Request-Id, tracestate or User-Agent: no key-shaped value in the answer, the
 *   access log or anything the worker receives.
 */
import https from 'node:https';
import { Readable } from 'node:stream';
import { setTimeout as delay } from 'node:timers/promises';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { issueKey } from '../../src/auth/issue';
import { SqliteKeyStore } from '../../src/store/sqlite/store';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { bearer, chatBody, request } from '../helpers/http';
import { sample, scrape } from '../helpers/metrics';
import { startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';
import { sleep } from '../helpers/time';

const MiB = 1024 * 1024;
let worker: WorkerProcess;
let dir: string;
let gateway: GatewayProcess;
let key: string;

beforeAll(async () => {
  worker = await startWorker();
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-hostile-'));
  const storeFile = path.join(dir, 'chatgate.db');
  ({ key } = await issueKey(new SqliteKeyStore(storeFile), { name: 'hostile' }));
  gateway = await startGatewayProcess(dir, 'gw', { keyStore: { type: 'sqlite', path: storeFile }, providers: { mock: { workers: [worker.url] } } });
});
afterAll(async () => {
  if (gateway) await stopProcess(gateway.child);
  await worker?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/**
 * Sends `body` and reports the status, the request id, and when the answer's head arrived (client
 * side, counted from the end of the TLS handshake: from when the request could start to go), or the
 * error it met first.
 */
function send(body: Buffer, headers: Record<string, string> = {}): Promise<{ status: number | string; ms: number; text: string; requestId: string; duringUpload: boolean }> {
  return new Promise((resolve) => {
    let started = performance.now();
    let answered = false;
    let uploaded = false;
    const req = https.request(
      `${gateway.url}/v1/chat/completions`,
      { method: 'POST', ca: gateway.ca, servername: 'localhost', agent: false, headers: { ...bearer(key), 'content-type': 'application/json', 'content-length': String(body.length), ...headers } },
      (res) => {
        answered = true;
        const ms = performance.now() - started;
        const duringUpload = !uploaded;
        let text = '';
        res.setEncoding('utf8');
        const done = () => resolve({ status: res.statusCode ?? 0, ms, text, requestId: String(res.headers['x-request-id']), duringUpload });
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', done);
        res.on('error', done);
      },
    );
    req.on('socket', (socket) => socket.once('secureConnect', () => (started = performance.now())));
    req.on('error', (err: NodeJS.ErrnoException) => {
      if (!answered) resolve({ status: err.code ?? err.message, ms: performance.now() - started, text: '', requestId: '', duringUpload: !uploaded });
    });
    // Uploaded as a client streams a file over a fast network: 64 KiB a millisecond at most. Not as
    // fast as the CPU goes: three uploads encrypting flat out, on a machine running other tests, kept
    // this process from reading the answer's head for 100 ms and more.
    Readable.from(
      (async function* () {
        for (let at = 0; at < body.length; at += 65_536) {
          yield body.subarray(at, at + 65_536);
          await delay(1);
        }
        uploaded = true;
      })(),
    ).pipe(req);
  });
}

/** The gateway's own time for a request, from its access line (arrival to the end of the answer). */
async function gatewayMs(requestId: string): Promise<number> {
  for (let i = 0; i < 100; i++) {
    const line = gateway.log.find((entry) => entry.log === 'access' && entry.requestId === requestId);
    if (line) return Number(line.durationMs);
    await sleep(20);
  }
  throw new Error(`no access line for ${requestId}`);
}

const rss = async () => sample(await scrape(gateway.adminUrl), 'process_resident_memory_bytes');

test('16 MiB of nested arrays, three at once: each answered 400 while it is still uploading, memory bounded, others served meanwhile', async () => {
  const nested = Buffer.concat([Buffer.alloc(8 * MiB, '['), Buffer.alloc(8 * MiB, ']')]);
  expect((await send(Buffer.from(chatBody()))).status).toBe(200); // warm
  const before = await rss();
  const innocent = request(gateway.url, { ca: gateway.ca, headers: bearer(key), body: chatBody() });
  const answers = await Promise.all([send(nested), send(nested), send(nested)]);
  for (const answer of answers) {
    expect(answer.status).toBe(400);
    expect(JSON.parse(answer.text).error).toEqual({
      message: 'The request body nests arrays and objects more than 64 levels deep.',
      type: 'invalid_request_error',
      param: null,
      code: 'invalid_body',
    });
    // The answer, while the client is still uploading (at least a quarter of a second of it): before, 5 s of JSON.parse each.
    expect(answer.duringUpload).toBe(true);
    // The answer ends with the upload (thrown away as it came, never parsed): the connection is not reset under the client.
    expect(await gatewayMs(answer.requestId)).toBeLessThan(5000);
  }
  expect((await innocent).status).toBe(200);
  const grown = (await rss()) - before;
  expect(grown).toBeLessThan(64 * MiB); // before: 561 MB for one, 1.38 GB for three
});

test('16 MiB of flat values past maxJsonElements is refused the same way, naming that limit', async () => {
  const flat = Buffer.from(`[${'0,'.repeat(2_000_000)}0]`);
  const answer = await send(flat);
  expect(answer.status).toBe(400);
  expect(JSON.parse(answer.text).error.message).toBe('The request body holds more than 1000000 values (array elements and object members).');
});

test('a prompt of 16 MiB of text is still served', async () => {
  const prompt = 'lorem ipsum '.repeat(Math.floor((16 * MiB - 200) / 12));
  const body = Buffer.from(JSON.stringify({ model: 'mock/echo', messages: [{ role: 'user', content: prompt }], max_tokens: 1 }));
  expect(body.length).toBeLessThanOrEqual(16 * MiB);
  const answer = await send(body);
  expect(answer.status).toBe(200);
});

test('a key-shaped X-Request-Id, tracestate or User-Agent: no key-shaped value in the answer, the access log or what the worker receives', async () => {
  await worker.clear();
  const planted = `cgk_${'Q'.repeat(43)}`;
  const answer = await request(gateway.url, {
    ca: gateway.ca,
    headers: {
      ...bearer(key),
      'x-request-id': planted,
      traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
      tracestate: `vendor=${planted}`,
      'user-agent': `client/1.0 (${planted})`,
    },
    body: chatBody(),
  });
  expect(answer.status).toBe(200);
  expect(answer.headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/);
  expect(JSON.stringify(answer.headers) + answer.body).not.toMatch(/cgk_Q{8}/);

  const [seen] = await worker.requests();
  expect(seen!.headers['x-request-id']).toBe(answer.headers['x-request-id']);
  expect(seen!.headers.tracestate).toBeUndefined();
  expect(seen!.headers['user-agent']).toBe('client/1.0 (cgk_[redacted])');
  expect(JSON.stringify(seen)).not.toMatch(/cgk_Q{8}/);
  expect(JSON.stringify(seen)).not.toContain(key);

  const line = await new Promise<Record<string, unknown>>((resolve) => {
    const look = () => {
      const found = gateway.log.find((entry) => entry.log === 'access' && entry.requestId === answer.headers['x-request-id']);
      if (found) resolve(found);
      else setTimeout(look, 20);
    };
    look();
  });
  expect(JSON.stringify(line)).not.toMatch(/cgk_Q{8}/);
});
