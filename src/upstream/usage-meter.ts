/**
 * Token accounting while the answer streams through, never buffering it: a JSON answer passes
 * through while a scan reads its top-level `usage` member; an SSE answer is split into events as they
 * arrive, and the usage chunk is read (and dropped, when the gateway asked for it and the client had
 * not). Either way the client gets each byte as soon as it is complete. Usage is only ever the
 * answer's own `usage` object, found by the answer's structure: never a `"usage"` text a client can
 * have placed in it (its `metadata`, echoed by the worker, or words it made the model say).
 */
import { StringDecoder } from 'node:string_decoder';
import type { TokenUsage } from '../context';

/** An "event" longer than this is no SSE event of a model's answer: pass it on rather than hold it. */
const MAX_PENDING_EVENT = 1024 * 1024;

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
  return { promptTokens: prompt, completionTokens: completion };
}

function isCount(value: unknown): value is number {
  return typeof value === 'number' && Number.isFinite(value) && value >= 0;
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
        if (c !== OPEN_BRACE) return this.stop();
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
          return this.stop(); // the object is over (or was never one): what follows is not its member
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

/**
 * Reports an answer's usage once: the last seen (vLLM's continuous usage stats repeat a growing
 * total in every chunk), at the end, or also when it is cut short (proxy.ts aborts the meter then).
 * A 2xx answer that reported none is charged the estimate instead (see `UsageEstimate`). A listener
 * that throws is not allowed to break the answer's stream.
 */
class UsageReport {
  private last: TokenUsage | undefined;
  private reported = false;

  constructor(private readonly onUsage: (usage: TokenUsage) => void) {}

  saw(usage: TokenUsage | undefined): void {
    if (usage) this.last = usage;
  }

  report(estimate: () => TokenUsage): void {
    if (this.reported) return;
    this.reported = true;
    try {
      this.onUsage(this.last ?? estimate());
    } catch {
      // accounting must never cost the client its answer
    }
  }
}

/**
 * What an answer that reported no usage is charged: the prompt at one token per 4 bytes of the body
 * sent to the worker (`estimatePromptTokens`), and its output at one token per event of a stream (a
 * model's stream sends about one token an event) or per 4 bytes of a JSON answer; nothing for an
 * embeddings answer, which generates nothing.
 */
export interface UsageEstimate {
  promptTokens: number;
  /** Whether the answer generates tokens (not an embeddings answer). */
  generates: boolean;
}

export { estimatePromptTokens } from '../common/estimate';

/**
 * What proxy.ts writes between the worker's answer and the client: each chunk goes through `relay`,
 * and what it returns is written; `end` gives the rest when the answer is over, and reports usage;
 * `abort` reports it for an answer cut short.
 */
export interface AnswerRelay {
  relay(chunk: Buffer): Buffer | string;
  end(): string;
  abort(): void;
  /** The client is gone: `relay` goes on reading, and need not return anything. */
  discard?(): void;
}

/**
 * A JSON answer's usage, read from its top-level `usage` member as it passes (a tap: every chunk goes
 * on unchanged, and nothing is kept but the bytes of that member).
 */
export class JsonUsageMeter implements AnswerRelay {
  private readonly usage: UsageReport;
  private readonly scanner: TopLevelUsageScanner;
  private bytes = 0;

  constructor(
    onUsage: (usage: TokenUsage) => void,
    private readonly estimate: UsageEstimate = { promptTokens: 0, generates: true },
  ) {
    this.usage = new UsageReport(onUsage);
    this.scanner = new TopLevelUsageScanner((value) => this.usage.saw(usageOf(value)));
  }

  /** Reads the chunk and passes it on as it is. */
  relay(chunk: Buffer): Buffer {
    this.bytes += chunk.length;
    this.scanner.write(chunk);
    return chunk;
  }

  end(): string {
    this.abort();
    return '';
  }

  abort(): void {
    this.usage.report(() => ({ promptTokens: this.estimate.promptTokens, completionTokens: this.estimate.generates ? Math.ceil(this.bytes / 4) : 0 }));
  }
}

/**
 * A stream's relay: what arrives is split into whole events, and `relay` returns the text to pass on
 * (the usage chunk left out when the gateway asked for it and the client had not). A plain object
 * rather than a Transform: proxy.ts writes what it returns straight to the client, so a stream holds
 * no stream of its own between the two sockets (and no pipe's closures).
 *
 * Usage is read structurally: only an event whose text names `"usage"` is parsed (whole, as JSON; an
 * event is at most MAX_PENDING_EVENT long), and only its top-level `usage` (a chat or text completion
 * chunk) or its `response.usage` (a responses event: `response.completed`) counts.
 */
export class SseUsageMeter implements AnswerRelay {
  private pending = '';
  private readonly decoder = new StringDecoder('utf8');
  private readonly usage: UsageReport;
  private events = 0;
  /** The client is gone: events are still read for their usage, and no longer given back. */
  private discarding = false;

  /** @param dropUsageChunk the client did not ask for the usage chunk: the gateway did, for itself. */
  constructor(
    private readonly dropUsageChunk: boolean,
    onUsage: (usage: TokenUsage) => void,
    private readonly estimate: UsageEstimate = { promptTokens: 0, generates: true },
  ) {
    this.usage = new UsageReport(onUsage);
  }

  /** The complete events in what has arrived so far ('' until one is complete). */
  relay(chunk: Buffer): string {
    this.pending += this.decoder.write(chunk);
    let out = '';
    for (let end = eventEnd(this.pending); end !== -1; end = eventEnd(this.pending)) {
      const event = this.pending.slice(0, end);
      this.pending = this.pending.slice(end);
      this.events++;
      if (!this.isDroppedUsageChunk(event) && !this.discarding) out += event;
    }
    if (this.pending.length > MAX_PENDING_EVENT) {
      if (!this.discarding) out += this.pending;
      this.pending = '';
    }
    return out;
  }

  /** The client left: what still arrives is read for its usage only. */
  discard(): void {
    this.discarding = true;
  }

  /** The answer ended: what is left of it (an unfinished last event passes as it is); usage is reported. */
  end(): string {
    const rest = this.pending + this.decoder.end();
    this.pending = '';
    this.abort();
    return rest;
  }

  /** Cut short (client gone, worker failed): what was used so far is still charged. */
  abort(): void {
    this.usage.report(() => ({ promptTokens: this.estimate.promptTokens, completionTokens: this.estimate.generates ? this.events : 0 }));
  }

  private isDroppedUsageChunk(event: string): boolean {
    if (!event.includes('"usage"')) return false;
    const data = event
      .split(/\r?\n/)
      .filter((line) => line.startsWith('data:'))
      .map((line) => line.slice(5).trimStart())
      .join('\n');
    let payload: unknown;
    try {
      payload = JSON.parse(data);
    } catch {
      return false;
    }
    if (typeof payload !== 'object' || payload === null || Array.isArray(payload)) return false;
    const { usage, response, choices } = payload as { usage?: unknown; response?: unknown; choices?: unknown };
    // A responses stream reports it in its last event, response.completed: {"response": {..., "usage"}}.
    const found = usageOf(usage ?? (typeof response === 'object' && response !== null ? (response as { usage?: unknown }).usage : undefined));
    this.usage.saw(found);
    return Boolean(found) && this.dropUsageChunk && Array.isArray(choices) && choices.length === 0;
  }
}

/** Index just past the blank line that ends the first complete event, or -1. */
function eventEnd(text: string): number {
  const lf = text.indexOf('\n\n');
  const crlf = text.indexOf('\r\n\r\n');
  if (lf === -1 && crlf === -1) return -1;
  if (crlf === -1 || (lf !== -1 && lf < crlf)) return lf + 2;
  return crlf + 4;
}
