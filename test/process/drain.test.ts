/**
 * SIGTERM under keep-alive load. Clients send requests back to back on kept-alive connections while a
 * few streams are open. Once the drain begins, every answer says Connection: close, so no further
 * request comes on an old connection; at most the one a client had already sent arrives on each (it
 * is served, not reset); idle connections are closed, none is reset; new connections are refused; and
 * the process exits once the last stream has ended, well before the drain's deadline.
 */
import https from 'node:https';
import type { Socket } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { issueKey } from '../../src/auth/issue';
import { SqliteKeyStore } from '../../src/store/sqlite/store';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { bearer, chatBody } from '../helpers/http';
import { startWorker, type WorkerProcess } from '../helpers/processes';
import { sleep } from '../helpers/time';

let worker: WorkerProcess;
let dir: string;

beforeAll(async () => {
  worker = await startWorker(); // answers at once; the streams below ask for 20 tokens a second
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-drain-'));
});
afterAll(async () => {
  await worker?.stop();
  rmSync(dir, { recursive: true, force: true });
});

interface Sent {
  connection: number;
  sentAt: number;
  /** The status, or the error code the client saw. */
  outcome: number | string;
  closeAsked: boolean;
}

const RESET_CODES = ['ECONNRESET', 'EPIPE', 'socket hang up'];

test('SIGTERM under keep-alive load: 0 resets, no request on a connection told to close, exit once the last stream ends', async () => {
  const storeFile = path.join(dir, 'chatgate.db');
  const { key } = await issueKey(new SqliteKeyStore(storeFile), { name: 'drain' });
  const gateway: GatewayProcess = await startGatewayProcess(dir, 'drain', {
    keyStore: { type: 'sqlite', path: storeFile },
    providers: { mock: { workers: [worker.url] } },
    shutdown: { drainTimeoutMs: 20_000 },
  });

  const agent = new https.Agent({ keepAlive: true, maxSockets: 8, ca: gateway.ca });
  const socketIds = new WeakMap<Socket, number>();
  let nextSocket = 0;
  const sent: Sent[] = [];
  let running = true;
  let signalledAt = Infinity;

  const send = (body: string, headers: Record<string, string> = {}) =>
    new Promise<Sent>((resolve) => {
      const entry: Sent = { connection: -1, sentAt: performance.now(), outcome: 'unsent', closeAsked: false };
      sent.push(entry);
      const req = https.request(`${gateway.url}/v1/chat/completions`, { method: 'POST', agent, servername: 'localhost', headers: { ...bearer(key), ...headers } }, (res) => {
        entry.closeAsked = res.headers.connection === 'close';
        res.resume();
        res.on('end', () => {
          entry.outcome = res.statusCode ?? 0;
          resolve(entry);
        });
        res.on('error', (err) => {
          entry.outcome = (err as NodeJS.ErrnoException).code ?? err.message;
          resolve(entry);
        });
      });
      req.on('socket', (socket: Socket) => {
        if (!socketIds.has(socket)) socketIds.set(socket, nextSocket++);
        entry.connection = socketIds.get(socket)!;
        entry.sentAt = performance.now();
      });
      req.on('error', (err) => {
        entry.outcome = (err as NodeJS.ErrnoException).code ?? err.message;
        resolve(entry);
      });
      req.end(body);
    });

  // Four streams of 3 s each, then eight clients sending short requests back to back.
  const streams = Array.from({ length: 4 }, () => send(chatBody({ stream: true }), { 'x-mock-tokens': '60', 'x-mock-tokens-per-second': '20' }));
  const loops = Array.from({ length: 8 }, async () => {
    while (running) {
      const entry = await send(chatBody());
      // A refused connect means the gateway stopped accepting: this client is done.
      if (entry.outcome === 'ECONNREFUSED') return;
    }
  });
  // Under load before the signal: sixty answers, waited for rather than a fixed 800 ms (which a loaded
  // CI machine filled with 33), and within 2.5 s so that the 3 s streams are still running.
  const answered = () => sent.filter((entry) => typeof entry.outcome === 'number').length;
  const loading = performance.now();
  while (answered() < 60 && performance.now() - loading < 2500) await sleep(20);
  const exited = new Promise<{ code: number | null; at: number }>((resolve) => gateway.child.once('exit', (code) => resolve({ code, at: performance.now() })));
  signalledAt = performance.now();
  gateway.child.kill('SIGTERM');
  const streamOutcomes = await Promise.all(streams);
  const lastStreamEnded = performance.now();
  const { code, at: exitedAt } = await exited;
  running = false;
  await Promise.all(loops);
  agent.destroy();

  const beforeSignal = sent.filter((entry) => entry.sentAt < signalledAt);
  const afterSignal = sent.filter((entry) => entry.sentAt >= signalledAt);
  expect(beforeSignal.filter((entry) => typeof entry.outcome === 'number').length).toBeGreaterThan(50); // it was under load

  // Nothing was reset: every request got its answer, or (after the drain began) a refused connection.
  expect(sent.filter((entry) => RESET_CODES.includes(String(entry.outcome)))).toEqual([]);
  expect(streamOutcomes.map((entry) => entry.outcome)).toEqual([200, 200, 200, 200]);
  for (const entry of afterSignal) expect([200, 'ECONNREFUSED']).toContain(entry.outcome);

  // Every answer sent after the drain began asked the client to close its connection ...
  const servedAfter = afterSignal.filter((entry) => entry.outcome === 200);
  for (const entry of servedAfter) expect(entry.closeAsked).toBe(true);
  // ... so no connection carried more than the one request already on its way when the drain began.
  const perConnection = new Map<number, number>();
  for (const entry of servedAfter) perConnection.set(entry.connection, (perConnection.get(entry.connection) ?? 0) + 1);
  expect(Math.max(0, ...perConnection.values())).toBeLessThanOrEqual(1);

  expect(code).toBe(0);
  expect(exitedAt - lastStreamEnded).toBeLessThan(2000); // it exits once the last stream ends ...
  expect(exitedAt - signalledAt).toBeLessThan(10_000); // ... not at the drain deadline (20 s)
  expect(gateway.log.find((line) => line.msg === 'stopped')).toEqual(expect.objectContaining({ cut: 0 }));
}, 40_000);
