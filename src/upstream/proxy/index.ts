/**
 * The proxy stage, through http-proxy: take a worker from the provider's pool, send it the validated
 * body with headers we build ourselves, and stream the answer back as it arrives. A connection that
 * fails before any byte of the request was sent is retried on another worker. One that failed after
 * the request was sent but before any byte of the answer came (reset, closed: the worker died) is
 * replayed once on another worker, unless the provider says `replay: false`; nothing is sent again
 * once an answer started, nor after a timeout (the worker may still be generating).
 *
 * What http-proxy 1.18 does not do for us, and this module does (each has a test):
 * - Header hygiene. It copies every client header and its `proxyReq` hook can come too late (after the
 *   body starts) or not at all (`Expect`), so the outgoing header set is built before the call.
 * - Abort on client disconnect. It only aborts when the *request* is cut short; a client that leaves
 *   before the answer would leave the worker generating. What a client that leaves still pays, and
 *   how long its answer is read for it (`usage.drainAfterDisconnectMs`): proxy-answer.ts.
 * - A worker failing mid-answer. It pipes the answer and never ends the client response if the worker
 *   dies; we end it, for a stream with a final SSE `error` event in the OpenAI shape (proxy-answer.ts).
 * - Timeouts by phase (connect, first byte, idle between chunks), which it cannot tell from resets
 *   (proxy-attempt.ts).
 * - The relay itself (`selfHandleResponse`): a JSON answer is written chunk by chunk as it comes, a
 *   stream event by event, both through their usage meter, the worker paused while the client's side
 *   is full (proxy-answer.ts).
 * - A stream's head goes to the client as soon as the worker's arrives, ahead of the first token, and
 *   Node's stored copy of it is flattened (stream-head.ts).
 * - Memory: the body is released once a worker answers, since nothing is retried after that.
 * - Batching: requests go to workers at the end of the event loop's iteration, together (write-batching.ts).
 */
import type { ClientRequest, IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import httpProxy from 'http-proxy';
import { contextOf, required, type UpstreamTarget } from '../../context';
import { errors, type GatewayError } from '../../errors';
import type { Metrics } from '../../telemetry/metrics';
import { holdWritesToEndOfIteration } from '../../tuning/write-batching';
import { createAnswers, type ProxyEvents, type ProxyOptions } from './answer';
import { attemptOf, AttemptClock, linkAttempt, type Attempt } from './deadlines';
import { dropIdleConnections, wholeBody, withCause } from './retry';
import { upstreamHeaders } from './headers';
import type { WorkerState } from '../pool';
import type { ProviderTable } from '../providers';

export { upstreamHeaders } from './headers';
export type { ProxyEvents, ProxyOptions } from './answer';

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
    const { settings } = attempt.provider;
    const socket = upstreamRequest.socket as Socket;
    holdWritesToEndOfIteration(socket);
    const connected = () => {
      attempt.connected = true;
      attempt.context.sentAt ??= clock.now();
      clock.arm(attempt, 'first_byte', settings.firstByteTimeoutMs);
    };
    if (socket.connecting) {
      clock.arm(attempt, 'connect', settings.connectTimeoutMs);
      socket.once(attempt.state.worker.proxyTargets[attempt.target.endpoint].protocol === 'https:' ? 'secureConnect' : 'connect', connected);
    } else {
      connected();
    }
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
        const stale = !staleRetried && isStalePooledConnection(attempt, err);
        clock.settle(attempt, res.destroyed || stale ? 'neutral' : 'failure');
        if (!attempt.timedOut) dropIdleConnections(attempt.state.worker.agent);
        if (res.destroyed) return;
        if (stale) {
          // The worker closed a kept-alive connection as we reused it, and never read the request:
          // retry once, the same worker allowed, on a fresh connection.
          staleRetried = true;
          tried.delete(state);
        }
        if (stale || (!attempt.connected && tried.size <= provider.settings.retries)) {
          const reason = stale ? 'stale' : 'unsent';
          metrics.retries.series({ ...AttemptClock.labels(attempt), reason }).inc();
          metrics.requestRetries.series({ provider: attempt.provider.name, reason }).inc();
          provider.pool.acquire(tried, whenGone).then(attemptOn, (noneLeft: GatewayError) => failOver(withCause(upstreamFailure(attempt), err, noneLeft)));
          return;
        }
        // Never a Responses request: it may be stored, run in the background or call tools, and the
        // worker may have done that before it died.
        if (attempt.connected && !attempt.timedOut && !replayed && provider.replay && attempt.target.endpoint !== 'responses') {
          // Sent, and the worker died before a byte of its answer: nothing reached the client, so
          // another worker runs it, once. None left: the request fails as it would have.
          replayed = true;
          metrics.retries.series({ ...AttemptClock.labels(attempt), reason: 'replayed' }).inc();
          metrics.requestRetries.series({ provider: attempt.provider.name, reason: 'replayed' }).inc();
          provider.pool.acquire(tried, whenGone).then(attemptOn, (noneLeft: GatewayError) => next(withCause(upstreamFailure(attempt), err, noneLeft)));
          return;
        }
        if (!attempt.connected) return failOver(withCause(upstreamFailure(attempt), err));
        next(withCause(upstreamFailure(attempt), err));
      });
    };
    acquire();
  };

  // The deadline check stops by itself once no attempt is timed, so close() leaves it to time out
  // whatever is still under way when a reload retires this proxy.
  return { handle, close: () => proxy.close() };
}

/**
 * A reset (RST) on a reused connection before any answer: the worker's kernel threw our bytes away
 * unread, so the worker cannot have started on the request. A mere hang-up (FIN, "socket hang up")
 * does not say that: a worker that read the request and then died looks the same, so it is not here.
 */
function isStalePooledConnection(attempt: Attempt, err: Error): boolean {
  const { code, syscall } = err as NodeJS.ErrnoException;
  return Boolean(attempt.upstreamRequest?.reusedSocket) && !attempt.timedOut && code === 'ECONNRESET' && syscall !== undefined;
}

function upstreamFailure(attempt: Attempt): GatewayError {
  return attempt.timedOut === 'first_byte' || attempt.timedOut === 'connect' ? errors.upstreamTimeout() : errors.upstreamUnavailable();
}

