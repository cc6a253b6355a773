/**
 * An open stream holds its relay state, not its request: once a worker answers, the prompt (as text
 * and as the bytes sent) is let go. Real gateway process; its live memory is read after a full
 * collection (a heap snapshot, asked for by signal, collects all garbage first).
 */
import https from 'node:https';
import { mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import type { IncomingMessage } from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { issueKey } from '../../src/auth/issue';
import { FileKeyStore } from '../../src/auth/store/file';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { bearer, chatBody } from '../helpers/http';
import { scrape, sample } from '../helpers/metrics';
import { eventually, startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';

const STREAMS = 16;
const PROMPT_BYTES = 2 ** 20;
/** What holding each prompt once (text or bytes) would add: 16 MiB. The streams' own state is a few KiB each. */
const BOUND_MIB = (STREAMS * PROMPT_BYTES) / 2 ** 20 / 2;

let worker: WorkerProcess;
let gateway: GatewayProcess;
let dir: string;
let snapshotDir: string;
let key: string;

beforeAll(async () => {
  worker = await startWorker({ tokensPerSecond: 2 });
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-stream-memory-'));
  const keyFile = path.join(dir, 'keys.json');
  ({ key } = await issueKey(new FileKeyStore(keyFile), { name: 'memory' }));
  snapshotDir = path.join(dir, 'heap');
  mkdirSync(snapshotDir);
  gateway = await startGatewayProcess(
    dir,
    'memory',
    { keyStore: { type: 'file', path: keyFile }, log: { access: false }, providers: { mock: { workers: [worker.url] } } },
    { NODE_OPTIONS: `--heapsnapshot-signal=SIGUSR2 --diagnostic-dir=${snapshotDir}` },
  );
}, 30_000);
afterAll(async () => {
  if (gateway) await stopProcess(gateway.child);
  await worker?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** Live JS heap plus memory outside it (Buffers), in MiB, after a full collection. */
async function liveMiB(): Promise<number> {
  gateway.child.kill('SIGUSR2');
  const snapshot = await eventually(() => readdirSync(snapshotDir)[0], 60_000);
  const metrics = await scrape(gateway.adminUrl);
  rmSync(path.join(snapshotDir, snapshot));
  return (sample(metrics, 'nodejs_heap_size_used_bytes') + sample(metrics, 'nodejs_external_memory_bytes')) / 2 ** 20;
}

function openStream(body: string): Promise<IncomingMessage> {
  return new Promise((resolve, reject) => {
    const req = https.request(`${gateway.url}/v1/chat/completions`, { method: 'POST', ca: gateway.ca, agent: false, headers: { ...bearer(key), 'x-mock-tokens': '100' } }, (response) =>
      response.once('data', () => resolve(response)),
    );
    req.on('error', reject);
    req.end(body);
  });
}

test(`${STREAMS} open streams with 1 MiB prompts: the gateway holds none of the prompts`, async () => {
  const warmUp = await openStream(chatBody({ stream: true, messages: [{ role: 'user', content: 'x'.repeat(PROMPT_BYTES) }] }));
  warmUp.destroy();
  const before = await liveMiB();
  const streams = await Promise.all(Array.from({ length: STREAMS }, (_, i) => openStream(chatBody({ stream: true, messages: [{ role: 'user', content: String.fromCharCode(97 + i).repeat(PROMPT_BYTES) }] }))));
  const growth = (await liveMiB()) - before;
  for (const stream of streams) stream.destroy();
  expect(growth).toBeLessThan(BOUND_MIB);
}, 60_000);
