/** The process logger: JSON lines (pino). Credentials are redacted wherever a header object is logged. */
import pino from 'pino';
import { LogDestination } from '../tuning/log-destination';

export type Logger = pino.Logger;

/** stdout, stderr, or a file path (appended to, created if missing): see tuning/log-destination.ts. */
export function destinationOf(name: string): LogDestination {
  return new LogDestination(name);
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
 * its instructions per request (callgrind). Here the same line, byte for byte (test/telemetry/log.test.ts
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
