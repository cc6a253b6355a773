/**
 * The order a usage batch is written in (auth/usage-recorder.ts): by key, then by each key's days,
 * models and end users. It is the order of each key's totals and of its daily rows (and of the
 * ledger's rows, within an account and a day), so that each slice's uses are of neighbouring keys, in
 * the same pages. Among 1,000,000 keys, the 9,500 uses a 10 s flush carries at 100,000 keys in use
 * cost SQLite about 100 µs of CPU a use, and wrote 155 MB to its log, in the order they came; sorted,
 * 50 µs and 81 MB. (PostgreSQL orders each slice's rows itself, so that two replicas do not deadlock.)
 *
 * Sorting takes the event loop, so it is made in pieces. A batch is sorted in runs of SORTED_RUN keys,
 * each just before its first slice is sent; a run's keys are sorted SORTED_CHUNK at a time, a turn of
 * the event loop each (the keys' ids, compared as text by the engine's own sort, then their uses looked
 * up), and the chunks are merged as the slices are taken. Sorted and looked up whole, the 9,500 keys
 * of a flush at 100,000 keys in use took 2.7-3.5 ms to sort and 0.8-3.3 to look up, and merged
 * whole after a sort in chunks, 1-4 ms: the flush's longest turn was 5.0-5.7 ms (10.3-13.1 at worst,
 * with a collection); in pieces, 2.3-3.3 (7.7-9.7), for 1-2 ms more CPU a flush of 16.
 */
import type { PendingUse } from './pending-uses';

/** Uses written by one store call (1-5 ms of SQLite). */
export const SLICE = 250;
/** Keys sorted together: their slices are of neighbouring keys. */
export const SORTED_RUN = 40 * SLICE;
/** Keys of a run sorted in one turn of the event loop. */
export const SORTED_CHUNK = 4 * SLICE;

const byDetail = ([a]: [string, PendingUse], [b]: [string, PendingUse]) => (a < b ? -1 : a > b ? 1 : 0);

/** A run's uses in the batch's order, taken a slice at a time from its sorted chunks. */
export class SortedRun {
  private readonly heads: number[];
  /** The uses of the key taken last that are still to go (a key with several uses). */
  private spill: PendingUse[] = [];

  constructor(private readonly chunks: ReadonlyArray<readonly PendingUse[]>) {
    this.heads = chunks.map(() => 0);
  }

  get done(): boolean {
    return this.spill.length === 0 && this.chunks.every((chunk, c) => this.heads[c] === chunk.length);
  }

  /** The next `count` uses (fewer at the end). */
  take(count: number): PendingUse[] {
    const taken = this.spill.splice(0, count);
    while (taken.length < count) {
      const latest = this.nextKey();
      if (latest === undefined) break;
      if (latest.all === undefined) {
        taken.push(latest);
        continue;
      }
      const uses = [...latest.all].sort(byDetail).map(([, use]) => use);
      const room = count - taken.length;
      taken.push(...uses.slice(0, room));
      this.spill = uses.slice(room);
    }
    return taken;
  }

  /** Every use not yet taken. */
  rest(): PendingUse[] {
    const rest: PendingUse[] = [];
    while (!this.done) rest.push(...this.take(SORTED_RUN));
    return rest;
  }

  /** The key whose id is least among the chunks' heads (each key is in one chunk). */
  private nextKey(): PendingUse | undefined {
    let least = -1;
    for (let c = 0; c < this.chunks.length; c++) {
      if (this.heads[c]! < this.chunks[c]!.length && (least < 0 || this.chunks[c]![this.heads[c]!]!.keyId < this.chunks[least]![this.heads[least]!]!.keyId)) least = c;
    }
    return least < 0 ? undefined : this.chunks[least]![this.heads[least]!++];
  }
}

/**
 * The run of SORTED_RUN keys that starts at `from` (`keys`: the batch's, in any order; `batch`: each
 * key's latest use), its chunks sorted with `turn()` awaited between two.
 */
export async function sortedRun(batch: ReadonlyMap<string, PendingUse>, keys: readonly string[], from: number, turn: () => Promise<void>): Promise<SortedRun> {
  const end = Math.min(from + SORTED_RUN, keys.length);
  const chunks: PendingUse[][] = [];
  for (let at = from; at < end; at += SORTED_CHUNK) {
    if (at > from) await turn();
    chunks.push(
      keys
        .slice(at, Math.min(at + SORTED_CHUNK, end))
        .sort()
        .map((key) => batch.get(key)!),
    );
  }
  return new SortedRun(chunks);
}
