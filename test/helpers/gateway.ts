/**
 * A real gateway for integration tests: the composition root (startGateway) on real sockets, ports
 * chosen by the OS, a fresh data directory (dev certificate, SQLite store), given a YAML config.
 * The test's own connection to the gateway's store (`store`) issues and revokes keys as the CLI would.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import YAML from 'yaml';
import { issueKey, type NewKey } from '../../src/auth/issue';
import { DEFAULT_FORWARD_HEADERS, loadConfig } from '../../src/config';
import type { GuardedKeyStore } from '../../src/store/guarded';
import { openKeyStore } from '../../src/store/open';
import { startGateway } from '../../src/main';
import type { Gateway } from '../../src/process/startup';

export interface TestGateway {
  readonly gateway: Gateway;
  readonly url: string;
  readonly adminUrl: string;
  readonly plainUrl: string | undefined;
  readonly ca: string;
  readonly dir: string;
  /** The SQLite file of the store this helper made (the gateway's unless the test named another store). */
  readonly storeFile: string;
  /** The test's own connection to the gateway's store, whichever it is (a 5 s deadline). */
  readonly store: GuardedKeyStore;
  issueKey(input?: Partial<NewKey>): Promise<{ key: string; id: string }>;
  revokeKey(id: string): Promise<void>;
  stop(): Promise<void>;
}

/**
 * Gateways a test starts and does not stop (its expectation failed first) are stopped after it, so
 * they neither serve into the next test nor keep jest from exiting. Those started in a `beforeAll`
 * are their file's to stop.
 */
let inTest = false;
const startedInTest = new Set<TestGateway>();
beforeEach(() => {
  inTest = true;
});
afterEach(async () => {
  inTest = false;
  const left = [...startedInTest];
  startedInTest.clear();
  await Promise.all(left.map((started) => started.stop()));
});

/**
 * The mock worker is steered by x-mock-* request headers (fail, stall, tokens, hold...), and the small
 * workers some tests write by x-test-* ones: test gateways forward both, besides the default allow-list.
 * A test of the allow-list itself sets its own.
 */
export const FORWARD_MOCK_CONTROLS = { forwardHeaders: [...DEFAULT_FORWARD_HEADERS, 'x-mock-*', 'x-test-*'] };

/** A test's settings, with the mock controls forwarded unless it names its own forwardHeaders. */
export function withMockControls(settings: Record<string, unknown>): Record<string, unknown> {
  return { ...settings, upstream: { ...FORWARD_MOCK_CONTROLS, ...(settings.upstream as object | undefined) } };
}

export async function startTestGateway(settings: Record<string, unknown>): Promise<TestGateway> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-test-'));
  const storeFile = path.join(dir, 'chatgate.db');
  const config = {
    listen: { host: '127.0.0.1', port: 0 },
    admin: { host: '127.0.0.1', port: 0 },
    dataDir: dir,
    keyStore: { type: 'sqlite', path: storeFile },
    auth: { createFirstKey: false },
    log: { level: 'silent' },
    ...withMockControls(settings),
  };
  // Settings of the store itself (its deadline) keep the file this helper made; a whole other store replaces it.
  const given = settings.keyStore as Record<string, unknown> | undefined;
  if (given && given.type === undefined) config.keyStore = { type: 'sqlite', path: storeFile, ...given };
  const configFile = path.join(dir, 'config.yaml');
  writeFileSync(configFile, YAML.stringify(config));
  const gateway = await startGateway(configFile, new Writable({ write: (_chunk, _encoding, done) => done() }));
  const store = await openKeyStore({ keyStore: { ...loadConfig(configFile).keyStore, timeoutMs: 5_000 } });
  const { publicAddress, adminAddress, plainAddress } = gateway.listeners;
  let stopped: Promise<void> | undefined;
  const started: TestGateway = {
    gateway,
    url: `https://127.0.0.1:${publicAddress.port}`,
    adminUrl: `http://127.0.0.1:${adminAddress!.port}`,
    plainUrl: plainAddress ? `http://127.0.0.1:${plainAddress.port}` : undefined,
    ca: readFileSync((settings.tls as { cert?: string } | undefined)?.cert ?? path.join(dir, 'tls', 'cert.pem'), 'utf8'),
    dir,
    storeFile,
    store,
    issueKey: async (input = {}) => {
      const { key, record } = await issueKey(store, { name: 'test', ...input });
      return { key, id: record.id };
    },
    revokeKey: async (id) => {
      await store.revoke(id, new Date());
    },
    stop: () => {
      startedInTest.delete(started);
      stopped ??= gateway.shutdown().then(async () => {
        await store.close();
        rmSync(dir, { recursive: true, force: true });
      });
      return stopped;
    },
  };
  if (inTest) startedInTest.add(started);
  return started;
}
