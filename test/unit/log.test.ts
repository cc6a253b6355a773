import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { accessLogOf, createLogger, destinationOf, GATHER_BYTES, GATHER_MS, MAX_WAITING_BYTES } from '../../src/log';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-log-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const readLines = (file: string) => (existsSync(file) ? readFileSync(file, 'utf8') : '').split('\n').filter(Boolean);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function closeDestination(destination: ReturnType<typeof destinationOf>): Promise<unknown> {
  const closed = new Promise((resolve) => (destination as unknown as NodeJS.EventEmitter).once('close', resolve));
  (destination as unknown as { end(): void }).end(); // writes what is pending, then closes
  return closed;
}

const diskFull = (destination: NodeJS.EventEmitter) => destination.emit('error', Object.assign(new Error('no space left'), { code: 'ENOSPC' }));

/** What chatgate says on stderr while `act` drives a file destination's events and logs a batch big enough to be written. */
async function stderrReportsWhile(act: (destination: NodeJS.EventEmitter, logWrittenBatch: () => void, reportsSoFar: string[]) => void): Promise<string[]> {
  const destination = destinationOf(path.join(dir, 'gateway.log'));
  const emitter = destination as unknown as NodeJS.EventEmitter;
  await new Promise((resolve) => emitter.once('ready', resolve));
  const log = createLogger('info', destination);
  const logWrittenBatch = () => {
    for (let n = 0; n * 150 < GATHER_BYTES * 2; n++) log.info({ n, text: 'y'.repeat(150) }, 'line');
  };
  const reports: string[] = [];
  const stderrWrite = jest.spyOn(process.stderr, 'write').mockImplementation((text) => reports.push(String(text)) > 0);
  try {
    act(emitter, logWrittenBatch, reports);
  } finally {
    stderrWrite.mockRestore();
  }
  await closeDestination(destination);
  return reports;
}

test('an access line is, but for its time, the line pino writes for the same fields', async () => {
  const file = path.join(dir, 'gateway.log');
  const destination = destinationOf(file);
  const log = createLogger('info', destination);
  const writeAccessLine = accessLogOf(log);
  const samples: object[] = [
    { requestId: 'r-1', traceId: 'a'.repeat(32), keyId: 'k1', keyName: 'team', client: '127.0.0.1', method: 'POST', path: '/v1/chat/completions', status: 200, durationMs: 1.25, stream: false, promptTokens: 9, completionTokens: 16, completed: true },
    { requestId: 'r-2', keyName: 'quote " back\\ slash \n \u0001 é 𝄞 \u2028', model: 'mock/<script>', status: 499, code: undefined, durationMs: NaN, completed: false },
    {},
  ];
  for (const fields of samples) {
    writeAccessLine(fields);
    log.child({ log: 'access' }).info(fields, 'request');
  }
  writeAccessLine({ status: 403 }, 'plain "HTTP" refused');
  log.child({ log: 'access' }).info({ status: 403 }, 'plain "HTTP" refused');
  await closeDestination(destination);
  const lines = readLines(file).map((line) => line.replace(/"time":\d+,/, '"time":0,'));
  expect(lines).toHaveLength(2 * samples.length + 2);
  for (let i = 0; i <= samples.length; i++) expect(lines[2 * i]).toBe(lines[2 * i + 1]);
});

test('access lines follow the logger level: none below it', async () => {
  const file = path.join(dir, 'gateway.log');
  const destination = destinationOf(file);
  const log = createLogger('warn', destination);
  accessLogOf(log)({ requestId: 'quiet' });
  log.level = 'info';
  accessLogOf(log)({ requestId: 'heard' });
  await closeDestination(destination);
  expect(readLines(file).map((line) => JSON.parse(line).requestId)).toEqual(['heard']);
});

test('a log file gets every line whole and in order, lines longer than one write included', async () => {
  const file = path.join(dir, 'gateway.log');
  const destination = destinationOf(file);
  const log = createLogger('info', destination);
  const long = 'x'.repeat(10_000); // more than one write of the destination's buffer
  for (let burst = 0; burst < 50; burst++) {
    for (let i = 0; i < 40; i++) log.info({ n: burst * 40 + i, text: i === 7 ? long : 'y'.repeat(600) }, 'line');
    await new Promise((resolve) => setImmediate(resolve)); // let writes be under way while lines pile up
  }
  await closeDestination(destination);
  const lines = readLines(file).map((line) => JSON.parse(line) as { n: number; text: string });
  expect(lines.map((line) => line.n)).toEqual(Array.from({ length: 2000 }, (_, n) => n));
  expect(lines.filter((line) => line.text === long)).toHaveLength(50);
});

test('lines logged one at a time are written a few kilobytes at a time, not one write each', async () => {
  const file = path.join(dir, 'gateway.log');
  const destination = destinationOf(file);
  let writes = 0;
  (destination as unknown as NodeJS.EventEmitter).on('write', () => writes++);
  const log = createLogger('info', destination);
  const lines = 40;
  const began = Date.now();
  for (let n = 0; n < lines; n++) {
    log.info({ n, text: 'y'.repeat(150) }, 'line');
    await sleep(2); // time enough for a write of the line before to be over
  }
  const timedFlushes = Math.ceil((Date.now() - began) / GATHER_MS);
  await closeDestination(destination);
  expect(readLines(file)).toHaveLength(lines);
  const bytes = readFileSync(file).length;
  // Writes of full batches, flushes on the timer, and the last one on close; one write a line is 40.
  expect(writes).toBeLessThanOrEqual(Math.ceil(bytes / GATHER_BYTES) + timedFlushes + 1);
  expect(writes).toBeLessThan(lines / 2);
});

test('a full batch of lines is written before the logging call returns, not by the thread pool later', async () => {
  const file = path.join(dir, 'gateway.log');
  const destination = destinationOf(file);
  await new Promise((resolve) => (destination as unknown as NodeJS.EventEmitter).once('ready', resolve));
  let written = 0;
  (destination as unknown as NodeJS.EventEmitter).on('write', (bytes: number) => (written += bytes));
  const log = createLogger('info', destination);
  let logged = 0;
  // A write through the thread pool reports itself on a later turn of the event loop: never inside this loop.
  while (written === 0 && logged < GATHER_BYTES) log.info({ n: logged++, text: 'y'.repeat(150) }, 'line');
  expect(written).toBeGreaterThanOrEqual(GATHER_BYTES);
  expect(readFileSync(file).length).toBe(written);
  await closeDestination(destination);
});

test('a lone line is written within the gathering time, with nothing else logged', async () => {
  const file = path.join(dir, 'gateway.log');
  const destination = destinationOf(file);
  createLogger('info', destination).info({ quiet: true }, 'alone');
  const began = Date.now();
  while (readLines(file).length === 0 && Date.now() - began < 20 * GATHER_MS) await sleep(5);
  expect(readLines(file).map((line) => JSON.parse(line).msg)).toEqual(['alone']);
  await closeDestination(destination);
});

test('lines still gathered when the process exits are written', () => {
  const file = path.join(dir, 'gateway.log');
  const script = `const { createLogger, destinationOf } = require(${JSON.stringify(path.join(__dirname, '../../dist/log.js'))});
    const destination = destinationOf(${JSON.stringify(file)});
    const log = createLogger('info', destination);
    destination.once('ready', () => {
      for (let n = 0; n < 3; n++) log.info({ n }, 'before exit');
      process.exit(0);
    });`;
  const child = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8' });
  expect(child.stderr).toBe('');
  expect(child.status).toBe(0);
  expect(readLines(file).map((line) => JSON.parse(line).n)).toEqual([0, 1, 2]);
});

test('a destination that refuses writes (a full disk) is reported once on stderr, and neither stops nor hangs the process', () => {
  const script = `const { createLogger, destinationOf } = require(${JSON.stringify(path.join(__dirname, '../../dist/log.js'))});
    const log = createLogger('info', destinationOf('/dev/full'));
    for (let n = 0; n < 100; n++) log.info({ n, text: 'y'.repeat(150) }, 'line');
    setTimeout(() => {
      log.info('still logging');
      process.stdout.write('still serving\\n');
      process.exit(0);
    }, ${GATHER_MS * 4});`;
  const child = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 10_000 });
  expect(child.stdout).toBe('still serving\n');
  expect(child.stderr.match(/ENOSPC/g)).toHaveLength(1);
  expect(child.stderr).toContain('log destination /dev/full failed');
  expect(child.status).toBe(0);
});

test('lines a refusing destination cannot take wait in memory only up to a bound; the rest are dropped, reported once', () => {
  // Four times the bound in lines: unbounded, they all stay on the heap.
  const script = `const { createLogger, destinationOf } = require(${JSON.stringify(path.join(__dirname, '../../dist/log.js'))});
    const log = createLogger('info', destinationOf('/dev/full'));
    global.gc();
    const before = process.memoryUsage().heapUsed;
    const text = 'y'.repeat(200);
    for (let n = 0; n * 250 < ${MAX_WAITING_BYTES * 4}; n++) log.info({ n, text }, 'line');
    global.gc();
    process.stdout.write(String(process.memoryUsage().heapUsed - before));
    process.exit(0);`;
  const child = spawnSync(process.execPath, ['--expose-gc', '-e', script], { encoding: 'utf8', timeout: 60_000 });
  expect(child.status).toBe(0);
  expect(Number(child.stdout)).toBeGreaterThan(MAX_WAITING_BYTES / 2);
  expect(Number(child.stdout)).toBeLessThan(MAX_WAITING_BYTES * 2);
  expect(child.stderr.match(/newer lines are dropped/g)).toHaveLength(1);
});

test('a destination that takes writes again reports how many lines it dropped meanwhile', async () => {
  const reports = await stderrReportsWhile((destination, logWrittenBatch) => {
    diskFull(destination);
    for (let n = 0; n < 3; n++) destination.emit('drop', 'a line');
    logWrittenBatch();
  });
  expect(reports).toHaveLength(3); // failed, dropping, taking writes again
  expect(reports[2]).toContain('takes writes again; 3 lines were dropped meanwhile');
});

test('a destination destroyed just before the process exits lets it exit cleanly', () => {
  const file = path.join(dir, 'gateway.log');
  const script = `const { createLogger, destinationOf } = require(${JSON.stringify(path.join(__dirname, '../../dist/log.js'))});
    const destination = destinationOf(${JSON.stringify(file)});
    createLogger('info', destination).info('before destroy');
    destination.destroy();
    process.exit(0);`;
  const child = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 10_000 });
  expect(child.stderr).toBe('');
  expect(child.status).toBe(0);
});

test('a destination that fails again after taking a write is reported again', async () => {
  const reports = await stderrReportsWhile((destination, logWrittenBatch, reportsSoFar) => {
    diskFull(destination);
    diskFull(destination);
    expect(reportsSoFar).toHaveLength(1);
    logWrittenBatch();
    diskFull(destination);
  });
  expect(reports).toHaveLength(2);
  expect(reports[1]).toContain('ENOSPC');
});
