/**
 * Pure: a bound on the work JSON.parse would do, checked on the raw bytes as they arrive, before any
 * parsing. Nesting costs the parser (and the objects it builds) far more than text: 16 MiB of `[`
 * took 5 s of JSON.parse on the event loop and 561 MB of memory, while 16 MiB of prompt text is one
 * string. The scan counts nesting depth and values (array elements and object members) outside
 * strings, and stops at the first limit passed, so a body over it is refused after its first bytes
 * rather than after all of them; strings are skipped with indexOf, so a long prompt costs little.
 * A body that is not JSON at all passes, for JSON.parse to say where it breaks.
 */
const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const COMMA = 0x2c;

export type JsonBoundPassed = 'depth' | 'values';

/** Fed a body chunk by chunk, in order; says which bound the bytes so far passed, if any. */
export class JsonBoundsScanner {
  private depth = 0;
  private values = 0;
  private inString = false;
  /** Backslashes that ended the previous chunk, inside a string: they may escape this chunk's first quote. */
  private carriedBackslashes = 0;

  constructor(
    private readonly maxDepth: number,
    private readonly maxValues: number,
  ) {}

  feed(chunk: Uint8Array): JsonBoundPassed | undefined {
    const bytes = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
    let i = 0;
    while (i < bytes.length) {
      if (this.inString) {
        const quote = bytes.indexOf(QUOTE, i);
        if (quote === -1) {
          this.carriedBackslashes = backslashesBefore(bytes, i, bytes.length, this.carriedBackslashes);
          return undefined;
        }
        const escapes = backslashesBefore(bytes, i, quote, this.carriedBackslashes);
        this.carriedBackslashes = 0;
        if (escapes % 2 === 0) this.inString = false;
        i = quote + 1;
        continue;
      }
      const byte = bytes[i++];
      if (byte === QUOTE) {
        this.inString = true;
      } else if (byte === OPEN_ARRAY || byte === OPEN_OBJECT) {
        if (++this.depth > this.maxDepth) return 'depth';
        if (++this.values > this.maxValues) return 'values';
      } else if (byte === CLOSE_ARRAY || byte === CLOSE_OBJECT) {
        this.depth--;
      } else if (byte === COMMA) {
        if (++this.values > this.maxValues) return 'values';
      }
    }
    return undefined;
  }
}

/** Pure: the same check on a whole body at once. */
export function jsonBoundPassed(bytes: Uint8Array, maxDepth: number, maxValues: number): JsonBoundPassed | undefined {
  return new JsonBoundsScanner(maxDepth, maxValues).feed(bytes);
}

/** Backslashes right before `end`, counted back to `start`; when they reach `start`, those carried from before add on. */
function backslashesBefore(bytes: Buffer, start: number, end: number, carried: number): number {
  let run = 0;
  while (end - 1 - run >= start && bytes[end - 1 - run] === BACKSLASH) run++;
  return end - run === start ? run + carried : run;
}
