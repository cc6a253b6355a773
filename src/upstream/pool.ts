/**
 * A provider's pool: which of its workers may take traffic now, how loaded each is, and the bounded
 * queue of requests waiting for a worker with room. Passive health lives here: consecutive failures
 * eject a worker for a backoff that doubles while it keeps failing. Active health (health.ts) sets
 * `healthy`. Time comes from `now`, so tests can drive it.
 */
import { errors } from '../errors';
import { pickLeastLoaded, type Candidate } from './balancer';
import type { Worker } from './worker';
import type { UpstreamSettings } from '../config';

export type Outcome = 'success' | 'failure' | 'neutral';

export class WorkerState implements Candidate {
  outstanding = 0;
  currentWeight = 0;
  /** The active health checks' verdict. */
  healthy = true;
  ejectedUntil = 0;
  consecutiveFailures = 0;
  /** Ejections in a row without a success between them: the backoff grows with it. */
  ejectionStreak = 0;
  /** Model names this worker reported on its /v1/models. */
  models: readonly string[] = [];

  constructor(readonly worker: Worker) {}

  get weight(): number {
    return this.worker.weight;
  }

  isAvailable(now: number): boolean {
    return this.healthy && now >= this.ejectedUntil;
  }

  hasRoom(): boolean {
    return this.worker.maxConcurrent === undefined || this.outstanding < this.worker.maxConcurrent;
  }
}

export interface PoolEvents {
  ejected(state: WorkerState, forMs: number): void;
}

interface Waiter {
  exclude: ReadonlySet<WorkerState>;
  resolve(state: WorkerState): void;
  reject(err: Error): void;
  timer: NodeJS.Timeout;
}

export class Pool {
  readonly workers: readonly WorkerState[];
  private readonly waiters: Waiter[] = [];
  private readonly timers = new Set<NodeJS.Timeout>();

  constructor(
    workers: readonly Worker[],
    private readonly settings: Pick<UpstreamSettings, 'queue' | 'ejection'>,
    private readonly events: PoolEvents,
    private readonly now: () => number = Date.now,
  ) {
    this.workers = workers.map((worker) => new WorkerState(worker));
  }

  get queued(): number {
    return this.waiters.length;
  }

  availableWorkers(): WorkerState[] {
    const now = this.now();
    return this.workers.filter((state) => state.isAvailable(now));
  }

  /**
   * A worker for one attempt, its outstanding count already taken. Rejects at once with 503
   * upstream_unavailable when no worker (other than those excluded) may take traffic, and with 503
   * upstream_overloaded when all are full and the queue is too, or the wait passes its deadline.
   * `whenGone` is called only if the request has to wait: it registers the callback that gives the
   * place in the queue up at once when the client goes away.
   */
  acquire(exclude: ReadonlySet<WorkerState> = new Set(), whenGone?: (giveUp: () => void) => void): Promise<WorkerState> {
    const candidates = this.candidates(exclude);
    if (candidates.length === 0) return Promise.reject(errors.noHealthyWorker());
    const chosen = pickLeastLoaded(candidates.filter((state) => state.hasRoom()));
    if (chosen) return Promise.resolve(this.take(chosen));
    if (this.waiters.length >= this.settings.queue.size) return Promise.reject(errors.upstreamOverloaded(this.retryAfterSeconds()));
    return new Promise((resolve, reject) => {
      const giveUp = () => {
        const at = this.waiters.indexOf(waiter);
        if (at === -1) return; // served, or gone, already
        this.waiters.splice(at, 1);
        clearTimeout(waiter.timer);
        reject(errors.upstreamOverloaded(this.retryAfterSeconds()));
      };
      const waiter: Waiter = { exclude, resolve, reject, timer: setTimeout(giveUp, this.settings.queue.timeoutMs) };
      this.waiters.push(waiter);
      whenGone?.(giveUp);
    });
  }

  /** The attempt on this worker is over; its outcome feeds passive health. */
  release(state: WorkerState, outcome: Outcome): void {
    state.outstanding--;
    if (outcome === 'failure') this.recordFailure(state);
    if (outcome === 'success') {
      state.consecutiveFailures = 0;
      state.ejectionStreak = 0;
    }
    this.serveWaiters();
  }

  /** Active health's verdict on a worker. */
  setHealthy(state: WorkerState, healthy: boolean): void {
    state.healthy = healthy;
    if (healthy) this.serveWaiters();
  }

  close(): void {
    for (const timer of this.timers) clearTimeout(timer);
    for (const waiter of this.waiters.splice(0)) {
      clearTimeout(waiter.timer);
      waiter.reject(errors.noHealthyWorker());
    }
  }

  private candidates(exclude: ReadonlySet<WorkerState>): WorkerState[] {
    const now = this.now();
    return this.workers.filter((state) => state.isAvailable(now) && !exclude.has(state));
  }

  private take(state: WorkerState): WorkerState {
    state.outstanding++;
    return state;
  }

  private recordFailure(state: WorkerState): void {
    state.consecutiveFailures++;
    const { consecutiveFailures, baseMs, maxMs } = this.settings.ejection;
    if (state.consecutiveFailures < consecutiveFailures || state.ejectedUntil > this.now()) return;
    state.consecutiveFailures = 0;
    state.ejectionStreak++;
    const forMs = Math.min(baseMs * 2 ** (state.ejectionStreak - 1), maxMs);
    state.ejectedUntil = this.now() + forMs;
    this.events.ejected(state, forMs);
    // When the ejection ends, requests waiting in the queue may go to this worker again.
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      this.serveWaiters();
    }, forMs);
    timer.unref();
    this.timers.add(timer);
  }

  /** In order, but a waiter that cannot use the free workers (a retry excluding them) does not hold up those behind it. */
  private serveWaiters(): void {
    for (let i = 0; i < this.waiters.length; ) {
      const waiter = this.waiters[i]!;
      const chosen = pickLeastLoaded(this.candidates(waiter.exclude).filter((state) => state.hasRoom()));
      if (!chosen) {
        i++;
        continue;
      }
      this.waiters.splice(i, 1);
      clearTimeout(waiter.timer);
      waiter.resolve(this.take(chosen));
    }
  }

  private retryAfterSeconds(): number {
    return Math.max(1, Math.ceil(this.settings.queue.timeoutMs / 1000));
  }
}
