/**
 * The clock of an attempt's phases (connect, first byte, idle between chunks, and the drain of an
 * answer whose client left), which http-proxy cannot tell from resets: one interval checks every
 * deadline. A phase that passes its deadline closes the worker's request and is counted; the errors
 * a timed-out attempt ends in are chosen here too. The clock also ends an attempt (its worker given
 * back, once), as that takes it off the timed set.
 */
import type { Socket } from 'node:net';
import { errors, type GatewayError } from '../../errors';
import type { Metrics } from '../../telemetry/metrics';
import { SlotSet } from '../../tuning/slot-set';
import type { Outcome } from '../pool';
import { workerLabels, type Attempt, type Phase } from './attempt';

/**
 * Phase deadlines are checked this often (a timeout fires up to this much after its deadline), by one
 * interval for all attempts rather than a timer per attempt and phase.
 */
const DEADLINE_CHECK_MS = 50;

/** The attempts whose phase is timed, and what ends an attempt (its worker given back, once). */
export class AttemptClock {
  private readonly timed = new SlotSet<Attempt>();
  private deadlineCheck: NodeJS.Timeout | undefined;

  constructor(
    private readonly metrics: Metrics,
    readonly now: () => number,
  ) {}

  settle(attempt: Attempt, outcome: Outcome): void {
    if (attempt.settled) return;
    attempt.settled = true;
    this.timed.delete(attempt);
    attempt.provider.pool.release(attempt.state, outcome);
    if (!attempt.draining) return;
    const waiting = attempt.context.drainEnded ?? [];
    attempt.context.drainEnded = undefined;
    for (const then of waiting) then();
  }

  /**
   * The worker's request has its socket: the connect deadline while it connects, then, once its bytes
   * may have reached the worker, the first byte's.
   */
  timeConnection(attempt: Attempt, socket: Socket): void {
    const { settings } = attempt.provider;
    const connected = () => {
      attempt.connected = true;
      attempt.context.sentAt ??= this.now();
      this.arm(attempt, 'first_byte', settings.firstByteTimeoutMs);
    };
    if (socket.connecting) {
      this.arm(attempt, 'connect', settings.connectTimeoutMs);
      socket.once(attempt.state.worker.proxyTargets[attempt.target.endpoint].protocol === 'https:' ? 'secureConnect' : 'connect', connected);
    } else {
      connected();
    }
  }

  arm(attempt: Attempt, phase: Phase, ms: number): void {
    attempt.phase = phase;
    attempt.deadline = this.now() + ms;
    this.timed.add(attempt);
    this.deadlineCheck ??= setInterval(() => this.expireDeadlines(), DEADLINE_CHECK_MS).unref();
  }

  /** The answer moved: the idle phase starts over. */
  stillAnswering(attempt: Attempt): void {
    attempt.deadline = this.now() + attempt.provider.settings.idleTimeoutMs;
  }

  private expireDeadlines(): void {
    const at = this.now();
    this.timed.forEach((attempt) => {
      if (at < attempt.deadline) return;
      this.timed.delete(attempt);
      if (attempt.phase !== 'drain') {
        attempt.timedOut = attempt.phase;
        this.metrics.timeouts.series({ ...workerLabels(attempt), phase: attempt.phase! }).inc();
      } else {
        attempt.drainCut = true;
      }
      attempt.upstreamRequest?.destroy();
    });
    if (this.timed.size === 0) {
      clearInterval(this.deadlineCheck);
      this.deadlineCheck = undefined;
    }
  }
}

/** What the client is told of an attempt that failed before its answer began: a timeout if it passed its connect or first-byte deadline. */
export function failureBeforeAnswer(attempt: Attempt): GatewayError {
  return attempt.timedOut === 'first_byte' || attempt.timedOut === 'connect' ? errors.upstreamTimeout() : errors.upstreamUnavailable();
}

/** What a stream's final event says of an answer that broke off: a timeout if it passed its idle deadline. */
export function failureMidAnswer(attempt: Attempt): GatewayError {
  return attempt.timedOut === 'idle' ? errors.upstreamTimeout() : errors.upstreamUnavailable();
}
