/**
 * Graceful shutdown of a real gateway process: SIGTERM (and SIGINT) while 20 streams are open. New
 * connections are refused, /readyz says not ready, every open stream completes, the exit code is 0.
 * Streams that outlast shutdown.drainTimeoutMs are cut at the deadline, and the count is logged. A
 * signal that arrives while the gateway starts drains it once it is up.
 */
import https from 'node:https';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { issueKey } from '../../src/auth/issue';
import { SqliteKeyStore } from '../../src/store/sqlite/store';
import { bearer, chatBody } from '../helpers/http';
import { spawnGatewayProcess, startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { createTestDatabase, heldRelay } from '../helpers/postgres';
import { startWorker, type WorkerProcess } from '../helpers/processes';
import { eventually } from '../helpers/time';

let worker: WorkerProcess;
let dir: string;

beforeAll(async () => {
  worker = await startWorker({ tokensPerSecond: 10 });
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-shutdown-'));
});
afterAll(async () => {
  await worker?.stop();
  rmSync(dir, { recursive: true, force: true });
});

interface Running extends GatewayProcess {
  key: string;
}

async function startGateway(name: string, drainTimeoutMs = 15_000): Promise<Running> {
  const storeFile = path.join(dir, `${name}.db`);
  const { key } = await issueKey(new SqliteKeyStore(storeFile), { name });
  const gateway = await startGatewayProcess(dir, name, {
    keyStore: { type: 'sqlite', path: storeFile },
    providers: { mock: { workers: [worker.url] } },
    shutdown: { drainTimeoutMs },
  });
  return { ...gateway, key };
}

function openStream(gateway: Running, tokens = 15): Promise<{ firstChunk: Promise<void>; text: Promise<string>; cut: Promise<boolean> }> {
  return new Promise((resolve, reject) => {
    const req = https.request(
      `https://127.0.0.1:${gateway.port}/v1/chat/completions`,
      { method: 'POST', ca: gateway.ca, servername: 'localhost', agent: false, headers: { ...bearer(gateway.key), 'x-mock-tokens': String(tokens) } },
      (res) => {
        let text = '';
        let gotFirst: () => void;
        const firstChunk = new Promise<void>((r) => (gotFirst = r));
        res.on('data', (chunk: Buffer) => {
          text += chunk.toString('utf8');
          gotFirst();
        });
        const cut = new Promise<boolean>((r) => {
          res.on('end', () => r(false));
          res.on('error', () => r(true));
        });
        resolve({ firstChunk, text: new Promise((r) => res.on('end', () => r(text))), cut });
      },
    );
    req.on('error', reject);
    req.end(chatBody({ stream: true }));
  });
}

function connects(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1', () => {
      socket.destroy();
      resolve(true);
    });
    socket.on('error', () => resolve(false));
  });
}

test.each(['SIGTERM', 'SIGINT'] as const)('%s during 20 open streams: all complete, new connections refused, exit 0', async (signal) => {
  const gateway = await startGateway(signal.toLowerCase());
  const streams = await Promise.all(Array.from({ length: 20 }, () => openStream(gateway)));
  await Promise.all(streams.map((s) => s.firstChunk));

  const exited = new Promise<number | null>((resolve) => gateway.child.once('exit', (code) => resolve(code)));
  gateway.child.kill(signal);
  await eventually(async () => ((await connects(gateway.port)) ? undefined : true));
  const readiness = await fetch(`${gateway.adminUrl}/readyz`);
  expect(readiness.status).toBe(503);

  const texts = await Promise.all(streams.map((s) => s.text));
  for (const text of texts) expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
  expect(await exited).toBe(0);
});

test('streams that outlast the drain deadline are cut at it, counted in the last log line, and the process still exits 0', async () => {
  const gateway = await startGateway('deadline', 500);
  const streams = await Promise.all(Array.from({ length: 3 }, () => openStream(gateway, 300))); // 30 s at 10 tokens/s
  await Promise.all(streams.map((s) => s.firstChunk));

  // 'close', not 'exit': the last log lines may still be in the pipe when the process has exited.
  const exited = new Promise<number | null>((resolve) => gateway.child.once('close', (code) => resolve(code)));
  const signalledAt = Date.now();
  gateway.child.kill('SIGTERM');
  expect(await Promise.all(streams.map((s) => s.cut))).toEqual([true, true, true]);
  const cutAfterMs = Date.now() - signalledAt;
  expect(cutAfterMs).toBeGreaterThanOrEqual(500); // not before the deadline
  expect(cutAfterMs).toBeLessThan(10_000); // and not when the streams would have ended (30 s)
  expect(await exited).toBe(0);
  expect(gateway.log.find((line) => line.msg === 'stopped')).toMatchObject({ cut: 3 });
});

test('a SIGTERM while the gateway starts: it finishes starting, then drains and exits 0 (not killed half-built)', async () => {
  const database = await createTestDatabase();
  const relay = await heldRelay(database.url);
  try {
    const { child, listening } = spawnGatewayProcess(dir, 'signalled-while-starting', {
      keyStore: { type: 'postgres', url: relay.url },
      providers: { mock: { workers: [worker.url] } },
    });
    const closed = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('close', (code, signal) => resolve({ code, signal })));
    await relay.firstConnection;
    child.kill('SIGTERM');
    relay.release();
    const gateway = await listening;
    expect(await closed).toEqual({ code: 0, signal: null });
    expect(gateway.log.map((line) => line.msg)).toEqual(expect.arrayContaining(['chatgate listening', 'draining', 'stopped']));
  } finally {
    relay.close();
    await database.drop();
  }
});
