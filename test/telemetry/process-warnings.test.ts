/**
 * Node's process warnings reach the log as JSON lines, never as Node's plain text on stderr. On Node 22
 * and later a proxied request makes http-proxy call util._extend (DEP0060): that one is logged at
 * debug, as a known dependency warning. `--no-warnings` keeps Node's silence.
 */
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { issueKey } from '../../src/auth/issue';
import { SqliteKeyStore } from '../../src/store/sqlite/store';
import { bearer, chatBody, request } from '../helpers/http';
import { startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process';
import { startWorker, stopProcess, type WorkerProcess } from '../helpers/processes';
import { eventually } from '../helpers/time';

const RUNTIME_DEPRECATES_UTIL_EXTEND = Number(process.versions.node.split('.')[0]) >= 22;

let worker: WorkerProcess;
let dir: string;
let preload: string;

beforeAll(async () => {
  worker = await startWorker();
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-warnings-'));
  // A warning on demand, once the gateway is up: SIGUSR2 makes the process emit one. Node hands a
  // warning to its listeners on the next tick; the file `handled-<pid>` written after that (on the
  // next turn) says they have had it.
  preload = path.join(dir, 'warn-on-sigusr2.js');
  writeFileSync(
    preload,
    `process.on('SIGUSR2', () => {
      process.emitWarning('a test warning', { code: 'CHATGATE_TEST_WARNING' });
      setImmediate(() => require('node:fs').writeFileSync(require('node:path').join(${JSON.stringify(dir)}, 'handled-' + process.pid), ''));
    });\n`,
  );
});
afterAll(async () => {
  await worker?.stop();
  rmSync(dir, { recursive: true, force: true });
});

async function startGateway(name: string, level: string, nodeOptions: string): Promise<GatewayProcess & { key: string }> {
  const storeFile = path.join(dir, `${name}.db`);
  const { key } = await issueKey(new SqliteKeyStore(storeFile), { name });
  const gateway = await startGatewayProcess(
    dir,
    name,
    { keyStore: { type: 'sqlite', path: storeFile }, providers: { mock: { workers: [worker.url] } }, log: { level } },
    { NODE_OPTIONS: `--require ${preload} ${nodeOptions}`.trim() },
  );
  return { ...gateway, key };
}

const warningLines = (gateway: GatewayProcess) => gateway.log.filter((line) => typeof line.msg === 'string' && line.msg.startsWith('Node.js process warning'));

test('a warning is a JSON log line at warn, and nothing reaches stderr as plain text', async () => {
  const gateway = await startGateway('warn', 'info', '');
  try {
    const answer = await request(gateway.url, { ca: gateway.ca, headers: bearer(gateway.key), body: chatBody() });
    expect(answer.status).toBe(200);
    gateway.child.kill('SIGUSR2');
    const line = await eventually(() => warningLines(gateway).find((entry) => (entry.warning as { code?: string }).code === 'CHATGATE_TEST_WARNING'));
    expect(line).toMatchObject({ level: 40, warning: { name: 'Warning', code: 'CHATGATE_TEST_WARNING', message: 'a test warning' } });
    expect(gateway.stderr()).not.toMatch(/\(node:\d+\)|Warning/);
    // At info, the known dependency warning (Node 22 and later) is not shown at all.
    expect(warningLines(gateway)).toHaveLength(1);
  } finally {
    await stopProcess(gateway.child);
  }
});

test('at debug, http-proxy’s util._extend deprecation is logged once with its known cause (Node 22 and later)', async () => {
  const gateway = await startGateway('debug', 'debug', '');
  try {
    for (let i = 0; i < 3; i++) expect((await request(gateway.url, { ca: gateway.ca, headers: bearer(gateway.key), body: chatBody() })).status).toBe(200);
    const known = () => warningLines(gateway).filter((entry) => (entry.warning as { code?: string }).code === 'DEP0060');
    if (RUNTIME_DEPRECATES_UTIL_EXTEND) {
      await eventually(() => (known().length > 0 ? true : undefined));
      expect(known()).toEqual([expect.objectContaining({ level: 20, knownCause: expect.stringContaining('http-proxy') })]);
    } else {
      // The control: a warning emitted after those requests, logged by the same listener. A DEP0060
      // emitted as they were proxied would have been logged before it.
      gateway.child.kill('SIGUSR2');
      await eventually(() => warningLines(gateway).find((entry) => (entry.warning as { code?: string }).code === 'CHATGATE_TEST_WARNING'));
      expect(known()).toEqual([]); // Node 20 deprecates util._extend in its documentation only
    }
    expect(gateway.stderr()).not.toMatch(/\(node:\d+\)|DeprecationWarning/);
  } finally {
    await stopProcess(gateway.child);
  }
});

test('--no-warnings: Node stays silent and so does the log', async () => {
  const gateway = await startGateway('silent', 'debug', '--no-warnings');
  try {
    expect((await request(gateway.url, { ca: gateway.ca, headers: bearer(gateway.key), body: chatBody() })).status).toBe(200);
    gateway.child.kill('SIGUSR2');
    // The control: the warning's listeners have had it (the preload's file), and a line logged after
    // that (a request's access line) is in: a warning line, had one been logged, would be before it.
    await eventually(() => (existsSync(path.join(dir, `handled-${gateway.child.pid}`)) ? true : undefined));
    const after = await request(gateway.url, { ca: gateway.ca, headers: bearer(gateway.key), body: chatBody() });
    expect(after.status).toBe(200);
    await eventually(() => gateway.log.find((line) => line.log === 'access' && line.requestId === after.headers['x-request-id']));
    expect(warningLines(gateway)).toEqual([]);
    expect(gateway.stderr()).not.toMatch(/Warning/);
  } finally {
    await stopProcess(gateway.child);
  }
});
