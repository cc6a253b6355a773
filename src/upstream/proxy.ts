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
 *   before the answer would leave the worker generating. A client that leaves during a 2xx answer
 *   does not end it: the rest is read without being relayed, for its usage, for at most
 *   `usage.drainAfterDisconnectMs`; then the worker's connection is closed and, if no usage came,
 *   the estimate is charged (usage-meter.ts).
 * - A worker failing mid-answer. It pipes the answer and never ends the client response if the worker
 *   dies; we end it, for a stream with a final SSE `error` event in the OpenAI shape.
 * - Timeouts by phase (connect, first byte, idle between chunks), which it cannot tell from resets.
 * - The relay itself (`selfHandleResponse`): a JSON answer is written chunk by chunk as it comes, a
 *   stream event by event, both through their usage meter, the worker paused while the client's side is full.
 * - A stream's head goes to the client as soon as the worker's arrives, ahead of the first token, and
 *   Node's stored copy of it is flattened (stream-head.ts).
 * - Memory: the body is released once a worker answers, since nothing is retried after that.
 * - Batching: requests go to workers at the end of the event loop's iteration, together (write-batching.ts).
 */
import type { ClientRequest, IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import httpProxy from 'http-proxy';
import { contextOf, required, type RequestContext, type TokenUsage, type UpstreamTarget } from '../context';
import { errors, GatewayError } from '../errors';
import type { Metrics } from '../telemetry/metrics';
import type { Outcome, WorkerState } from './pool';
import type { Provider, ProviderTable } from './providers';
import { SlotSet, type SlotMember } from '../tuning/slot-set';
import { estimatePromptTokens, JsonUsageMeter, SseUsageMeter, type AnswerRelay } from './usage-meter';
import { holdWritesToEndOfIteration } from '../tuning/write-batching';
import { clientResponseHeaders, upstreamHeaders } from './proxy-headers';
import { dropIdleConnections, outcomeOfAnswer, wholeBody, withCause } from './proxy-connection';
export { upstreamHeaders } from './proxy-headers';
import { sendStreamHead } from '../tuning/stream-head';

const RELEASED_BODY = Buffer.alloc(0);


/** `drain`: the client left mid-answer, and the rest is read for its usage until this deadline. */
type Phase = 'connect' | 'first_byte' | 'idle' | 'drain';

/**
 * Phase deadlines are checked this often (a timeout fires up to this much after its deadline), by one
 * interval for all attempts rather than a timer per attempt and phase.
 */
const DEADLINE_CHECK_MS = 50;

/**
 * The attempt under way for a response is kept on the response itself and unlinked when the response
 * closes (the response outlives its request for a while, and must not keep the worker's answer alive).
 * A WeakMap keyed by responses and per-attempt timers both kept each finished request's attempt
 * reachable through young-generation collections: at 500 requests/s, 2.6 MiB promoted per collection
 * and 5-15 ms pauses, against 0.25 MiB and 2-3 ms without them (measured with --trace-gc).
 */
const ATTEMPT = Symbol('chatgate.attempt');
type CarriesAttempt = ServerResponse & { [ATTEMPT]?: Attempt };
const attemptOf = (res: ServerResponse): Attempt | undefined => (res as CarriesAttempt)[ATTEMPT];

/** One try of one request on one worker; its slot is in the set of timed attempts. */
interface Attempt extends SlotMember {
  readonly context: RequestContext;
  readonly provider: Provider;
  readonly target: UpstreamTarget;
  readonly state: WorkerState;
  upstreamRequest?: ClientRequest;
  /** The request's bytes may have reached the worker: from here on it is only replayed (once, if the provider allows, before any answer byte), never retried. */
  connected: boolean;
  answering: boolean;
  /** The phase being timed and its deadline (`now()` time), checked while the attempt is in `timed`. */
  phase?: Phase;
  deadline: number;
  timedOut?: Phase;
  /** The answer's relay, reading token usage (charged so far, or estimated, if the answer is cut). */
  meter?: AnswerRelay;
  upstreamResponse?: IncomingMessage;
  /** The client left during a 2xx answer: the rest is read for its usage, not relayed. */
  draining: boolean;
  settled: boolean;
}

export interface ProxyEvents {
  /** A worker of this provider reported the tokens its answer used. */
  usage(context: RequestContext, provider: Provider, usage: TokenUsage): void;
}

export interface ProxyOptions {
  /** How long the rest of an answer a client left is read for its usage (config `usage.drainAfterDisconnectMs`); 0: not at all. */
  drainAfterDisconnectMs: number;
}

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
  const timed = new SlotSet<Attempt>();
  let deadlineCheck: NodeJS.Timeout | undefined;

  const labels = (attempt: Attempt) => ({ provider: attempt.provider.name, worker: attempt.state.worker.label });

  function settle(attempt: Attempt, outcome: Outcome): void {
    if (attempt.settled) return;
    attempt.settled = true;
    timed.delete(attempt);
    attempt.provider.pool.release(attempt.state, outcome);
  }

  function arm(attempt: Attempt, phase: Phase, ms: number): void {
    attempt.phase = phase;
    attempt.deadline = now() + ms;
    timed.add(attempt);
    deadlineCheck ??= setInterval(expireDeadlines, DEADLINE_CHECK_MS).unref();
  }

  /** The answer moved: the idle phase starts over. */
  function stillAnswering(attempt: Attempt): void {
    attempt.deadline = now() + attempt.provider.settings.idleTimeoutMs;
  }

  function expireDeadlines(): void {
    const at = now();
    timed.forEach((attempt) => {
      if (at < attempt.deadline) return;
      timed.delete(attempt);
      if (attempt.phase !== 'drain') {
        attempt.timedOut = attempt.phase;
        metrics.timeouts.series({ ...labels(attempt), phase: attempt.phase! }).inc();
      }
      attempt.upstreamRequest?.destroy();
    });
    if (timed.size === 0) {
      clearInterval(deadlineCheck);
      deadlineCheck = undefined;
    }
  }

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
      arm(attempt, 'first_byte', settings.firstByteTimeoutMs);
    };
    if (socket.connecting) {
      arm(attempt, 'connect', settings.connectTimeoutMs);
      socket.once(attempt.state.worker.proxyTargets[attempt.target.endpoint].protocol === 'https:' ? 'secureConnect' : 'connect', connected);
    } else {
      connected();
    }
  });

  proxy.on('proxyRes', (upstreamResponse: IncomingMessage, _req: IncomingMessage, res: ServerResponse) => {
    const attempt = attemptOf(res);
    if (!attempt) return;
    attempt.answering = true;
    attempt.context.worker = attempt.state.worker.label;
    attempt.context.firstByteAt = now();
    metrics.upstreamTimeToFirstByte.series({ provider: attempt.provider.name }).observe((now() - required(attempt.context.dispatchedAt, 'dispatch time')) / 1000);
    const status = upstreamResponse.statusCode ?? 502;
    res.statusCode = status;
    const headers = clientResponseHeaders(upstreamResponse.headers);
    for (const name in headers) {
      const value = headers[name];
      // Our x-ratelimit-* describe the caller's key; a hosted API's describe the gateway's account.
      if (value === undefined || (name.startsWith('x-ratelimit-') && res.hasHeader(name))) continue;
      res.setHeader(name, value);
    }
    const stream = String(upstreamResponse.headers['content-type'] ?? '').startsWith('text/event-stream');
    const reportUsage = (usage: TokenUsage) => {
      if (status >= 300) return;
      attempt.context.usage = usage;
      events.usage(attempt.context, attempt.provider, usage);
    };
    arm(attempt, 'idle', attempt.provider.settings.idleTimeoutMs);
    // Charged when the answer reports no usage of its own (usage-meter.ts): read before the body goes.
    const estimate = { promptTokens: estimatePromptTokens(attempt.target.body.length), generates: attempt.target.endpoint !== 'embeddings' };
    attempt.target.body = RELEASED_BODY; // nothing is retried once a worker answers
    let meter: AnswerRelay;
    let timeTokens: (() => void) | undefined;
    if (stream) {
      res.removeHeader('content-length'); // a dropped usage chunk changes the length
      meter = new SseUsageMeter(attempt.target.dropUsageChunk, reportUsage, estimate);
      timeTokens = tokenTimer(attempt);
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
      stillAnswering(attempt);
      timeTokens?.();
      const out = meter.relay(chunk);
      if (out.length > 0 && !res.write(out)) upstreamResponse.pause();
    });
    res.on('drain', () => upstreamResponse.resume());
    upstreamResponse.on('end', () => {
      const rest = meter.end();
      if (!attempt.draining) res.end(rest);
      settle(attempt, outcomeOfAnswer(upstreamResponse.statusCode ?? 502));
    });
    upstreamResponse.on('close', () => {
      if (upstreamResponse.complete || attempt.settled) return;
      if (attempt.draining) {
        // The drain's deadline passed (or the worker hung up): the client had left, the worker is not at fault.
        settle(attempt, 'neutral');
        meter.abort();
        return;
      }
      settle(attempt, 'failure');
      metrics.streamFailures.series(labels(attempt)).inc();
      meter.abort(); // charges the usage seen so far, or the estimate
      endBrokenAnswer(res, attempt);
    });
  });

  /**
   * The client left during a 2xx answer: read the rest without relaying it, for its usage, until the
   * answer ends or the drain's deadline passes (then the worker's connection is closed, and what was
   * seen, or the estimate, is charged). The worker stays taken meanwhile: it is still generating.
   */
  function drain(attempt: Attempt, upstreamResponse: IncomingMessage): void {
    attempt.draining = true;
    attempt.meter?.discard?.();
    arm(attempt, 'drain', options.drainAfterDisconnectMs);
    upstreamResponse.resume(); // it may have been paused for the client's full side
  }

  /** Observes each chunk's arrival for a stream's first-token and inter-token histograms. */
  function tokenTimer(attempt: Attempt): () => void {
    const firstToken = metrics.streamFirstToken.series({ provider: attempt.provider.name });
    const interToken = metrics.streamInterToken.series({ provider: attempt.provider.name });
    let lastChunkAt: number | undefined;
    return () => {
      const at = now();
      if (lastChunkAt === undefined) firstToken.observe((at - required(attempt.context.dispatchedAt, 'dispatch time')) / 1000);
      else interToken.observe((at - lastChunkAt) / 1000);
      lastChunkAt = at;
    };
  }

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

    res.on('close', () => {
      const attempt = attemptOf(res);
      (res as CarriesAttempt)[ATTEMPT] = undefined; // whatever still holds the response must not hold the worker's answer
      if (res.writableFinished || !attempt) return;
      const answer = attempt.upstreamResponse;
      if (answer && !answer.complete && !attempt.settled && options.drainAfterDisconnectMs > 0) return drain(attempt, answer);
      settle(attempt, 'neutral');
      attempt.upstreamRequest?.destroy();
      attempt.meter?.abort(); // the client left mid-answer: charge the usage seen so far, or the estimate
    });

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
    context.dispatchedAt = now();
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
      (res as CarriesAttempt)[ATTEMPT] = attempt;
      const options = { target: state.worker.proxyTargets[target.endpoint], agent: state.worker.agent, buffer: wholeBody(target) };
      proxy.web(req, res, options, (err: Error) => {
        if (attempt.answering) return; // a failure mid-answer is handled where the answer is relayed
        const stale = !staleRetried && isStalePooledConnection(attempt, err);
        settle(attempt, res.destroyed || stale ? 'neutral' : 'failure');
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
          metrics.retries.series({ ...labels(attempt), reason }).inc();
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
          metrics.retries.series({ ...labels(attempt), reason: 'replayed' }).inc();
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
