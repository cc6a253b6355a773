/**
 * What /readyz answers, and within what time. Readiness says whether this replica should get
 * traffic: it is not ready while it drains (or, in cluster mode, while its serving processes are not
 * all up). A dependency every replica shares (the key store, the Redis of the rate limits, a
 * provider's workers) never makes it unready: taking every replica out of rotation at once, because
 * the database blinked, would turn a blink into an outage, while cached keys still serve. Such a
 * dependency makes the answer `degraded` (still 200), with the failing check named, and sets
 * chatgate_dependency_up to 0: that is what an operator's alert fires on.
 */

export type DependencyState = 'up' | 'degraded' | 'down';

export interface Readiness {
  ready: boolean;
  status: 'ready' | 'degraded' | 'not_ready';
  checks: Record<string, unknown>;
}

export interface ReadinessFacts {
  /** False once a drain has begun. */
  accepting: boolean;
  /** The key store answered its ping within the deadline (undefined: it did not answer in time). */
  keyStoreAnswers: boolean | undefined;
  /** Known keys this process could serve even with the store away. */
  servableKeys: number;
  /** Per provider: has it a worker that may take traffic? */
  providers: Record<string, boolean>;
  /** The rate limit store's state, when one is shared (Redis). */
  rateLimitStore?: boolean;
  /** Cluster mode: the primary's count of its serving processes. */
  processes?: { wanted: number; running: number; ready: number };
}

/** Pure: the verdict and the body's checks. */
export function judgeReadiness(facts: ReadinessFacts): Readiness {
  const keyStore: DependencyState = facts.keyStoreAnswers ? 'up' : facts.servableKeys > 0 ? 'degraded' : 'down';
  const processesUp = !facts.processes || facts.processes.ready === facts.processes.wanted;
  const ready = facts.accepting && processesUp;
  const degraded = keyStore !== 'up' || facts.rateLimitStore === false || Object.values(facts.providers).some((up) => !up);
  return {
    ready,
    status: !ready ? 'not_ready' : degraded ? 'degraded' : 'ready',
    checks: {
      accepting: facts.accepting,
      keyStore,
      cachedKeys: facts.servableKeys,
      ...(facts.rateLimitStore === undefined ? {} : { rateLimitStore: facts.rateLimitStore ? 'up' : 'down' }),
      providers: facts.providers,
      ...(facts.processes ? { processes: facts.processes } : {}),
    },
  };
}

/** Resolves with the promise's value, or with `fallback` once `ms` have passed: a probe must never hang. */
export function within<T>(ms: number, work: Promise<T>, fallback: T): Promise<T> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(fallback), ms);
    work.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      () => {
        clearTimeout(timer);
        resolve(fallback);
      },
    );
  });
}

/** /readyz answers within this, whatever its dependencies do (a Kubernetes probe gives up after 1-2 s). */
export const READINESS_DEADLINE_MS = 1_500;
/** A dependency's ping that has not answered by then counts as down for this answer. */
export const PING_DEADLINE_MS = 800;
