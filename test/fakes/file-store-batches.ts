/**
 * The file store's writes in batches: changes queued while a write is under way are applied
 * together, in order, in the next one (one lock, one read, one write for the lot), so a burst of
 * sign-ins or admin calls costs a few rewrites of the file instead of one each. A change that throws
 * fails alone; a failed write fails its whole batch. Callers are answered once the batch's write
 * (and its lock) is done.
 */

/** A change of the data: what to write, and the digests of keys it changed (for caches). */
export type BatchChange<D, T> = (data: D) => { data: D; changed?: string[]; result: T };

export interface QueuedChange<D> {
  apply: BatchChange<D, unknown>;
  resolve: (result: unknown) => void;
  reject: (err: unknown) => void;
}

export class ChangeBatches<D> {
  private readonly queue: Array<QueuedChange<D>> = [];
  private draining = false;
  /** The write under way and those queued behind it (a store's close() waits for it). */
  writing: Promise<void> = Promise.resolve();

  /** `writeBatch` writes a batch and returns each change's outcome, to be told after it returns. */
  constructor(private readonly writeBatch: (batch: ReadonlyArray<QueuedChange<D>>) => Promise<Array<() => void>>) {}

  add<T>(apply: BatchChange<D, T>): Promise<T> {
    const queued = new Promise<T>((resolve, reject) => this.queue.push({ apply, resolve: resolve as (result: unknown) => void, reject }));
    if (!this.draining) {
      this.draining = true;
      this.writing = this.drain();
    }
    return queued;
  }

  private async drain(): Promise<void> {
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0);
      let settle: Array<() => void>;
      try {
        settle = await this.writeBatch(batch);
      } catch (err) {
        settle = batch.map(({ reject }) => () => reject(err));
      }
      for (const done of settle) done();
    }
    // Between the last look at the queue and this line nothing else runs: a change queued by a caller
    // just answered is in the queue already, or will start a drain of its own.
    this.draining = false;
  }
}

/** Pure: the batch applied in order; a change that throws is left out and told so. */
export function applyBatch<D>(data: D, batch: ReadonlyArray<QueuedChange<D>>): { data: D; changed: string[]; outcomes: Array<() => void> } {
  const changed = new Set<string>();
  const outcomes: Array<() => void> = [];
  for (const { apply, resolve, reject } of batch) {
    try {
      const outcome = apply(data);
      data = outcome.data;
      for (const digest of outcome.changed ?? []) changed.add(digest);
      outcomes.push(() => resolve(outcome.result));
    } catch (err) {
      outcomes.push(() => reject(err));
    }
  }
  return { data, changed: [...changed], outcomes };
}
