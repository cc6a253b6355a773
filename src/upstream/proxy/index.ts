/**
 * The proxy stage, through http-proxy: take a worker from the provider's pool, send it the validated
 * body with headers we build ourselves, and stream the answer back as it arrives. A failure before
 * any byte of the answer came is tried again on a worker as retry.ts says (another worker for a
 * request never sent, one replay for a worker that died on it); nothing is sent again once an answer
 * started, nor after a timeout (the worker may still be generating). The folder, one module a concern:
 * headers.ts (what is forwarded and stripped each way), deadlines.ts (the phases' timeouts and their
 * errors), retry.ts (which failures are tried again, and how), answer.ts (what the client gets back,
 * and what a client that leaves still pays), relay.ts (the answer streamed through its usage meter),
 * attempt.ts (the record of one try on one worker that they share).
 *
 * What http-proxy 1.18 does not do for us, and this folder does (each has a test):
 * - Header hygiene. It copies every client header and its `proxyReq` hook can come too late (after the
 *   body starts) or not at all (`Expect`), so the outgoing header set is built before the call (headers.ts).
 * - Abort on client disconnect. It only aborts when the *request* is cut short; a client that leaves
 *   before the answer would leave the worker generating. What a client that leaves still pays, and
 *   how long its answer is read for it (`usage.drainAfterDisconnectMs`): answer.ts.
 * - A worker failing mid-answer. It pipes the answer and never ends the client response if the worker
 *   dies; we end it, for a stream with a final SSE `error` event in the OpenAI shape (relay.ts).
 * - Timeouts by phase (connect, first byte, idle between chunks), which it cannot tell from resets
 *   (deadlines.ts).
 * - The relay itself (`selfHandleResponse`): a JSON answer is written chunk by chunk as it comes, a
 *   stream event by event, both through their usage meter, the worker paused while the client's side
 *   is full (relay.ts).
 * - A stream's head goes to the client as soon as the worker's arrives, ahead of the first token, and
 *   Node's stored copy of it is flattened (stream-head.ts).
 * - Memory: the body is released once a worker answers, since nothing is retried after that.
 * - Batching: requests go to workers at the end of the event loop's iteration, together (write-batching.ts).
 */
import type { ClientRequest, IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Readable } from 'node:stream';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import httpProxy from 'http-proxy';
import { contextOf, required, type UpstreamTarget } from '../../context';
import type { GatewayError } from '../../errors';
import type { Metrics } from '../../telemetry/metrics';
import { holdWritesToEndOfIteration } from '../../tuning/write-batching';
import type { WorkerState } from '../pool';
import type { ProviderTable } from '../providers';
import { createAnswers, type ProxyOptions } from './answer';
import { attemptOf, linkAttempt, type Attempt } from './attempt';
import { AttemptClock, failureBeforeAnswer } from './deadlines';
import { upstreamHeaders } from './headers';
import type { ProxyEvents } from './relay';
import { countRetry, dropIdleConnections, recourseAfter, withCause } from './retry';

export { upstreamHeaders } from './headers';
export type { ProxyOptions } from './answer';
export type { ProxyEvents } from './relay';

export function createProxy(
  metrics: Metrics,
  providers: ProviderTable,
  events: ProxyEvents,
  options: ProxyOptions = { drainAfterDisconnectMs: 5_000 },
  now: () => number = () => performance.now(),
) {
  // toProxy: under ignorePath its only effect is that http-proxy does not url.parse() the client's path
  // on every request only to throw it away (common.setupOutgoing); the worker's path goes as it is.
  const proxy = httpProxy.createProxyServer({ changeOrigin: true, ignorePath: true, toProxy: true, xfwd: false, selfHandleResponse: true });
  const clock = new AttemptClock(metrics, now);
  const answers = createAnswers(clock, metrics, events, options);

  proxy.on('proxyReq', (upstreamRequest: ClientRequest, _req: IncomingMessage, res: ServerResponse) => {
    const attempt = attemptOf(res);
    if (!attempt) return;
    attempt.upstreamRequest = upstreamRequest;
    if (res.destroyed) {
      upstreamRequest.destroy();
      return;
    }
    const socket = upstreamRequest.socket as Socket;
    holdWritesToEndOfIteration(socket);
    clock.timeConnection(attempt, socket);
  });

  proxy.on('proxyRes', (upstreamResponse: IncomingMessage, _req: IncomingMessage, res: ServerResponse) => answers.answered(upstreamResponse, res));

  // http-proxy emits 'error' only when no callback is given; keep a listener so that can never crash us.
  proxy.on('error', () => undefined);

  const handle: RequestHandler = function proxyRequest(req: Request, res: Response, next: NextFunction) {
    const context = contextOf(res);
    const clientHeaders = req.headers;
    let target = required(context.target, 'target');
    let provider = required(providers.get(target.provider), 'provider');
    let tried = new Set<WorkerState>();
    let staleRetried = false;
    let replayed = false;
    // Waiting for a worker: a client that leaves gives its place in the queue up.
    const whenGone = (giveUp: () => void) => (res.destroyed ? giveUp() : res.once('close', giveUp));

    res.on('close', () => answers.clientClosed(res));

    /** The headers are the provider's (its credential, its allow-list), made from the client's each time. */
    const aimAt = (to: UpstreamTarget) => {
      target = to;
      provider = required(providers.get(to.provider), 'provider');
      context.target = to;
      context.provider = provider.name;
      tried = new Set();
      staleRetried = false;
      req.headers = clientHeaders;
      req.headers = upstreamHeaders(req, context, to, provider);
    };
    aimAt(target);
    context.dispatchedAt = clock.now();
    metrics.gatewayOverhead.series({ provider: provider.name }).observe((context.dispatchedAt - context.arrivedAt) / 1000);

    /**
     * This target's pool cannot take the request (no worker available, or every one tried failed
     * before the request reached it): an alias's next target takes it, as a retry would.
     */
    const failOver = (failure: unknown) => {
      if (res.destroyed) return;
      if (!target.fallback) return next(failure);
      metrics.fallbacks.series({ alias: target.alias ?? 'none', provider: provider.name }).inc();
      aimAt(target.fallback());
      acquire();
    };
    const acquire = () => provider.pool.acquire(tried, whenGone).then(attemptOn, failOver);

    const attemptOn = (state: WorkerState) => {
      if (res.destroyed) {
        provider.pool.release(state, 'neutral');
        return;
      }
      tried.add(state);
      const attempt: Attempt = { context, provider, target, state, connected: false, answering: false, draining: false, settled: false, deadline: Infinity, slot: -1 };
      linkAttempt(res, attempt);
      const options = { target: state.worker.proxyTargets[target.endpoint], agent: state.worker.agent, buffer: wholeBody(target) };
      proxy.web(req, res, options, (err: Error) => {
        if (attempt.answering) return; // a failure mid-answer is handled where the answer is relayed
        if (attempt.draining) return answers.endUnanswered(attempt, res); // the client left before an answer, and none came
        const recourse = recourseAfter(attempt, err, tried.size, staleRetried, replayed);
        clock.settle(attempt, res.destroyed || recourse === 'stale' ? 'neutral' : 'failure');
        if (!attempt.timedOut) dropIdleConnections(attempt.state.worker.agent);
        if (res.destroyed) return;
        if (recourse === 'fail_over') return failOver(withCause(failureBeforeAnswer(attempt), err));
        if (recourse === 'fail') return next(withCause(failureBeforeAnswer(attempt), err));
        countRetry(metrics, attempt, recourse);
        if (recourse === 'replayed') {
          // Sent, and the worker died before a byte of its answer: nothing reached the client, so
          // another worker runs it, once. None left: the request fails as it would have.
          replayed = true;
          provider.pool.acquire(tried, whenGone).then(attemptOn, (noneLeft: GatewayError) => next(withCause(failureBeforeAnswer(attempt), err, noneLeft)));
          return;
        }
        if (recourse === 'stale') {
          // The worker closed a kept-alive connection as we reused it, and never read the request:
          // retry once, the same worker allowed, on a fresh connection.
          staleRetried = true;
          tried.delete(state);
        }
        provider.pool.acquire(tried, whenGone).then(attemptOn, (noneLeft: GatewayError) => failOver(withCause(failureBeforeAnswer(attempt), err, noneLeft)));
      });
    };
    acquire();
  };

  // The deadline check stops by itself once no attempt is timed, so close() leaves it to time out
  // whatever is still under way when a reload retires this proxy.
  return { handle, close: () => proxy.close() };
}

/**
 * http-proxy sends the body with `options.buffer.pipe(upstreamRequest)`. The body is already whole in
 * memory, so it is written in one call, without a Readable per request (test/upstream/proxy.test.ts
 * checks the worker receives it intact). That call ends the request before it has a socket, which
 * is what lets `proxyReq` hold its bytes to the end of the iteration (write-batching.ts). It is read
 * from the target when sent, not captured here: http-proxy's listeners keep these options as long as
 * the answer lasts, and the body is released once the worker answers
 * (test/upstream/stream-memory.test.ts).
 */
function wholeBody(target: UpstreamTarget): Readable {
  return { pipe: (upstreamRequest: ClientRequest) => upstreamRequest.end(target.body) } as unknown as Readable;
}
