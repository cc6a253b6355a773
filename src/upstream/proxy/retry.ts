/**
 * Which failures of an attempt, before any byte of its answer came, are tried again on a worker, and
 * how. A connection that fails before any byte of the request was sent is retried on another worker
 * (up to the provider's `retries`); a kept-alive connection the worker reset unread, once, the same
 * worker allowed. One that failed after the request was sent (reset, closed: the worker died) is
 * replayed once on another worker, unless the provider says `replay: false`; nothing is sent again
 * once an answer started, nor after a timeout (the worker may still be generating). The stage acts on
 * the recourse chosen here; after a failed connection the worker's idle connections are dropped, so
 * the next requests open fresh ones, whose failure is safe to retry.
 */
import type { Agent } from 'node:http';
import type { GatewayError } from '../../errors';
import type { Metrics } from '../../telemetry/metrics';
import { workerLabels, type Attempt } from './attempt';

/**
 * What follows a failed attempt: `stale`, `unsent` and `replayed` try again (the reason they are
 * counted under); `fail_over` hands the request to an alias's next target if it has one (nothing of
 * it reached a worker); `fail` ends it.
 */
export type Recourse = 'stale' | 'unsent' | 'replayed' | 'fail_over' | 'fail';

/**
 * `tried`: how many workers this target's attempts have had; `staleRetried` and `replayed`: whether
 * the request had its one stale retry and its one replay.
 */
export function recourseAfter(attempt: Attempt, err: Error, tried: number, staleRetried: boolean, replayed: boolean): Recourse {
  if (!staleRetried && isStalePooledConnection(attempt, err)) return 'stale';
  if (!attempt.connected && tried <= attempt.provider.settings.retries) return 'unsent';
  // Never a Responses request: it may be stored, run in the background or call tools, and the
  // worker may have done that before it died.
  if (attempt.connected && !attempt.timedOut && !replayed && attempt.provider.replay && attempt.target.endpoint !== 'responses') return 'replayed';
  return attempt.connected ? 'fail' : 'fail_over';
}

export function countRetry(metrics: Metrics, attempt: Attempt, reason: 'stale' | 'unsent' | 'replayed'): void {
  metrics.retries.series({ ...workerLabels(attempt), reason }).inc();
  metrics.requestRetries.series({ provider: attempt.provider.name, reason }).inc();
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

/**
 * After a connection to a worker failed, its other pooled connections are suspect (the worker may
 * have died): close them, so the next requests open fresh ones, whose failure is safe to retry.
 */
export function dropIdleConnections(agent: Agent): void {
  for (const sockets of Object.values(agent.freeSockets)) for (const socket of sockets ?? []) socket.destroy();
}

export function withCause(failure: GatewayError, ...causes: unknown[]): GatewayError {
  failure.cause = causes.length === 1 ? causes[0] : causes;
  return failure;
}
