import { spawn, spawnSync } from 'node:child_process';
import fs, { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { accessLogOf, createLogger, destinationOf } from '../../src/telemetry/log';
import { GATHER_BYTES, GATHER_MS, MAX_WAITING_BYTES } from '../../src/tuning/log-destination';
import { eventually, sleep } from '../helpers/time';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(path.join(os.tmpdir(), 'chatgate-log-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

const readLines = (file: string) => (existsSync(file) ? readFileSync(file, 'utf8') : '').split('\n').filter(Boolean);

/** Lines of about 250 bytes, enough of them to make `bytes`. */
function logLines(log: ReturnType<typeof createLogger>, bytes: number, from = 0): number {
  let n = from;
  for (; (n - from) * 250 < bytes; n++) log.info({ n, text: 'y'.repeat(200) }, 'line');
  return n;
}

/** fs.writeSync refuses every write with ENOSPC (a full disk) until the returned function is called; `tries` counts the writes refused until then. */
function diskFull(): (() => void) & { tries: () => number } {
  const refuse = jest.spyOn(fs, 'writeSync').mockImplementation(() => {
    throw Object.assign(new Error('no space left on device'), { code: 'ENOSPC', syscall: 'write' });
  });
  return Object.assign(() => refuse.mockRestore(), { tries: () => refuse.mock.calls.length });
}

/** What chatgate says on stderr while `act` runs (`act` sees it too, as it comes). */
function stderrWhile(act: (reportsSoFar: string[]) => void): string[] {
  const reports: string[] = [];
  const stderrWrite = jest.spyOn(process.stderr, 'write').mockImplementation((text) => reports.push(String(text)) > 0);
  try {
    act(reports);
  } finally {
    stderrWrite.mockRestore();
  }
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
  destination.end();
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
  destination.end();
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
  destination.end();
  const lines = readLines(file).map((line) => JSON.parse(line) as { n: number; text: string });
  expect(lines.map((line) => line.n)).toEqual(Array.from({ length: 2000 }, (_, n) => n));
  expect(lines.filter((line) => line.text === long)).toHaveLength(50);
});

test('lines logged one at a time are written a few kilobytes at a time, not one write each', async () => {
  const file = path.join(dir, 'gateway.log');
  const destination = destinationOf(file);
  const writeSync = jest.spyOn(fs, 'writeSync');
  const log = createLogger('info', destination);
  const lines = 40;
  const began = Date.now();
  for (let n = 0; n < lines; n++) {
    log.info({ n, text: 'y'.repeat(150) }, 'line');
    await sleep(2); // each line on a turn of its own, as requests end: a write per turn would show here
  }
  const timedFlushes = Math.ceil((Date.now() - began) / GATHER_MS);
  destination.end();
  const writes = writeSync.mock.calls.length;
  writeSync.mockRestore();
  expect(readLines(file)).toHaveLength(lines);
  const bytes = readFileSync(file).length;
  // Writes of full batches, flushes on the timer, and the last one on close; one write a line is 40.
  expect(writes).toBeLessThanOrEqual(Math.ceil(bytes / GATHER_BYTES) + timedFlushes + 1);
  expect(writes).toBeLessThan(lines / 2);
});

test('a full batch of lines is written before the logging call returns, not by the thread pool later', () => {
  const file = path.join(dir, 'gateway.log');
  const destination = destinationOf(file);
  const log = createLogger('info', destination);
  // No turn of the event loop between the lines and the check: only a synchronous write is there yet.
  logLines(log, GATHER_BYTES);
  expect(readFileSync(file).length).toBeGreaterThanOrEqual(GATHER_BYTES);
  destination.end();
});

test('a write the destination takes only part of, or refuses for now (a full non-blocking pipe), is carried on: every byte once, in order', () => {
  const file = path.join(dir, 'gateway.log');
  const destination = destinationOf(file);
  const log = createLogger('info', destination);
  const realWriteSync = fs.writeSync;
  let calls = 0;
  let refused = 0;
  const writeSync = jest.spyOn(fs, 'writeSync').mockImplementation(((fd: number, buffer: Buffer, offset: number, length: number) => {
    if (calls++ % 3 === 0) {
      refused++;
      throw Object.assign(new Error('resource temporarily unavailable'), { code: 'EAGAIN', syscall: 'write' });
    }
    return realWriteSync(fd, buffer, offset, Math.min(length, 700)); // a pipe with 700 bytes of room
  }) as typeof fs.writeSync);
  let reports: string[] = [];
  try {
    reports = stderrWhile(() => logLines(log, 10 * GATHER_BYTES));
  } finally {
    writeSync.mockRestore();
  }
  const writtenMeanwhile = readFileSync(file).length;
  destination.end();
  expect(writtenMeanwhile).toBeGreaterThan(8 * GATHER_BYTES);
  expect(calls - refused).toBeGreaterThanOrEqual(Math.ceil(writtenMeanwhile / 700)); // each write cut short
  expect(refused).toBeGreaterThan(1);
  expect(reports).toEqual([]); // a pipe that is full for now has not failed
  const written = readLines(file).map((line) => JSON.parse(line).n as number);
  expect(written).toEqual(Array.from({ length: Math.ceil((10 * GATHER_BYTES) / 250) }, (_, n) => n));
});

test('a reader that stops reading stdout (a full pipe) holds the lines up, and gets every one, in order, once it reads again', async () => {
  const lines = 8000; // about 2 MiB: 30 times what a pipe holds
  const script = `const { createLogger, destinationOf } = require(${JSON.stringify(path.join(__dirname, '../../dist/telemetry/log.js'))});
    const log = createLogger('info', destinationOf('stdout'));
    for (let n = 0; n < ${lines}; n++) log.info({ n, text: 'y'.repeat(200) }, 'line');
    process.stderr.write('all logged\\n');`;
  const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  let stdout = '';
  // What this side had read of stdout when the child said it had logged everything: held up, the child
  // says it only once all but what a pipe, our buffer and its last batch hold was read, whenever it ran.
  let readWhenAllLogged = -1;
  child.stderr.on('data', (chunk: Buffer) => {
    stderr += chunk;
    if (readWhenAllLogged < 0 && stderr.includes('all logged')) readWhenAllLogged = stdout.length;
  });
  child.stdout.pause();
  // Not read: our buffer fills (the child is logging), then the pipe behind it.
  await eventually(() => (child.stdout.readableLength >= child.stdout.readableHighWaterMark ? true : undefined), 10_000);
  expect(stderr).toBe(''); // held up by the full pipe
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk));
  child.stdout.resume();
  const code = await new Promise((resolve) => child.on('close', resolve));
  expect(code).toBe(0);
  expect(stderr).toBe('all logged\n');
  expect(stdout.split('\n').filter(Boolean).map((line) => JSON.parse(line).n)).toEqual(Array.from({ length: lines }, (_, n) => n));
  expect(readWhenAllLogged).toBeGreaterThan(stdout.length - 256 * 1024);
});

test('a log file that cannot be opened stops start-up with the setting and the reason named', () => {
  const notAFolder = path.join(dir, 'plain-file');
  fs.writeFileSync(notAFolder, '');
  expect(() => destinationOf(path.join(notAFolder, 'gateway.log'))).toThrow(new RegExp(`^cannot open log.destination ${path.join(notAFolder, 'gateway.log')}: (EEXIST|ENOTDIR)`));
});

test('a lone line is written within the gathering time, with nothing else logged', async () => {
  const file = path.join(dir, 'gateway.log');
  const destination = destinationOf(file);
  createLogger('info', destination).info({ quiet: true }, 'alone');
  const began = Date.now();
  while (readLines(file).length === 0 && Date.now() - began < 20 * GATHER_MS) await sleep(5);
  expect(readLines(file).map((line) => JSON.parse(line).msg)).toEqual(['alone']);
  destination.end();
});

test('lines still gathered when the process exits are written', () => {
  const file = path.join(dir, 'gateway.log');
  const script = `const { createLogger, destinationOf } = require(${JSON.stringify(path.join(__dirname, '../../dist/telemetry/log.js'))});
    const destination = destinationOf(${JSON.stringify(file)});
    const log = createLogger('info', destination);
    for (let n = 0; n < 3; n++) log.info({ n }, 'before exit');
    process.exit(0);`;
  const child = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8' });
  expect(child.stderr).toBe('');
  expect(child.status).toBe(0);
  expect(readLines(file).map((line) => JSON.parse(line).n)).toEqual([0, 1, 2]);
});

test('a destination that refuses writes (a full disk) is reported once on stderr, and neither stops nor hangs the process', () => {
  const script = `const { createLogger, destinationOf } = require(${JSON.stringify(path.join(__dirname, '../../dist/telemetry/log.js'))});
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
  const script = `const { createLogger, destinationOf } = require(${JSON.stringify(path.join(__dirname, '../../dist/telemetry/log.js'))});
    const log = createLogger('info', destinationOf('/dev/full'));
    const held = () => process.memoryUsage().heapUsed + process.memoryUsage().external;
    global.gc();
    const before = held();
    const text = 'y'.repeat(200);
    for (let n = 0; n * 250 < ${MAX_WAITING_BYTES * 4}; n++) log.info({ n, text }, 'line');
    global.gc();
    process.stdout.write(String(held() - before));
    process.exit(0);`;
  const child = spawnSync(process.execPath, ['--expose-gc', '-e', script], { encoding: 'utf8', timeout: 60_000 });
  expect(child.status).toBe(0);
  expect(Number(child.stdout)).toBeGreaterThan(MAX_WAITING_BYTES / 2);
  expect(Number(child.stdout)).toBeLessThan(MAX_WAITING_BYTES * 2);
  expect(child.stderr.match(/newer lines are dropped/g)).toHaveLength(1);
});

test('a destination keeps its timer only while lines wait, so an idle process is not woken for it', () => {
  jest.useFakeTimers();
  const file = path.join(dir, 'gateway.log');
  const destination = destinationOf(file);
  try {
    const log = createLogger('info', destination);
    expect(jest.getTimerCount()).toBe(0);
    log.info({ n: 0 }, 'line');
    expect(jest.getTimerCount()).toBe(1);
    jest.advanceTimersByTime(GATHER_MS);
    expect(readLines(file)).toHaveLength(1);
    expect(jest.getTimerCount()).toBe(0);
  } finally {
    destination.end();
    jest.useRealTimers();
  }
});

test('lines a refusing destination holds are offered again on the timer, with nothing more logged', async () => {
  const file = path.join(dir, 'gateway.log');
  const destination = destinationOf(file);
  const log = createLogger('info', destination);
  const reports: string[] = [];
  const stderrWrite = jest.spyOn(process.stderr, 'write').mockImplementation((text) => reports.push(String(text)) > 0);
  const diskFreed = diskFull();
  try {
    const logged = logLines(log, 3 * GATHER_BYTES);
    // The timer finds the disk still full, twice: two more writes refused after those of the logging.
    const refusedWhileLogging = diskFreed.tries();
    await eventually(() => (diskFreed.tries() >= refusedWhileLogging + 2 ? true : undefined));
    diskFreed();
    expect(readLines(file)).toEqual([]);
    const began = Date.now();
    while (readLines(file).length < logged && Date.now() - began < 20 * GATHER_MS) await sleep(5);
    expect(readLines(file).map((line) => JSON.parse(line).n)).toEqual(Array.from({ length: logged }, (_, n) => n));
  } finally {
    diskFreed(); // also when an expectation failed first: no later test meets a full disk
    stderrWrite.mockRestore();
    destination.end();
  }
  expect(reports).toHaveLength(1); // the failure; nothing was dropped, so nothing more to say
  expect(reports[0]).toContain(`log destination ${file} failed (ENOSPC)`);
});

test('a destination that takes writes again gets the lines that waited, in order, and reports how many were dropped meanwhile', () => {
  const file = path.join(dir, 'gateway.log');
  const destination = destinationOf(file);
  const log = createLogger('info', destination);
  let logged = 0;
  const reports = stderrWhile(() => {
    const diskFreed = diskFull();
    logged = logLines(log, MAX_WAITING_BYTES + 20 * 250);
    diskFreed();
    destination.flushSync(); // as the gathering timer does
  });
  destination.end();
  const written = readLines(file).map((line) => JSON.parse(line).n as number);
  expect(readFileSync(file).length).toBeGreaterThan(MAX_WAITING_BYTES - 1024); // all that could wait, less than a line
  expect(readFileSync(file).length).toBeLessThanOrEqual(MAX_WAITING_BYTES);
  expect(written).toEqual(Array.from({ length: written.length }, (_, n) => n)); // the first ones, whole and in order
  expect(reports).toHaveLength(3); // failed, dropping, taking writes again
  expect(reports[0]).toContain(`log destination ${file} failed (ENOSPC); serving goes on`);
  expect(reports[1]).toContain('newer lines are dropped');
  expect(reports[2]).toContain(`takes writes again; ${logged - written.length} lines were dropped meanwhile`);
});

test('a destination destroyed just before the process exits lets it exit cleanly', () => {
  const file = path.join(dir, 'gateway.log');
  const script = `const { createLogger, destinationOf } = require(${JSON.stringify(path.join(__dirname, '../../dist/telemetry/log.js'))});
    const destination = destinationOf(${JSON.stringify(file)});
    createLogger('info', destination).info('before destroy');
    destination.destroy();
    process.exit(0);`;
  const child = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8', timeout: 10_000 });
  expect(child.stderr).toBe('');
  expect(child.status).toBe(0);
});

test('a refusing destination is reported once, and again only if it fails anew after taking a write', () => {
  const file = path.join(dir, 'gateway.log');
  const destination = destinationOf(file);
  const log = createLogger('info', destination);
  const reportCounts: number[] = [];
  const reports = stderrWhile((reportsSoFar) => {
    let diskFreed = diskFull();
    logLines(log, 3 * GATHER_BYTES, 0);
    destination.flushSync(); // offered again, refused again
    reportCounts.push(reportsSoFar.length);
    diskFreed();
    logLines(log, 3 * GATHER_BYTES, 100);
    destination.flushSync();
    reportCounts.push(reportsSoFar.length);
    diskFreed = diskFull();
    logLines(log, 3 * GATHER_BYTES, 200);
    diskFreed();
  });
  destination.end();
  expect(reportCounts).toEqual([1, 1]);
  expect(reports).toHaveLength(2);
  expect(reports[1]).toContain('failed (ENOSPC)');
  const written = readLines(file).map((line) => JSON.parse(line).n as number);
  expect(written.filter((n) => n < 100)).toEqual(Array.from({ length: written.filter((n) => n < 100).length }, (_, n) => n));
  expect(new Set(written).size).toBe(written.length);
  expect(written.length).toBe(3 * Math.ceil((3 * GATHER_BYTES) / 250)); // nothing was dropped: every line waited and was written
});

test('whatever lines come, and whatever each write meets (all taken, part taken, a full pipe, a full disk), every byte arrives once, in order, in writes of at most 4 KiB where lines allow', () => {
  const settings = { numRuns: 200, ...(process.env.CI ? { seed: 20261126 } : {}) };
  // A piece repeated: from empty lines to lines of 6,000 characters (a few beyond one 4 KiB write), in 1- to 4-byte characters.
  const line = fc.tuple(fc.string({ unit: fc.constantFrom('a', 'é', '€', '𝄞', '"', ' '), minLength: 1, maxLength: 20 }), fc.nat({ max: 300 })).map(([piece, times]) => `${piece.repeat(times)}\n`);
  const op = fc.oneof({ weight: 3, arbitrary: line.map((text) => ({ line: text })) }, { weight: 1, arbitrary: fc.constant({ flush: true as const }) });
  const outcome = fc.constantFrom('all', 'all', 'part', 'full-disk', 'full-pipe');
  fc.assert(
    fc.property(fc.array(op, { minLength: 10, maxLength: 60 }), fc.array(outcome, { minLength: 5, maxLength: 40 }), (ops, outcomes) => {
      const file = path.join(dir, 'property.log');
      const destination = destinationOf(file);
      const received: Buffer[] = [];
      const writeSizes: number[] = [];
      let fullPipes = 0;
      let call = 0;
      const writeSync = jest.spyOn(fs, 'writeSync').mockImplementation(((_fd: number, buffer: Buffer, offset: number, length: number) => {
        const met = outcomes[call++] ?? 'all';
        // One full pipe a run (each is waited on for 10 ms); a later one is taken as 'all'.
        if (met === 'full-pipe' && fullPipes++ < 1) throw Object.assign(new Error('resource temporarily unavailable'), { code: 'EAGAIN' });
        if (met === 'full-disk') throw Object.assign(new Error('no space left on device'), { code: 'ENOSPC' });
        const taken = met === 'part' ? Math.ceil(length / 3) : length;
        received.push(Buffer.from(buffer.subarray(offset, offset + taken)));
        writeSizes.push(length);
        return taken;
      }) as typeof fs.writeSync);
      const stderrWrite = jest.spyOn(process.stderr, 'write').mockImplementation(() => true);
      try {
        for (const step of ops) {
          if ('line' in step) destination.write(step.line);
          else destination.flushSync();
        }
        call = outcomes.length; // from here on every write is taken whole
        destination.flushSync();
      } finally {
        writeSync.mockRestore();
        stderrWrite.mockRestore();
        destination.destroy();
      }
      const lines = ops.flatMap((step) => ('line' in step ? [step.line] : []));
      expect(Buffer.concat(received).toString('utf8')).toBe(lines.join(''));
      const longestLine = Math.max(0, ...lines.map((text) => Buffer.byteLength(text)));
      for (const size of writeSizes) expect(size).toBeLessThanOrEqual(Math.max(4096, longestLine));
    }),
    settings,
  );
});
