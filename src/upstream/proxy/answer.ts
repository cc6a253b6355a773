/**
 * The answer side of the proxy stage: a worker's answer relayed to the client as it comes, through its
 * usage meter (a JSON answer chunk by chunk, a stream event by event, the worker paused while the
 * client's side is full), its usage charged; a worker failing mid-answer ended for the client (a stream
 * with a final SSE `error` event in the OpenAI shape); and what a client that leaves still pays.
 *
 * A client that leaves during a 2xx answer does not end it: the rest is read without being relayed,
 * for its usage, for at most `usage.drainAfterDisconnectMs`; then the worker's connection is closed
 * and, if no usage came, the estimate is charged (usage-meter.ts). One that leaves after its request
 * reached a worker and before the answer began (a JSON answer begins only once it is generated) is
 * waited for the same way: an answer that comes within the drain is read for its usage, and if none
 * comes before the drain ends (the worker still at it), the request is charged what it may have cost
 * (its prompt estimate and the output bound the worker was given). One that leaves before a worker had
 * its request, or whose worker hangs up or times out without an answer, pays nothing.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { required, type RequestContext, type TokenUsage } from '../../context';
import { errors } from '../../errors';
import type { Metrics } from '../../telemetry/metrics';
import { sendStreamHead } from '../../tuning/stream-head';
import { attemptOf, AttemptClock, linkAttempt, type Attempt } from './deadlines';
import { outcomeOfAnswer } from './retry';
import { clientResponseHeaders } from './headers';
import type { Provider } from '../providers';
import { estimatePromptTokens, JsonUsageMeter, SseUsageMeter, type AnswerRelay } from '../usage-meter';

const RELEASED_BODY = Buffer.alloc(0);

export interface ProxyEvents {
  /** A worker of this provider reported the tokens its answer used. */
  usage(context: RequestContext, provider: Provider, usage: TokenUsage): void;
}

export interface ProxyOptions {
  /** How long the rest of an answer a client left is read for its usage (config `usage.drainAfterDisconnectMs`); 0: not at all. */
  drainAfterDisconnectMs: number;
}

/** The proxy's answer side, one per proxy: its methods are what http-proxy and the response's close call. */
class Answers {
  constructor(
    private readonly clock: AttemptClock,
    private readonly metrics: Metrics,
    private readonly events: ProxyEvents,
    private readonly options: ProxyOptions,
  ) {}

  /** http-proxy's `proxyRes`: the worker's answer began. */
  answered(upstreamResponse: IncomingMessage, res: ServerResponse): void {
    const attempt = attemptOf(res);
    if (!attempt) return;
    if (attempt.draining) {
      this.readForUsage(attempt, upstreamResponse, res);
      return;
    }
    attempt.answering = true;
    attempt.context.worker = attempt.state.worker.label;
    attempt.context.firstByteAt = this.clock.now();
    this.metrics.upstreamTimeToFirstByte.series({ provider: attempt.provider.name }).observe((this.clock.now() - required(attempt.context.dispatchedAt, 'dispatch time')) / 1000);
    const status = upstreamResponse.statusCode ?? 502;
    res.statusCode = status;
    const headers = clientResponseHeaders(upstreamResponse.headers);
    for (const name in headers) {
      const value = headers[name];
      // Our x-ratelimit-* describe the caller's key; a hosted API's describe the gateway's account.
      if (value === undefined || (name.startsWith('x-ratelimit-') && res.hasHeader(name))) continue;
      res.setHeader(name, value);
    }
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
      this.metrics.streamFailures.series(AttemptClock.labels(attempt)).inc();
      meter.abort(); // charges the usage seen so far, or the estimate
      endBrokenAnswer(res, attempt);
    });
  }

  /** The client's side closed: finished, or the client left (see the top of this file). */
  clientClosed(res: ServerResponse): void {
    const attempt = attemptOf(res);
    if (res.writableFinished || !attempt) {
      linkAttempt(res, undefined); // whatever still holds the response must not hold the worker's answer
      return;
    }
    const answer = attempt.upstreamResponse;
    // Sent and not answered yet: the attempt stays on the response until its answer comes (proxyRes finds it there).
    const unanswered = attempt.connected && !attempt.answering && !attempt.settled;
    if (unanswered && this.options.drainAfterDisconnectMs > 0) {
      this.awaitAnswer(attempt, res);
      return;
    }
    linkAttempt(res, undefined);
    if (answer && !answer.complete && !attempt.settled && this.options.drainAfterDisconnectMs > 0) {
      this.drain(attempt, answer);
      return;
    }
    this.clock.settle(attempt, 'neutral');
    attempt.upstreamRequest?.destroy();
    if (unanswered) this.chargeUnanswered(attempt);
    attempt.meter?.abort(); // the client left mid-answer: charge the usage seen so far, or the estimate
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

  /**
   * The client left after its request reached the worker and before the answer began: the answer is
   * waited for until the drain's deadline, and read (not relayed) for its usage if it comes.
   */
  private awaitAnswer(attempt: Attempt, res: ServerResponse): void {
    attempt.draining = true;
    attempt.context.drainEnded = [];
    // A worker that would time out before the drain ends still does (first_byte): it is at fault, and
    // a client leaving must not keep a hung worker past its deadline.
    const firstByteLeft = attempt.phase === 'first_byte' ? attempt.deadline - this.clock.now() : Infinity;
    if (firstByteLeft > this.options.drainAfterDisconnectMs) this.clock.arm(attempt, 'drain', this.options.drainAfterDisconnectMs);
    // Cut by the deadline (or the worker hung up) with no answer: http-proxy calls no callback for a
    // reset once the client's socket is gone, so the worker's request is watched here.
    attempt.upstreamRequest?.once('close', () => this.endUnanswered(attempt, res));
  }

  /**
   * No answer came after the client left. Charged only when the drain's deadline cut a worker still
   * at it; a worker that hung up, reset (a stale kept-alive connection too), or passed its first-byte
   * deadline did no work the client should pay for, and the latter is a worker failure.
   */
  endUnanswered(attempt: Attempt, res: ServerResponse): void {
    if (attempt.answering || attempt.settled) return;
    linkAttempt(res, undefined);
    this.clock.settle(attempt, attempt.timedOut ? 'failure' : 'neutral');
    if (attempt.drainCut) this.chargeUnanswered(attempt);
  }

  /** The answer to a client that left before it began: read to its end for its usage, nothing relayed. */
  private readForUsage(attempt: Attempt, upstreamResponse: IncomingMessage, res: ServerResponse): void {
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
  private chargeUnanswered(attempt: Attempt): void {
    const { context } = attempt;
    const request = context.modelRequest;
    const perOutput = context.reservedOutputBound ?? request?.maxOutputTokens ?? 0;
    const generates = attempt.target.endpoint !== 'embeddings';
    const usage = { promptTokens: estimatePromptTokens(attempt.target.body), completionTokens: generates ? perOutput * (request?.outputs ?? 1) : 0 };
    attempt.target.body = RELEASED_BODY;
    context.usage = usage;
    this.events.usage(context, attempt.provider, usage);
  }

  /**
   * The client left during a 2xx answer: read the rest without relaying it, for its usage, until the
   * answer ends or the drain's deadline passes (then the worker's connection is closed, and what was
   * seen, or the estimate, is charged). The worker stays taken meanwhile: it is still generating.
   */
  private drain(attempt: Attempt, upstreamResponse: IncomingMessage): void {
    attempt.draining = true;
    attempt.context.drainEnded = [];
    attempt.meter?.discard?.();
    this.clock.arm(attempt, 'drain', this.options.drainAfterDisconnectMs);
    upstreamResponse.resume(); // it may have been paused for the client's full side
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

export function createAnswers(clock: AttemptClock, metrics: Metrics, events: ProxyEvents, options: ProxyOptions) {
  const answers = new Answers(clock, metrics, events, options);
  return {
    answered: (upstreamResponse: IncomingMessage, res: ServerResponse) => answers.answered(upstreamResponse, res),
    clientClosed: (res: ServerResponse) => answers.clientClosed(res),
    endUnanswered: (attempt: Attempt, res: ServerResponse) => answers.endUnanswered(attempt, res),
  };
}

const isStream = (answer: IncomingMessage) => String(answer.headers['content-type'] ?? '').startsWith('text/event-stream');

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
  const failure = attempt.timedOut === 'idle' ? errors.upstreamTimeout() : errors.upstreamUnavailable();
  res.end(`event: error\ndata: ${JSON.stringify(failure.toBody())}\n\n`);
}
