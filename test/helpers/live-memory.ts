/**
 * A gateway process whose live memory can be read the only way that tells a leak: a heap snapshot
 * (--heapsnapshot-signal), which holds exactly what is reachable after a full collection. Neither
 * RSS nor the heap's used size can tell: V8 keeps freed pages (the same fuzz run grew RSS by -15 MiB
 * alone and by 65 MiB beside other test suites), and the used size read just after a snapshot's
 * collection counted 16 MiB of prompts the snapshot showed let go (CI failed on it once).
 */
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { issueKey } from '../../src/auth/issue';
import { SqliteKeyStore } from '../../src/store/sqlite/store';
import { startGatewayProcess, type GatewayProcess } from './gateway-process';
import { HeapGraph } from './heap-snapshot';
import { sample, scrape } from './metrics';
import { stopProcess } from './processes';
import { eventually } from './time';

export interface MeasuredGateway {
  process: GatewayProcess;
  /** A key of its file key store. */
  key: string;
  /** What is reachable on its heap, plus (with `withBuffers`) the memory of its Buffers, in MiB. */
  liveMiB(withBuffers?: boolean): Promise<number>;
  /** A heap snapshot of the gateway, taken now. */
  heapGraph(): Promise<HeapGraph>;
  stop(): Promise<void>;
}

/** A gateway process with provider `mock` on `workerUrl`, one key, and `settings` on top. */
export async function startMeasuredGateway(name: string, workerUrl: string, settings: Record<string, unknown>): Promise<MeasuredGateway> {
  const dir = mkdtempSync(path.join(os.tmpdir(), `chatgate-${name}-`));
  const storeFile = path.join(dir, 'chatgate.db');
  const { key } = await issueKey(new SqliteKeyStore(storeFile), { name });
  const snapshotDir = path.join(dir, 'heap');
  mkdirSync(snapshotDir);
  const gateway = await startGatewayProcess(
    dir,
    name,
    { keyStore: { type: 'sqlite', path: storeFile }, providers: { mock: { workers: [workerUrl] } }, ...settings },
    { NODE_OPTIONS: `--heapsnapshot-signal=SIGUSR2 --diagnostic-dir=${snapshotDir}` },
  );
  /** Its file, and the metrics the gateway answers once it is written (before anything else runs). */
  async function writeSnapshot(): Promise<{ file: string; metrics: string }> {
    gateway.child.kill('SIGUSR2');
    const snapshot = await eventually(() => readdirSync(snapshotDir)[0], 60_000);
    const metrics = await scrape(gateway.adminUrl);
    return { file: path.join(snapshotDir, snapshot), metrics };
  }
  return {
    process: gateway,
    key,
    async liveMiB(withBuffers = false) {
      const { file, metrics } = await writeSnapshot();
      const graph = new HeapGraph(JSON.parse(readFileSync(file, 'utf8')));
      rmSync(file);
      return (graph.totalSize() + (withBuffers ? sample(metrics, 'nodejs_external_memory_bytes') : 0)) / 2 ** 20;
    },
    async heapGraph() {
      const { file } = await writeSnapshot();
      const graph = new HeapGraph(JSON.parse(readFileSync(file, 'utf8')));
      rmSync(file);
      return graph;
    },
    async stop() {
      await stopProcess(gateway.child);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
