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
import { TopLevelUsageScanner, usageOf } from './usage-scanner';

export { TopLevelUsageScanner, usageOf } from './usage-scanner';

/** An "event" longer than this is no SSE event of a model's answer: pass it on rather than hold it. */
const MAX_PENDING_EVENT = 1024 * 1024;

/**
 * Reports an answer's usage once: the last seen (vLLM's continuous usage stats repeat a growing
 * total in every chunk), at the end, or also when it is cut short (proxy/relay.ts aborts the meter then).
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
 * What an answer that reported no usage is charged: the prompt estimate (common/estimate.ts) of the body
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
 * What proxy/relay.ts writes between the worker's answer and the client: each chunk goes through `relay`,
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
 * rather than a Transform: proxy/relay.ts writes what it returns straight to the client, so a stream holds
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
