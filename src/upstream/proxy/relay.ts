/**
 * The relay: a worker's answer streamed back to the client as it comes, through its usage meter (a
 * JSON answer chunk by chunk, a stream event by event), the worker paused while the client's side is
 * full; its usage charged (the answer's own, or the estimate when it reports none); a worker failing
 * mid-answer ended for the client (a stream with a final SSE `error` event in the OpenAI shape); and
 * the answer to a client that already left, read only for its usage.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { required, type RequestContext, type TokenUsage } from '../../context';
import type { Metrics } from '../../telemetry/metrics';
import { sendStreamHead } from '../../tuning/stream-head';
import type { Outcome } from '../pool';
import type { Provider } from '../providers';
import { estimatePromptTokens, JsonUsageMeter, SseUsageMeter, type AnswerRelay } from '../usage-meter';
import { linkAttempt, workerLabels, type Attempt } from './attempt';
import { failureMidAnswer, type AttemptClock } from './deadlines';

const RELEASED_BODY = Buffer.alloc(0);

export interface ProxyEvents {
  /** A worker of this provider reported the tokens its answer used. */
  usage(context: RequestContext, provider: Provider, usage: TokenUsage): void;
}

/** The proxy's relay, one per proxy. */
export class Relay {
  constructor(
    private readonly clock: AttemptClock,
    private readonly metrics: Metrics,
    private readonly events: ProxyEvents,
    private readonly options: { readonly drainAfterDisconnectMs: number },
  ) {}

  /** The worker's answer to a client still there, its status and headers set: relayed as it comes. */
  relay(attempt: Attempt, upstreamResponse: IncomingMessage, res: ServerResponse, status: number): void {
    const stream = isStream(upstreamResponse);
    const reportUsage = this.usageReporter(attempt, status);
    this.clock.arm(attempt, 'idle', attempt.provider.settings.idleTimeoutMs);
    const estimate = this.estimateOf(attempt);
    let meter: AnswerRelay;
    let timeTokens: (() => void) | undefined;
    if (stream) {
      res.removeHeader('content-length'); // a dropped usage chunk changes the length
      meter = new SseUsageMeter(attempt.target.dropUsageChunk, reportUsage, estimate);
      timeTokens = this.tokenTimer(attempt);
      sendStreamHead(res);
    } else {
      meter = new JsonUsageMeter(reportUsage, estimate);
    }
    attempt.meter = meter;
    if (status < 300) attempt.upstreamResponse = upstreamResponse; // only a 2xx answer is read on for its usage
    // One relay for both kinds, with backpressure as pipe() would: a client that reads slowly holds the
    // worker back. pipe() itself would add and later remove eight listeners per answer.
    upstreamResponse.on('data', (chunk: Buffer) => {
      if (attempt.draining) {
        meter.relay(chunk);
        return;
      }
      this.clock.stillAnswering(attempt);
      timeTokens?.();
      const out = meter.relay(chunk);
      if (out.length > 0 && !res.write(out)) upstreamResponse.pause();
    });
    res.on('drain', () => upstreamResponse.resume());
    upstreamResponse.on('end', () => {
      const rest = meter.end();
      if (!attempt.draining) res.end(rest);
      this.clock.settle(attempt, outcomeOfAnswer(upstreamResponse.statusCode ?? 502));
    });
    upstreamResponse.on('close', () => {
      if (upstreamResponse.complete || attempt.settled) return;
      if (attempt.draining) {
        // The drain's deadline passed (or the worker hung up): the client had left, the worker is not at fault.
        this.clock.settle(attempt, 'neutral');
        meter.abort();
        return;
      }
      this.clock.settle(attempt, 'failure');
      this.metrics.streamFailures.series(workerLabels(attempt)).inc();
      meter.abort(); // charges the usage seen so far, or the estimate
      endBrokenAnswer(res, attempt);
    });
  }

  /** The answer to a client that left before it began: read to its end for its usage, nothing relayed. */
  readForUsage(attempt: Attempt, upstreamResponse: IncomingMessage, res: ServerResponse): void {
    linkAttempt(res, undefined);
    attempt.answering = true;
    if (attempt.phase !== 'drain') this.clock.arm(attempt, 'drain', this.options.drainAfterDisconnectMs); // it answered: the drain bounds the rest
    const status = upstreamResponse.statusCode ?? 502;
    const reportUsage = this.usageReporter(attempt, status);
    const estimate = this.estimateOf(attempt);
    const meter: AnswerRelay = isStream(upstreamResponse) ? new SseUsageMeter(true, reportUsage, estimate) : new JsonUsageMeter(reportUsage, estimate);
    meter.discard?.();
    attempt.meter = meter;
    upstreamResponse.on('data', (chunk: Buffer) => meter.relay(chunk));
    upstreamResponse.on('end', () => {
      meter.end();
      this.clock.settle(attempt, outcomeOfAnswer(status));
    });
    upstreamResponse.on('close', () => {
      if (upstreamResponse.complete || attempt.settled) return;
      this.clock.settle(attempt, 'neutral'); // the drain's deadline passed, or the worker hung up: the client had left first
      meter.abort();
    });
  }

  /**
   * No answer came to a client that left after its request reached the worker: it is charged what
   * the request may have cost, its prompt estimate and the output bound the worker was given (its
   * own, or the one the quota wrote for it), for each answer it asked for; else leaving before the
   * answer (a JSON answer begins only once it is generated) would make any request free.
   */
  chargeUnanswered(attempt: Attempt): void {
    const { context } = attempt;
    const request = context.modelRequest;
    const perOutput = context.reservedOutputBound ?? request?.maxOutputTokens ?? 0;
    const generates = attempt.target.endpoint !== 'embeddings';
    const usage = { promptTokens: estimatePromptTokens(attempt.target.body), completionTokens: generates ? perOutput * (request?.outputs ?? 1) : 0 };
    attempt.target.body = RELEASED_BODY;
    context.usage = usage;
    this.events.usage(context, attempt.provider, usage);
  }

  /** Charges the usage an answer reported (a 2xx answer's only). */
  private usageReporter(attempt: Attempt, status: number) {
    return (usage: TokenUsage) => {
      if (status >= 300) return;
      attempt.context.usage = usage;
      this.events.usage(attempt.context, attempt.provider, usage);
    };
  }

  /** Charged when the answer reports no usage of its own (usage-meter.ts): read before the body goes, which it does here. */
  private estimateOf(attempt: Attempt) {
    const estimate = { promptTokens: estimatePromptTokens(attempt.target.body), generates: attempt.target.endpoint !== 'embeddings' };
    attempt.target.body = RELEASED_BODY; // nothing is retried once a worker answers
    return estimate;
  }

  /** Observes each chunk's arrival for a stream's first-token and inter-token histograms. */
  private tokenTimer(attempt: Attempt): () => void {
    const firstToken = this.metrics.streamFirstToken.series({ provider: attempt.provider.name });
    const interToken = this.metrics.streamInterToken.series({ provider: attempt.provider.name });
    let lastChunkAt: number | undefined;
    return () => {
      const at = this.clock.now();
      if (lastChunkAt === undefined) firstToken.observe((at - required(attempt.context.dispatchedAt, 'dispatch time')) / 1000);
      else interToken.observe((at - lastChunkAt) / 1000);
      lastChunkAt = at;
    };
  }
}

const isStream = (answer: IncomingMessage) => String(answer.headers['content-type'] ?? '').startsWith('text/event-stream');

/**
 * Only answers that speak of the worker's state count against it. A plain 500 can be caused by the
 * request itself, and any key holder could then eject healthy workers with a few crafted requests.
 */
function outcomeOfAnswer(status: number): Outcome {
  if (status === 502 || status === 503 || status === 504) return 'failure';
  return status >= 500 ? 'neutral' : 'success';
}

/**
 * After the answer started: a stream ends with an SSE error event a client can read (the meter relays
 * whole events only, so the client is on an event boundary); anything else is cut.
 */
function endBrokenAnswer(res: ServerResponse, attempt: Attempt): void {
  if (res.destroyed || res.writableEnded) return;
  if (!String(res.getHeader('content-type') ?? '').startsWith('text/event-stream')) {
    res.destroy();
    return;
  }
  res.end(`event: error\ndata: ${JSON.stringify(failureMidAnswer(attempt).toBody())}\n\n`);
}
