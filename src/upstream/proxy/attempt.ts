/**
 * One try of one request on one worker: the record every part of the proxy stage reads and writes
 * (the stage makes it, deadlines.ts times it, answer.ts and relay.ts end it, retry.ts judges its
 * failure), and where it is kept while it lasts.
 */
import type { ClientRequest, IncomingMessage, ServerResponse } from 'node:http';
import type { RequestContext, UpstreamTarget } from '../../context';
import type { SlotMember } from '../../tuning/slot-set';
import type { WorkerState } from '../pool';
import type { Provider } from '../providers';
import type { AnswerRelay } from '../usage-meter';

/** `drain`: the client left (mid-answer, or before it), and the answer is read for its usage until this deadline. */
export type Phase = 'connect' | 'first_byte' | 'idle' | 'drain';

/**
 * The attempt under way for a response is kept on the response itself and unlinked when the response
 * closes (the response outlives its request for a while, and must not keep the worker's answer alive).
 * A WeakMap keyed by responses and per-attempt timers both kept each finished request's attempt
 * reachable through young-generation collections: at 500 requests/s, 2.6 MiB promoted per collection
 * and 5-15 ms pauses, against 0.25 MiB and 2-3 ms without them (measured with --trace-gc).
 */
const ATTEMPT = Symbol('chatgate.attempt');
type CarriesAttempt = ServerResponse & { [ATTEMPT]?: Attempt };
export const attemptOf = (res: ServerResponse): Attempt | undefined => (res as CarriesAttempt)[ATTEMPT];
export const linkAttempt = (res: ServerResponse, attempt: Attempt | undefined): void => {
  (res as CarriesAttempt)[ATTEMPT] = attempt;
};

/** One try of one request on one worker; its slot is in the set of timed attempts. */
export interface Attempt extends SlotMember {
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
  /** The client left during a 2xx answer, or after the request was sent and before the answer: the rest is read for its usage, not relayed. */
  draining: boolean;
  /** The drain's deadline passed and the worker's request was closed by us (the worker was still at it). */
  drainCut?: boolean;
  settled: boolean;
}

/** The labels of the attempt's metrics: its provider and worker. */
export function workerLabels(attempt: Attempt) {
  return { provider: attempt.provider.name, worker: attempt.state.worker.label };
}
