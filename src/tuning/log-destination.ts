/**
 * Where log lines go: stdout, stderr or a file (appended to, created with its folder if missing).
 * Lines are gathered as bytes in one buffer and written synchronously once GATHER_BYTES are pending,
 * within GATHER_MS otherwise, and when the process exits. The GATHER_MS timer runs only while lines
 * are pending: an idle gateway is not woken to find nothing to write.
 *
 * pino's own destination (sonic-boom) keeps pending lines as one string: each line appended to it had
 * V8 copy and re-measure the whole pending text, and each write encoded that text twice. An access
 * line cost 0.85-1.3 µs there and 0.2 µs here (a loop of 300,000 lines to /dev/null). The A/B against
 * `pino.destination({ minLength, sync: false })` in one process that keeps it is in README.md here.
 *
 * Synchronous, as Node writes process.stdout to files and pipes: an asynchronous write goes through
 * libuv's thread pool, a futex to wake a pool thread on the other core and an eventfd to wake the event
 * loop when it is done (1.11x the requests/s at saturation synchronous, 5 paired rounds). So a reader
 * that stops reading (a full pipe) holds the gateway up rather than its memory growing without bound.
 *
 * A destination that refuses writes (a full disk) does not stop the gateway: it is reported on stderr
 * once, and again only if it fails anew after taking a write. Lines wait in memory for it up to
 * MAX_WAITING_BYTES and are offered again every GATHER_MS; newer ones are dropped, counted, and the
 * count reported once it takes writes again.
 */
import fs from 'node:fs';
import path from 'node:path';

/** 1.11x the requests/s at saturation against a write per line (median of 5 paired rounds). */
export const GATHER_BYTES = 2048;
export const GATHER_MS = 100;
/** Unbounded, a full disk grew the process by 40 MB in 3 s of logging. */
export const MAX_WAITING_BYTES = 16 * 1024 * 1024;
/**
 * The gathering buffer's size. Writes to a pipe of up to PIPE_BUF bytes (4,096 on Linux) are never
 * interleaved with other writers' (the serving processes of cluster mode share stdout).
 */
const CHUNK_BYTES = 4096;
/** A full non-blocking pipe is waited on in steps of this much, as a write to a blocking one waits. */
const FULL_PIPE_WAIT_MS = 10;
const sleeper = new Int32Array(new SharedArrayBuffer(4));

/** Open destinations, written out at exit. */
const open = new Set<LogDestination>();
let flushAtExitRegistered = false;

export class LogDestination {
  private readonly fd: number;
  private readonly ownsFd: boolean;
  /** Chunks a refusing destination has not taken yet, oldest first; after them, `buffer` up to `gathered`. */
  private readonly waiting: Buffer[] = [];
  private waitingBytes = 0;
  private buffer = Buffer.allocUnsafeSlow(CHUNK_BYTES);
  private gathered = 0;
  private refusing = false;
  private dropped = 0;
  private closed = false;
  private timer: NodeJS.Timeout | undefined;

  /** `name`: stdout, stderr, or a file's path. */
  constructor(private readonly name: string) {
    if (name === 'stdout' || name === 'stderr') {
      this.fd = name === 'stdout' ? 1 : 2;
      this.ownsFd = false;
    } else {
      try {
        fs.mkdirSync(path.dirname(name), { recursive: true });
        this.fd = fs.openSync(name, 'a');
      } catch (err) {
        throw new Error(`cannot open log.destination ${name}: ${(err as Error).message}`);
      }
      this.ownsFd = true;
    }
    open.add(this);
    if (!flushAtExitRegistered) {
      process.once('exit', () => {
        for (const destination of open) destination.flushSync();
      });
    }
    flushAtExitRegistered = true;
  }

  /** Whole lines, each ending in a newline, as pino gives them. */
  write(lines: string): boolean {
    if (this.closed) return false;
    // A UTF-16 unit is at most 3 bytes of UTF-8: most lines are gathered without being measured first.
    if (!this.refusing && lines.length * 3 <= this.buffer.length - this.gathered) this.gathered += this.buffer.write(lines, this.gathered);
    else this.gatherMeasured(lines);
    if (this.gathered >= GATHER_BYTES && !this.refusing) this.writeOut();
    if (this.pending()) this.timer ??= setTimeout(this.flushOnTimer, GATHER_MS).unref();
    return true;
  }

  /** A refusing destination keeps the timer, to be offered its lines again. */
  private readonly flushOnTimer = (): void => {
    this.timer = undefined;
    this.flushSync();
    if (!this.closed && this.pending()) this.timer = setTimeout(this.flushOnTimer, GATHER_MS).unref();
  };

  private pending(): boolean {
    return this.gathered > 0 || this.waiting.length > 0;
  }

  /** pino's `logger.flush()`. */
  flush(done?: (err?: Error) => void): void {
    this.flushSync();
    done?.();
  }

  /** Writes what is pending now; a refusing destination is offered it again. */
  flushSync(): void {
    if (this.pending()) this.writeOut();
  }

  /** Writes what is pending and closes the file; later lines are not written. */
  end(): void {
    this.flushSync();
    this.destroy();
  }

  /** Closes the file at once, without writing what is pending. */
  destroy(): void {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.timer);
    open.delete(this);
    if (this.ownsFd) fs.closeSync(this.fd);
  }

  private gatherMeasured(lines: string): void {
    const bytes = Buffer.byteLength(lines);
    if (this.refusing && this.waitingBytes + this.gathered + bytes > MAX_WAITING_BYTES) {
      if (this.dropped++ === 0) process.stderr.write(`chatgate: log destination ${this.name} holds ${MAX_WAITING_BYTES / 2 ** 20} MiB of lines it refused; newer lines are dropped until it takes writes again\n`);
      return;
    }
    if (this.gathered + bytes > this.buffer.length) {
      if (this.gathered > 0 && !this.refusing) this.writeOut();
      if (this.gathered > 0) this.setAside(); // refused, before or just now
      if (bytes > this.buffer.length) this.buffer = Buffer.allocUnsafeSlow(bytes);
    }
    this.gathered += this.buffer.write(lines, this.gathered);
  }

  /** The gathered bytes wait as a chunk of their own, and gathering goes on in a new buffer. */
  private setAside(): void {
    this.waiting.push(this.buffer.subarray(0, this.gathered));
    this.waitingBytes += this.gathered;
    this.buffer = Buffer.allocUnsafeSlow(CHUNK_BYTES);
    this.gathered = 0;
  }

  /** The waiting chunks, then the gathered bytes, in order, up to the first refusal; the rest stays. */
  private writeOut(): void {
    if (this.closed) return;
    let error: NodeJS.ErrnoException | undefined;
    while (this.waiting.length > 0 && !error) {
      const chunk = this.waiting[0]!;
      const taken = this.offer(chunk, chunk.length);
      this.waitingBytes -= taken.written;
      error = taken.error;
      if (error) this.waiting[0] = chunk.subarray(taken.written);
      else this.waiting.shift();
    }
    if (!error && this.gathered > 0) {
      const taken = this.offer(this.buffer, this.gathered);
      error = taken.error;
      this.buffer.copy(this.buffer, 0, taken.written, this.gathered);
      this.gathered -= taken.written;
    }
    if (error) {
      if (!this.refusing) process.stderr.write(`chatgate: log destination ${this.name} failed (${error.code ?? error.message}); serving goes on\n`);
      this.refusing = true;
      return;
    }
    if (this.dropped > 0) process.stderr.write(`chatgate: log destination ${this.name} takes writes again; ${this.dropped} lines were dropped meanwhile\n`);
    this.refusing = false;
    this.dropped = 0;
    if (this.buffer.length > CHUNK_BYTES) this.buffer = Buffer.allocUnsafeSlow(CHUNK_BYTES); // a long line's buffer is not kept
  }

  /** How many of `chunk`'s first `length` bytes the destination took, across partial writes, and what stopped it. */
  private offer(chunk: Buffer, length: number): { written: number; error?: NodeJS.ErrnoException } {
    let written = 0;
    while (written < length) {
      try {
        written += fs.writeSync(this.fd, chunk, written, length - written);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EAGAIN') return { written, error: err as NodeJS.ErrnoException };
        Atomics.wait(sleeper, 0, 0, FULL_PIPE_WAIT_MS);
      }
    }
    return { written };
  }
}
