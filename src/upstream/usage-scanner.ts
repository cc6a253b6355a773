/**
 * Finding an answer's own `usage` object by its structure, never by text: usageOf reads a usage
 * object's counts, and TopLevelUsageScanner follows a JSON answer's bytes as they pass, tracking
 * depth and strings, to find its top-level `usage` member (usage-meter.ts uses both).
 */
import type { TokenUsage } from '../context';

/**
 * Pure: the counts in an OpenAI `usage` object, if it is one, in each endpoint's shape: chat and
 * text completions report `prompt_tokens` and `completion_tokens`; embeddings `prompt_tokens` only
 * (nothing is generated); responses `input_tokens` and `output_tokens`.
 */
export function usageOf(value: unknown): TokenUsage | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const usage = value as Record<string, unknown>;
  const prompt = usage.prompt_tokens ?? usage.input_tokens;
  const completion = usage.completion_tokens ?? usage.output_tokens ?? (usage.prompt_tokens !== undefined ? 0 : undefined);
  if (!isCount(prompt) || !isCount(completion)) return undefined;
  const details = usage.prompt_tokens_details ?? usage.input_tokens_details;
  const cached = typeof details === 'object' && details !== null ? (details as Record<string, unknown>).cached_tokens : undefined;
  return isCount(cached) && cached > 0 ? { promptTokens: prompt, completionTokens: completion, cachedTokens: cached } : { promptTokens: prompt, completionTokens: completion };
}

/** Past any answer's tokens (a context window is at most millions): a larger count is not believed. */
const MAX_COUNT = 1e12;

/** A whole number of tokens, 0 to MAX_COUNT: a fraction, 1e300 or a negative count from a broken worker is not usage (it would make a cost no store column holds). */
function isCount(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0 && value <= MAX_COUNT;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const COMMA = 0x2c;
const COLON = 0x3a;
const USAGE_NAME = Buffer.from('usage');
/** Below depth 1, the bytes that matter: quotes and brackets. */
const STRUCTURAL = new Uint8Array(256);
for (const c of [QUOTE, OPEN_BRACE, CLOSE_BRACE, OPEN_BRACKET, CLOSE_BRACKET]) STRUCTURAL[c] = 1;
/** How far the scan looks byte by byte before it searches with indexOf. */
const NEAR_BYTES = 32;
/** A usage object is a few hundred bytes; a member this long is not one, and is not held. */
const MAX_USAGE_BYTES = 64 * 1024;

/**
 * The value of a JSON object's top-level `usage` member, read as the answer's bytes pass, without
 * keeping or decoding them: a scan that tracks strings and nesting depth, and copies only the bytes of
 * a `usage` member at depth 1 (then parses those). A `"usage"` anywhere else (inside `metadata` a
 * client sent and the worker echoed, inside the generated text) is not the answer's usage. Strings
 * are skipped with `indexOf` (memchr); the bytes outside them are looked at one by one.
 */
export class TopLevelUsageScanner {
  private depth = 0;
  private started = false;
  /** Not an object, malformed, or over: nothing more is read. */
  private done = false;
  private inString = false;
  /** The last chunk ended on a backslash inside a string: the next byte is escaped. */
  private escaped = false;
  /** At depth 1 the next string is a member name. */
  private expectName = false;
  /** Inside a depth-1 member name that matches `usage` so far: how many of its bytes. */
  private nameMatched = -1;
  /** A depth-1 `usage` name was read: its value comes next. */
  private usageNext = false;
  private captured: Buffer[] | undefined;
  private capturedBytes = 0;
  /**
   * Below depth 1 only strings and brackets matter: the next of each in the chunk, found with indexOf
   * and kept until passed (-2: not looked for yet in this chunk; -1: none left in it). Each search goes
   * on from the last one's find, so the chunk is searched once per character, not once per jump: the
   * numbers of a 3 MiB embeddings answer cost a memchr, not a JavaScript step per byte.
   */
  private nextQuote = -2;
  private nextOpenBrace = -2;
  private nextCloseBrace = -2;
  private nextOpenBracket = -2;
  private nextCloseBracket = -2;

  constructor(private readonly found: (value: unknown) => void) {}

  write(chunk: Buffer): void {
    if (this.done) return;
    const n = chunk.length;
    let captureFrom = this.captured ? 0 : -1;
    this.nextQuote = this.nextOpenBrace = this.nextCloseBrace = this.nextOpenBracket = this.nextCloseBracket = -2;
    let i = 0;
    while (i < n) {
      if (this.inString) {
        i = this.nameMatched >= 0 ? this.matchName(chunk, i) : this.skipString(chunk, i);
        continue;
      }
      if (this.depth >= 2) {
        // The next quote or bracket is most often a few bytes away: looked for byte by byte that far.
        const near = Math.min(n, i + NEAR_BYTES);
        while (i < near && STRUCTURAL[chunk[i]!] === 0) i++;
        if (i === n) break;
        if (i === near) {
          i = this.nextStructural(chunk, i);
          if (i === -1) break;
        }
      }
      const c = chunk[i]!;
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09 || c === COLON) {
        i++;
        continue;
      }
      if (!this.started) {
        this.started = true;
        if (c !== OPEN_BRACE) {
          this.stop();
          return;
        }
      }
      if (this.depth === 1 && this.usageNext) {
        this.usageNext = false;
        if (c === OPEN_BRACE) {
          this.captured = [];
          this.capturedBytes = 0;
          captureFrom = i;
        }
      }
      if (c === QUOTE) {
        this.inString = true;
        if (this.depth === 1 && this.expectName) {
          this.expectName = false;
          this.nameMatched = 0;
        }
      } else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
        if (++this.depth === 1) this.expectName = true;
      } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) {
        if (--this.depth === 1 && this.captured && captureFrom !== -1) {
          this.captureEnd(chunk.subarray(captureFrom, i + 1));
          captureFrom = -1;
        } else if (this.depth <= 0) {
          this.stop(); // the object is over (or was never one): what follows is not its member
          return;
        }
      } else if (c === COMMA) {
        if (this.depth === 1) this.expectName = true;
      }
      i++;
    }
    if (captureFrom !== -1 && this.captured) {
      this.capturedBytes += n - captureFrom;
      if (this.capturedBytes > MAX_USAGE_BYTES) this.captured = undefined;
      else this.captured.push(Buffer.from(chunk.subarray(captureFrom)));
    }
  }

  /** The index of the next quote or bracket at or after `from`, or -1. */
  private nextStructural(chunk: Buffer, from: number): number {
    if (this.nextQuote !== -1 && this.nextQuote < from) this.nextQuote = chunk.indexOf(QUOTE, from);
    if (this.nextOpenBrace !== -1 && this.nextOpenBrace < from) this.nextOpenBrace = chunk.indexOf(OPEN_BRACE, from);
    if (this.nextCloseBrace !== -1 && this.nextCloseBrace < from) this.nextCloseBrace = chunk.indexOf(CLOSE_BRACE, from);
    if (this.nextOpenBracket !== -1 && this.nextOpenBracket < from) this.nextOpenBracket = chunk.indexOf(OPEN_BRACKET, from);
    if (this.nextCloseBracket !== -1 && this.nextCloseBracket < from) this.nextCloseBracket = chunk.indexOf(CLOSE_BRACKET, from);
    return earliest(earliest(earliest(this.nextQuote, this.nextOpenBrace), earliest(this.nextCloseBrace, this.nextOpenBracket)), this.nextCloseBracket);
  }

  private stop(): void {
    this.done = true;
    this.captured = undefined;
  }

  private captureEnd(last: Buffer): void {
    const parts = this.captured!;
    this.captured = undefined;
    if (this.capturedBytes + last.length > MAX_USAGE_BYTES) return;
    const bytes = parts.length === 0 ? last : Buffer.concat([...parts, last]);
    try {
      this.found(JSON.parse(bytes.toString('utf8')));
    } catch {
      // not JSON after all: no usage
    }
  }

  /** Inside a depth-1 member name: compared with `usage` byte by byte while it still matches. */
  private matchName(chunk: Buffer, i: number): number {
    for (const n = chunk.length; i < n; i++) {
      const c = chunk[i]!;
      if (c === QUOTE) {
        this.inString = false;
        this.usageNext = this.nameMatched === USAGE_NAME.length;
        this.nameMatched = -1;
        return i + 1;
      }
      if (c === BACKSLASH || this.nameMatched === USAGE_NAME.length || c !== USAGE_NAME[this.nameMatched]) {
        this.nameMatched = -1; // another name (an escaped one too): the rest is skipped as any string
        return i;
      }
      this.nameMatched++;
    }
    return i;
  }

  /** Past the string's closing quote (inString cleared), or the chunk's end (inString kept). */
  private skipString(chunk: Buffer, i: number): number {
    const n = chunk.length;
    if (this.escaped) {
      this.escaped = false;
      if (++i >= n) return n;
    }
    for (;;) {
      const quote = chunk.indexOf(QUOTE, i);
      const end = quote === -1 ? n : quote;
      let backslashes = 0;
      for (let j = end - 1; j >= i && chunk[j] === BACKSLASH; j--) backslashes++;
      if (quote === -1) {
        this.escaped = (backslashes & 1) === 1;
        return n;
      }
      if ((backslashes & 1) === 0) {
        this.inString = false;
        return quote + 1;
      }
      i = quote + 1;
      if (i >= n) return n;
    }
  }
}

/** The earlier of two indexes, -1 being none. */
function earliest(a: number, b: number): number {
  return a === -1 ? b : b === -1 || a < b ? a : b;
}
