/**
 * The usage recorder's uses while they wait for a flush (auth/usage-recorder.ts), made so that a key
 * in use costs the young generation nothing. A use waits up to an interval, so whatever it holds
 * outlives a young collection: copied by two, then kept in the old generation until its flush. With
 * 100,000 keys in use (SQLite, 1,000 requests/s, `--trace-gc-nvp` over 50 s), uses made anew for each
 * key's request, holding Dates, promoted 35 MiB against one key's 17, and the young collections'
 * pauses took 391-466 ms against 221-258: 0.9 % of the requests' time, one request in 110, the p99's
 * own share. So:
 * - a use holds its time as a number, and a key's other uses hang on its latest (no object between);
 * - a use sent to the store is kept (its counts taken) to be its key's next use: at 100,000 keys in
 *   use a key comes back every 100 s or so, and finds it; a key's request's start is noted on it and
 *   its end counted on it, never on a use of its own;
 * - a model's name is one string, not the one each request made.
 */
import type { KeyUse } from '../store/types';

export interface PendingUse {
  readonly keyId: string;
  accountId: string;
  date: string;
  /** When it was last used, in ms (0 until a request's start or end is noted on it). */
  at: number;
  requests: number;
  refused: number;
  costNanos: number;
  promptTokens: number;
  completionTokens: number;
  model: string;
  endUser: string;
  /** On the key's latest use: all of the key's uses by their day, model and end user, once it has more than one. */
  all: Map<string, PendingUse> | undefined;
}

/** A use's day, model and end user, as its key's uses are told apart and ordered. */
export const detailOf = (date: string, model: string, endUser: string) => `${date} ${model} ${endUser}`;

/** The key's use of this day, model and end user, if it has one (`latest`: the key's latest use). */
export function find(latest: PendingUse, date: string, model: string, endUser: string): PendingUse | undefined {
  if (latest.date === date && latest.model === model && latest.endUser === endUser) return latest;
  return latest.all?.get(detailOf(date, model, endUser));
}

/** Adds a use its key did not have (`latest`: the key's latest use, which stays its latest). */
export function add(latest: PendingUse, use: PendingUse): void {
  latest.all ??= new Map([[detailOf(latest.date, latest.model, latest.endUser), latest]]);
  latest.all.set(detailOf(use.date, use.model, use.endUser), use);
}

/** A use under no model that counts nothing: only a request's start (see UsageRecorder.used). */
export const isNote = (use: PendingUse) => use.model === '' && use.endUser === '' && use.requests === 0 && use.refused === 0 && use.promptTokens === 0 && use.completionTokens === 0 && use.costNanos === 0;

/** Written uses kept for their keys, in each of the two ages (a use is kept one to two ages). */
export const KEPT_USES = 100_000;
/** How long an age lasts. */
export const AGE_MS = 5 * 60_000;
/** Model names kept as one string each. */
export const MODEL_NAMES = 1000;

/** Uses made, and written uses kept to be made again. */
export class UsePool {
  private kept = new Map<string, PendingUse>();
  private keptBefore = new Map<string, PendingUse>();
  private agedAt: number;
  private readonly models = new Map<string, string>();

  constructor(private readonly now: () => number = Date.now) {
    this.agedAt = now();
  }

  /** A use of the key that counts nothing yet: the one kept for it if there is one. */
  use(keyId: string, accountId: string, date: string, model: string, endUser: string): PendingUse {
    const kept = this.kept.get(keyId) ?? this.keptBefore.get(keyId);
    if (kept === undefined) return { keyId, accountId, date, at: 0, requests: 0, refused: 0, costNanos: 0, promptTokens: 0, completionTokens: 0, model: this.modelName(model), endUser, all: undefined };
    this.kept.delete(keyId);
    this.keptBefore.delete(keyId);
    kept.accountId = accountId;
    kept.date = date;
    kept.at = 0;
    this.name(kept, model, endUser);
    return kept;
  }

  /** Gives a use its model and end user (a note becoming a request's use). */
  name(use: PendingUse, model: string, endUser: string): void {
    use.model = this.modelName(model);
    use.endUser = endUser;
  }

  /** The use as the store takes it. The use itself, its counts taken, is kept to be its key's next. */
  send(use: PendingUse): KeyUse {
    const sent: KeyUse = { keyId: use.keyId, accountId: use.accountId, date: use.date, at: new Date(use.at), requests: use.requests, refused: use.refused, costNanos: use.costNanos, promptTokens: use.promptTokens, completionTokens: use.completionTokens, model: use.model, endUser: use.endUser };
    use.requests = use.refused = use.costNanos = use.promptTokens = use.completionTokens = 0;
    use.all = undefined;
    if (this.kept.size < KEPT_USES) this.kept.set(use.keyId, use);
    return sent;
  }

  /** Uses kept for more than an age are let go (called at each flush). */
  age(): void {
    if (this.now() - this.agedAt < AGE_MS) return;
    this.keptBefore = this.kept;
    this.kept = new Map();
    this.agedAt = this.now();
  }

  private modelName(model: string): string {
    const named = this.models.get(model);
    if (named !== undefined) return named;
    if (this.models.size < MODEL_NAMES) this.models.set(model, model);
    return model;
  }
}
