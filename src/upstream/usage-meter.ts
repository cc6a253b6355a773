/**
 * Token accounting while the answer streams through, never buffering it: a JSON answer passes
 * through while its last few KiB are kept to read `usage` at the end; an SSE answer is split into
 * events as they arrive, and the usage chunk is read (and dropped, when the gateway asked for it and
 * the client had not). Either way the client gets each byte as soon as it is complete.
 */
import { StringDecoder } from 'node:string_decoder';
import type { TokenUsage } from '../context';

const JSON_TAIL_BYTES = 16 * 1024;
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

const MAX_TAIL_CHUNKS = 64;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;

/** Pure: the last `"usage": {...}` object in the bytes, read without decoding or parsing the rest. */
export function usageInTail(tail: Buffer): TokenUsage | undefined {
  const at = tail.lastIndexOf('"usage"');
  if (at === -1) return undefined;
  const open = tail.indexOf(OPEN_BRACE, at);
  if (open === -1) return undefined;
  let depth = 0;
  for (let i = open; i < tail.length; i++) {
    if (tail[i] === OPEN_BRACE) depth++;
    else if (tail[i] === CLOSE_BRACE && --depth === 0) {
      try {
        return usageOf(JSON.parse(tail.toString('utf8', open, i + 1)));
      } catch {
        return undefined;
      }
    }
  }
  return undefined;
}

/**
 * Reports an answer's usage once: the last seen (vLLM's continuous usage stats repeat a growing
 * total in every chunk), at the end, or for a stream also when it is cut short (proxy.ts destroys
 * the meter then). A listener that throws is not allowed to break the answer's stream.
 */
class UsageReport {
  private last: TokenUsage | undefined;
  private reported = false;

  constructor(private readonly onUsage: (usage: TokenUsage) => void) {}

  saw(usage: TokenUsage | undefined): void {
    if (usage) this.last = usage;
  }

  report(): void {
    if (this.reported || !this.last) return;
    this.reported = true;
    try {
      this.onUsage(this.last);
    } catch {
      // accounting must never cost the client its answer
    }
  }
}

/**
 * What proxy.ts writes between the worker's answer and the client: each chunk goes through `relay`,
 * and what it returns is written; `end` gives the rest when the answer is over, and reports usage.
 */
export interface AnswerRelay {
  relay(chunk: Buffer): Buffer | string;
  end(): string;
}

/**
 * A JSON answer's usage, read from its last few KiB as it passes (a tap: every chunk goes on unchanged).
 * It keeps the answer's last chunks as they are, at least JSON_TAIL_BYTES of them and at most that plus
 * one chunk (a socket read, 64 KiB at most); nothing is decoded but the usage object at the end.
 */
export class JsonUsageMeter implements AnswerRelay {
  private tail: Buffer[] = [];
  private tailBytes = 0;
  private readonly usage: UsageReport;

  constructor(onUsage: (usage: TokenUsage) => void) {
    this.usage = new UsageReport(onUsage);
  }

  /** Keeps the chunk for the tail and passes it on as it is. */
  relay(chunk: Buffer): Buffer {
    this.tail.push(chunk);
    this.tailBytes += chunk.length;
    while (this.tailBytes - this.tail[0]!.length >= JSON_TAIL_BYTES) this.tailBytes -= this.tail.shift()!.length;
    // Many small reads (an upstream writing a byte at a time) are joined into one buffer every
    // MAX_TAIL_CHUNKS, so keeping them costs amortised O(1) per chunk, not a shift() over thousands.
    if (this.tail.length > MAX_TAIL_CHUNKS) {
      const joined = Buffer.concat(this.tail, this.tailBytes);
      this.tail = [joined.subarray(Math.max(0, joined.length - JSON_TAIL_BYTES))];
      this.tailBytes = this.tail[0]!.length;
    }
    return chunk;
  }

  end(): string {
    const tail = this.tail.length === 1 ? this.tail[0]! : Buffer.concat(this.tail);
    this.tail = [];
    this.usage.saw(usageInTail(tail));
    this.usage.report();
    return '';
  }
}

/**
 * A stream's relay: what arrives is split into whole events, and `relay` returns the text to pass on
 * (the usage chunk left out when the gateway asked for it and the client had not). A plain object
 * rather than a Transform: proxy.ts writes what it returns straight to the client, so a stream holds
 * no stream of its own between the two sockets (and no pipe's closures).
 */
export class SseUsageMeter implements AnswerRelay {
  private pending = '';
  private readonly decoder = new StringDecoder('utf8');
  private readonly usage: UsageReport;

  /** @param dropUsageChunk the client did not ask for the usage chunk: the gateway did, for itself. */
  constructor(
    private readonly dropUsageChunk: boolean,
    onUsage: (usage: TokenUsage) => void,
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
      if (!this.isDroppedUsageChunk(event)) out += event;
    }
    if (this.pending.length > MAX_PENDING_EVENT) {
      out += this.pending;
      this.pending = '';
    }
    return out;
  }

  /** The answer ended: what is left of it (an unfinished last event passes as it is); usage is reported. */
  end(): string {
    const rest = this.pending + this.decoder.end();
    this.pending = '';
    this.usage.report();
    return rest;
  }

  /** Cut short (client gone, worker failed): what was used so far is still charged. */
  abort(): void {
    this.usage.report();
  }

  private isDroppedUsageChunk(event: string): boolean {
    if (!event.includes('"usage"')) return false;
    const data = event
      .split(/\r?\n/)
      .filter((line) => line.startsWith('data:'))
      .map((line) => line.slice(5).trimStart())
      .join('\n');
    let payload: { usage?: unknown; choices?: unknown; response?: { usage?: unknown } };
    try {
      payload = JSON.parse(data);
    } catch {
      return false;
    }
    // A responses stream reports it in its last event, response.completed: {"response": {..., "usage"}}.
    const usage = usageOf(payload.usage ?? payload.response?.usage);
    this.usage.saw(usage);
    return Boolean(usage) && this.dropUsageChunk && Array.isArray(payload.choices) && payload.choices.length === 0;
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
