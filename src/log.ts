/** The process logger: JSON lines (pino). Credentials are redacted wherever a header object is logged. */
import pino from 'pino';

export type Logger = pino.Logger;

/**
 * While a write is under way, sonic-boom appends each new line to its pending text and measures that
 * whole text again, copying up to `maxWrite` bytes per line. 4 KiB instead of its 16 KiB default halves
 * the CPU per line under load (bursts of 40 lines: 4.2-4.8 -> 2.1-2.8 us) for a few more write calls.
 */
const MAX_WRITE_BYTES = 4096;

/**
 * Lines are gathered until this much is pending, or for at most GATHER_MS, then written in one call:
 * 1.11x the requests/s at saturation against a write per line (median of 5 paired rounds).
 * What is pending when the process exits is written then (flushAll below).
 */
export const GATHER_BYTES = 2048;
export const GATHER_MS = 100;

/**
 * Gathered lines are written synchronously, as Node writes process.stdout to files and pipes and as
 * pino does by default. An asynchronous write goes through libuv's thread pool: a futex to wake a
 * pool thread on the other core, and an eventfd to wake the event loop when it is done. Synchronous:
 * 1.11x the requests/s at saturation (5 paired rounds, 0.95-1.13x) and 407 -> 377 us of CPU per
 * request at 1,500/s. The cost: a destination that stops reading (a full pipe) holds the gateway up
 * rather than its memory growing without bound.
 */
const WRITE_SYNCHRONOUSLY = true;

/**
 * While a destination refuses writes (a full disk), lines wait in memory up to this much; newer ones
 * are dropped, counted, and the count reported once it takes writes again. Unbounded, a full disk grew
 * the process by 40 MB in 3 s of logging.
 */
export const MAX_WAITING_BYTES = 16 * 1024 * 1024;

type Destination = ReturnType<typeof pino.destination>;

/**
 * stdout, stderr, or a file path (appended to, created if missing). A destination that refuses
 * writes (a full disk) does not stop the gateway: it is reported on stderr once, and again only if it
 * fails anew after taking a write. Lines that did not fit in MAX_WAITING_BYTES meanwhile are reported
 * as a count when it takes writes again.
 */
export function destinationOf(name: string): pino.DestinationStream {
  const buffering = { sync: WRITE_SYNCHRONOUSLY, maxWrite: MAX_WRITE_BYTES, minLength: GATHER_BYTES, periodicFlush: GATHER_MS, maxLength: MAX_WAITING_BYTES };
  if (name === 'stdout') return watched(name, pino.destination({ fd: 1, ...buffering }));
  if (name === 'stderr') return watched(name, pino.destination({ fd: 2, ...buffering }));
  return watched(name, pino.destination({ dest: name, mkdir: true, append: true, ...buffering }));
}

/**
 * Open destinations, and whether each is refusing writes. pino writes out what a destination still
 * gathers at exit only for asynchronous ones: the others are flushed here, except those refusing
 * writes, since sonic-boom's flushSync would retry them for ever and the process would never exit.
 */
const openDestinations = new Map<Destination, { refusing: boolean; dropped: number }>();
let flushAtExitRegistered = false;

function watched(name: string, destination: Destination): Destination {
  if (!flushAtExitRegistered) process.once('exit', flushAll);
  flushAtExitRegistered = true;
  const state = { refusing: false, dropped: 0 };
  openDestinations.set(destination, state);
  destination.on('error', (err: NodeJS.ErrnoException) => {
    if (!state.refusing) process.stderr.write(`chatgate: log destination ${name} failed (${err.code ?? err.message}); serving goes on\n`);
    state.refusing = true;
  });
  destination.on('drop', () => {
    if (state.dropped++ === 0) process.stderr.write(`chatgate: log destination ${name} holds ${MAX_WAITING_BYTES / 2 ** 20} MiB of lines it refused; newer lines are dropped until it takes writes again\n`);
  });
  destination.on('write', () => {
    if (state.dropped > 0) process.stderr.write(`chatgate: log destination ${name} takes writes again; ${state.dropped} lines were dropped meanwhile\n`);
    state.refusing = false;
    state.dropped = 0;
  });
  destination.once('close', () => openDestinations.delete(destination));
  return destination;
}

function flushAll(): void {
  for (const [destination, { refusing }] of openDestinations) {
    if (refusing) continue;
    try {
      destination.flushSync();
    } catch {
      // Destroyed just before exit, its 'close' not yet emitted: nothing more can reach it.
    }
  }
}

/** Each logger's destination, for its access lines (pino keeps its own out of reach). */
const destinations = new WeakMap<Logger, pino.DestinationStream>();

/** Fields of every line; pid: which serving process, in cluster mode. */
const baseFields = () => ({ service: 'chatgate', pid: process.pid });

export function createLogger(level: string, destination: pino.DestinationStream = destinationOf('stdout')): Logger {
  const logger = pino(
    {
      level,
      base: baseFields(),
      redact: { paths: ['*.authorization', '*.cookie', '*.headers.authorization', '*.headers.cookie'], censor: '[redacted]' },
    },
    destination,
  );
  destinations.set(logger, destination);
  return logger;
}

/**
 * The access log: one line per request, with fixed fields that hold no headers (so nothing to redact).
 * pino serialises a line field by field: 8.9 us per access line in the gateway under load, 13 % of
 * its instructions per request (callgrind). Here the same line, byte for byte (test/unit/log.test.ts
 * compares them), is one JSON.stringify of the fields between pino's opening and its message, written
 * to the logger's destination, at the logger's info level.
 */
export function accessLogOf(log: Logger): AccessLog {
  const destination = destinations.get(log);
  if (!destination) throw new Error('the access log needs a logger made by createLogger');
  const bindings = JSON.stringify({ ...baseFields(), log: 'access' }).slice(1, -1);
  const level = log.levels.values.info;
  return function writeAccessLine(fields, message = 'request') {
    if (!log.isLevelEnabled('info')) return;
    const rest = JSON.stringify(fields).slice(1, -1);
    destination.write(`{"level":${level},"time":${Date.now()},${bindings}${rest === '' ? '' : ','}${rest},"msg":${JSON.stringify(message)}}\n`);
  };
}

/** Writes one access line: a request's fields, and what happened ('request' for an answered one). */
export type AccessLog = (fields: object, message?: string) => void;
