/** The process logger: JSON lines (pino). Credentials are redacted wherever a header object is logged. */
import pino from 'pino';

export type Logger = pino.Logger;

/** stdout, stderr, or a file path (appended to, created if missing). */
export function destinationOf(name: string): pino.DestinationStream {
  if (name === 'stdout') return pino.destination({ fd: 1, sync: false });
  if (name === 'stderr') return pino.destination({ fd: 2, sync: false });
  return pino.destination({ dest: name, sync: false, mkdir: true, append: true });
}

export function createLogger(level: string, destination?: pino.DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: 'chatgate', pid: process.pid }, // pid: which serving process, in cluster mode
      redact: { paths: ['*.authorization', '*.cookie', '*.headers.authorization', '*.headers.cookie'], censor: '[redacted]' },
    },
    destination ?? pino.destination({ fd: 1, sync: false }),
  );
}
