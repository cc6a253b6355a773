/**
 * What each key used (when, how many requests, how many tokens), kept in memory on the request path
 * and written to the store in one batch per interval, never per request: each key's totals, its
 * account's daily usage (by UTC day) and the ledger's rows (by day, key, model and end user). The stores keep these in usage rows, never in the key rows, so
 * a flush for every key in use neither rewrites the key table nor announces a key change.
 *
 * A batch is written in slices of SLICE uses, in the order auth/use-order.ts gives (by key, sorted in
 * pieces), the event loop free between two: SQLite writes on the
 * event loop, and one statement for 100,000 keys in use held it for 460 ms, the p99 of every request
 * meanwhile. A use costs SQLite 4.6 µs in a small store and about 18 µs among 1,000,000 keys (a
 * page a key, read and written), so a slice is a few milliseconds.
 *
 * The flush the timer starts spreads its slices over a quarter of the interval (SPREAD), one at a time.
 * Written back to back, the 10,000 uses of 10,000 keys in use (40 slices) took the store's CPU (the
 * SQLite writer thread, or PostgreSQL) at once every 10 s, and on a host of two cores that burst set
 * the gateway's p99: 11-13 ms at 10,000 and 100,000 keys in use against one key's 4-5 ms, and 3.9-5.4
 * with no flush in the measured time (docs/performance.md, Scale). stop() writes what is left at once.
 *
 * Each slice goes with an id of its own. A slice whose write failed may have landed all the same (a
 * PostgreSQL commit answered after our deadline): it is sent again as it was, under the same id, first
 * thing at the next flush, and the store skips an id it has recorded, so it counts once either way.
 * The slices after it were never sent: merged back with the uses that come meanwhile. Those before
 * it are written, and are not written again.
 */
import { randomUUID } from 'node:crypto';
import type { Store, KeyUse } from '../store/types';
import { add, detailOf, find, isNote, UsePool, type PendingUse } from './pending-uses';
import { SLICE, SORTED_RUN, sortedRun } from './use-order';

/** A timer-driven flush spreads its slices over this share of the interval (a use shows at most 1.25 intervals late). */
export const SPREAD = 1 / 4;
/** Old usage rows deleted by one store call. */
export const PRUNE_SLICE = 10_000;
/** A turn of the event loop: what requests get between two pieces of a flush's work. */
const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

/** The key a use is counted for. */
export interface UsedKey {
  readonly id: string;
  readonly accountId: string;
}

/** What the ledger breaks a key's day down by: the model that answered ('' before one was chosen) and the end user's digest ('' for none). */
export interface UseDetail {
  readonly model: string;
  readonly endUser: string;
}

const NO_DETAIL: UseDetail = { model: '', endUser: '' };
/** A key's pairs of a day past its cap are counted under this model and end user. */
export const OVER_CAP = '*';
const OVER_CAP_DETAIL: UseDetail = { model: OVER_CAP, endUser: OVER_CAP };
/** Ledger rows a key may make a day, in one process, unless the config says otherwise. */
export const DEFAULT_PAIRS_PER_KEY_DAY = 10_000;
/** All keys together: at most this many times a key's cap a day, in one process. */
export const PROCESS_PAIRS = 10;

export class UsageRecorder {
  /**
   * The uses to write: each key's latest (auth/pending-uses.ts), by the key's id, the very string of
   * the cached key on every request (its hash kept in it). A text of key, day, model and end user for
   * every count, looked up among the batch's, took 2-5 µs a request at 100,000 keys in use (240 ms of
   * the gateway's 15.2 s in 50 s) against 0.3 with one key.
   */
  private pending = new Map<string, PendingUse>();
  private flushing: Promise<void> = Promise.resolve();
  /** Slices whose write failed, to be sent again as they were (their id with them) before anything else. */
  private readonly unsure: Array<{ readonly id: string; readonly uses: readonly KeyUse[] }> = [];
  private timer: NodeJS.Timeout | undefined;
  /** How long a timer-driven flush spreads its slices over. */
  private spreadMs = 0;
  /** Ends the wait between two spread slices at once (stop()). */
  private hurry: (() => void) | undefined;
  private stopping = false;
  /** The last day a use was counted for (days since 1970), and its date. */
  private day = Number.NaN;
  private dateText = '';
  /**
   * The model and end user pairs each key used today (this process), by key id: a client that names a
   * new end user (or model) on every request would otherwise make a ledger row a request. Past the
   * cap, its day's further pairs are counted as one (OVER_CAP). A key's one pair is kept as it is, a
   * set made at its second. Yesterday's go when a new day's use comes.
   */
  private pairs = new Map<string, string | Set<string>>();
  /** The same for a use of an earlier day than today's (a request ending past midnight), by key id and day. */
  private earlierPairs = new Map<string, string | Set<string>>();
  private pairsDate = '';
  /** Pairs kept today in all, under PROCESS_PAIRS times a key's cap: many keys at their cap would hold too much. */
  private pairsToday = 0;

  constructor(
    private readonly store: Pick<Store, 'recordUse'>,
    private readonly onError: (err: unknown) => void = () => undefined,
    private readonly pairsPerKeyDay = DEFAULT_PAIRS_PER_KEY_DAY,
    /** Written uses kept to be made again; aged at each flush. */
    private readonly pool = new UsePool(),
  ) {}

  /**
   * A request was made with this key (its last use), noted on the key's latest use of the day when
   * there is one. Else it is a use of its own, under no model (none is chosen yet), which becomes
   * the request's use once it is counted under a model (see `entry`). So a key in use is one use of
   * a batch, not two. With 100,000 keys in use, a note of its own for every key doubled the uses a
   * flush carried, and the objects kept until it: the gateway promoted 58 MiB in 50 s against 35-37
   * then. SQLite's writer thread, which wrote each key's totals and daily row twice, took 2.5-2.8 s
   * of CPU in those 50 s against 1.7 then (docs/performance.md, Scale).
   */
  used(key: UsedKey, at = new Date()): void {
    const latest = this.pending.get(key.id);
    if (latest !== undefined && latest.date === this.dateOf(at)) {
      const ms = at.getTime();
      if (ms > latest.at) latest.at = ms;
      return;
    }
    this.entry(key, at, NO_DETAIL).at = at.getTime();
  }

  /** A model request made with this key is over: served (a worker answered) or refused by the gateway itself. */
  ended(key: UsedKey, served: boolean, at = new Date(), detail = NO_DETAIL): void {
    const use = this.entry(key, at, detail);
    const ms = at.getTime();
    if (ms > use.at) use.at = ms; // a use begun before the last flush has its time in this one too
    if (served) use.requests++;
    else use.refused++;
  }

  /** An answer reported its token counts; what they cost by the price table, in nano-units. */
  tokens(key: UsedKey, promptTokens: number, completionTokens: number, at = new Date(), costNanos = 0, detail = NO_DETAIL): void {
    const use = this.entry(key, at, detail);
    use.promptTokens += promptTokens;
    use.completionTokens += completionTokens;
    use.costNanos += costNanos;
  }

  start(intervalMs: number): void {
    this.spreadMs = intervalMs * SPREAD;
    this.timer = setInterval(() => void this.flush(true), intervalMs);
    this.timer.unref();
  }

  /**
   * Writes the slices whose write failed (again, as they were), then what is pending, slice by slice.
   * A slice that fails is kept as it was; what was not sent after it is merged back for the next try.
   * One flush at a time: a second waits for the one under way (stop() so writes all of it before the
   * store closes). `spread`: the slices are spread over the spread time (the timer's flushes).
   */
  flush(spread = false): Promise<void> {
    const run = this.flushing.then(() => this.flushOnce(spread));
    this.flushing = run.catch(() => undefined);
    return run;
  }

  private async flushOnce(spread: boolean): Promise<void> {
    while (this.unsure.length > 0) {
      const slice = this.unsure[0]!;
      try {
        await this.store.recordUse(slice.uses, slice.id);
      } catch (err) {
        this.onError(err);
        return;
      }
      if (this.unsure[0] === slice) this.unsure.shift();
    }
    this.pool.age();
    if (this.pending.size === 0) return;
    const batch = this.pending;
    this.pending = new Map();
    const keys = [...batch.keys()];
    let count = 0;
    for (const latest of batch.values()) count += latest.all?.size ?? 1;
    const gapMs = spread ? this.spreadMs / Math.ceil(count / SLICE) : 0;
    for (let from = 0; from < keys.length; from += SORTED_RUN) {
      if (from > 0) await this.between(gapMs);
      const run = await sortedRun(batch, keys, from, turn);
      for (let first = true; !run.done; first = false) {
        if (!first) await this.between(gapMs); // requests run between two slices
        const slice = { id: randomUUID(), uses: run.take(SLICE).map((use) => this.pool.send(use)) };
        try {
          await this.store.recordUse(slice.uses, slice.id);
        } catch (err) {
          this.unsure.push(slice);
          this.keep(run.rest());
          for (const key of keys.slice(from + SORTED_RUN)) {
            const latest = batch.get(key)!;
            this.keep(latest.all === undefined ? [latest] : [...latest.all.values()]);
          }
          this.onError(err);
          return;
        }
      }
    }
  }

  /** Uses never sent, merged back into what came since (the later use time kept). */
  private keep(unsent: readonly PendingUse[]): void {
    for (const use of unsent) {
      use.all = undefined; // the batch's: each is added to what came since as a use of its own
      const latest = this.pending.get(use.keyId);
      const later = latest && find(latest, use.date, use.model, use.endUser);
      if (!later) {
        if (latest) add(latest, use);
        else this.pending.set(use.keyId, use);
        continue;
      }
      if (use.at > later.at) later.at = use.at;
      later.requests += use.requests;
      later.refused += use.refused;
      later.costNanos += use.costNanos;
      later.promptTokens += use.promptTokens;
      later.completionTokens += use.completionTokens;
    }
  }

  /** The wait between two slices: a turn of the event loop, or `ms` while not stopping. */
  private between(ms: number): Promise<void> {
    if (ms < 1 || this.stopping) return turn();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.hurry = undefined;
        resolve();
      };
      const timer = setTimeout(done, ms);
      timer.unref();
      this.hurry = done;
    });
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.stopping = true;
    this.hurry?.(); // a spread flush under way writes the rest at once
    await this.flush();
  }

  /** The UTC day of `at`: one string a day, shared by every use of it (a string each would live in each use until its flush). */
  private dateOf(at: Date): string {
    const day = Math.floor(at.getTime() / 86_400_000);
    if (day !== this.day) {
      this.dateText = at.toISOString().slice(0, 10);
      this.day = day;
    }
    return this.dateText;
  }

  private entry(key: UsedKey, at: Date, detail: UseDetail): PendingUse {
    const date = this.dateOf(at);
    const { model, endUser } = this.withinCap(key.id, date, detail);
    const latest = this.pending.get(key.id);
    const found = latest && find(latest, date, model, endUser);
    if (found) return found;
    if (latest && latest.date === date && isNote(latest) && (model !== '' || endUser !== '')) {
      // The start of this request, noted before a model was chosen: it becomes the request's use.
      latest.all?.delete(detailOf(date, '', ''));
      this.pool.name(latest, model, endUser);
      latest.accountId = key.accountId; // the account the request is counted to, as a use made for it would be
      latest.all?.set(detailOf(date, model, endUser), latest);
      return latest;
    }
    const use = this.pool.use(key.id, key.accountId, date, model, endUser);
    if (!latest) {
      this.pending.set(key.id, use);
      return use;
    }
    add(latest, use);
    use.all = latest.all;
    latest.all = undefined;
    this.pending.set(key.id, use);
    return use;
  }

  /** The pair as it is counted: itself while the key's day has room for it, else OVER_CAP's. */
  private withinCap(keyId: string, date: string, detail: UseDetail): UseDetail {
    if (detail.model === '' && detail.endUser === '') return detail;
    if (date > this.pairsDate) {
      this.pairs = new Map();
      this.earlierPairs = new Map();
      this.pairsDate = date;
      this.pairsToday = 0;
    }
    const today = date === this.pairsDate;
    const pairs = today ? this.pairs : this.earlierPairs;
    const of = today ? keyId : `${keyId} ${date}`;
    const seen = pairs.get(of);
    const pair = `${detail.model} ${detail.endUser}`;
    if (seen === pair || (typeof seen === 'object' && seen.has(pair))) return detail;
    const size = seen === undefined ? 0 : typeof seen === 'string' ? 1 : seen.size;
    if (size >= this.pairsPerKeyDay || this.pairsToday >= PROCESS_PAIRS * this.pairsPerKeyDay) return OVER_CAP_DETAIL;
    if (seen === undefined) pairs.set(of, pair);
    else if (typeof seen === 'string') pairs.set(of, new Set([seen, pair]));
    else seen.add(pair);
    this.pairsToday++;
    return detail;
  }
}

/**
 * Deletes usage rows (daily and ledger) of days more than `days` before today, soon after the start
 * and then every `everyMs`, in calls of PRUNE_SLICE rows (each within the store's deadline; every
 * replica does it, and a delete that finds none is an index probe). Returns what stops it.
 */
export function retainUsage(store: Pick<Store, 'pruneUsage'>, days: number, onError: (err: unknown) => void, everyMs = 3_600_000, firstAfterMs = 60_000): () => void {
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  const prune = async () => {
    const before = new Date(Date.now() - days * 86_400_000).toISOString().slice(0, 10);
    try {
      while (!stopped && (await store.pruneUsage(before, PRUNE_SLICE)) === PRUNE_SLICE) await turn();
    } catch (err) {
      onError(err);
    }
  };
  const next = (afterMs: number) => {
    timer = setTimeout(() => void prune().finally(() => stopped || next(everyMs)), afterMs).unref();
  };
  next(firstAfterMs);
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
