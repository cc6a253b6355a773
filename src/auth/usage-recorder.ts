/**
 * What each key used (when, how many requests, how many tokens), kept in memory on the request path
 * and written to the store in one batch per interval, never per request.
 */
import type { KeyStore, KeyUse } from './store/types';

export class UsageRecorder {
  private pending = new Map<string, KeyUse>();
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly store: KeyStore,
    private readonly onError: (err: unknown) => void = () => undefined,
  ) {}

  /** A request was admitted with this key. */
  used(id: string, at = new Date()): void {
    const use = this.entry(id);
    use.at = at;
    use.requests++;
  }

  /** An answer reported its token counts. */
  tokens(id: string, promptTokens: number, completionTokens: number): void {
    const use = this.entry(id);
    use.promptTokens += promptTokens;
    use.completionTokens += completionTokens;
  }

  start(intervalMs: number): void {
    this.timer = setInterval(() => void this.flush(), intervalMs);
    this.timer.unref();
  }

  /** Writes what is pending; on failure it is merged back for the next try. */
  async flush(): Promise<void> {
    if (this.pending.size === 0) return;
    const batch = this.pending;
    this.pending = new Map();
    try {
      await this.store.recordUse(batch);
    } catch (err) {
      for (const [id, use] of batch) {
        const later = this.entry(id);
        later.at = later.requests > 0 ? later.at : use.at;
        later.requests += use.requests;
        later.promptTokens += use.promptTokens;
        later.completionTokens += use.completionTokens;
      }
      this.onError(err);
    }
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.flush();
  }

  private entry(id: string): KeyUse {
    let use = this.pending.get(id);
    if (!use) {
      use = { at: new Date(0), requests: 0, promptTokens: 0, completionTokens: 0 };
      this.pending.set(id, use);
    }
    return use;
  }
}
