/**
 * The answer side of the proxy stage: what the client gets back when a worker's answer begins (its
 * status and headers, then the answer through the relay, relay.ts), and what happens to an answer
 * whose client leaves.
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
import { required } from '../../context';
import type { Metrics } from '../../telemetry/metrics';
import { attemptOf, linkAttempt, type Attempt } from './attempt';
import type { AttemptClock } from './deadlines';
import { clientResponseHeaders } from './headers';
import { Relay, type ProxyEvents } from './relay';

export interface ProxyOptions {
  /** How long the rest of an answer a client left is read for its usage (config `usage.drainAfterDisconnectMs`); 0: not at all. */
  drainAfterDisconnectMs: number;
}

/** The proxy's answer side, one per proxy: its methods are what http-proxy and the response's close call. */
class Answers {
  constructor(
    private readonly clock: AttemptClock,
    private readonly metrics: Metrics,
    private readonly relay: Relay,
    private readonly options: ProxyOptions,
  ) {}

  /** http-proxy's `proxyRes`: the worker's answer began. */
  answered(upstreamResponse: IncomingMessage, res: ServerResponse): void {
    const attempt = attemptOf(res);
    if (!attempt) return;
    if (attempt.draining) {
      this.relay.readForUsage(attempt, upstreamResponse, res);
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
    this.relay.relay(attempt, upstreamResponse, res, status);
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
    if (unanswered) this.relay.chargeUnanswered(attempt);
    attempt.meter?.abort(); // the client left mid-answer: charge the usage seen so far, or the estimate
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
    if (attempt.drainCut) this.relay.chargeUnanswered(attempt);
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
}

export function createAnswers(clock: AttemptClock, metrics: Metrics, events: ProxyEvents, options: ProxyOptions) {
  const answers = new Answers(clock, metrics, new Relay(clock, metrics, events, options), options);
  return {
    answered: (upstreamResponse: IncomingMessage, res: ServerResponse) => answers.answered(upstreamResponse, res),
    clientClosed: (res: ServerResponse) => answers.clientClosed(res),
    endUnanswered: (attempt: Attempt, res: ServerResponse) => answers.endUnanswered(attempt, res),
  };
}
