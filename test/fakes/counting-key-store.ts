/**
 * An in-memory KeyStore for cache tests: it counts findByDigest calls, can be told to fail, and can
 * hold lookups in flight. Like a real store it hands out copies, so a change made to a record after a
 * caller read it is seen only by reading again (a cache cannot pass a test by sharing an object).
 */
import type { KeyChanges, KeyRecord, Store } from '../../src/store/types';
import { MemoryAccountStore } from './memory-account-store';

export class CountingKeyStore extends MemoryAccountStore implements Store {
  private readonly records = new Map<string, KeyRecord>();
  /** How many times findByDigest was called. */
  lookups = 0;
  /** While true, findByDigest and ping reject with 'store down'. */
  failing = false;
  /** Whether the cache may trust its change feed (a test sets it; the cache reads it on every lookup). */
  changeFeedLive = false;
  /** As the store guard says it: false while failing. */
  get reachable(): boolean {
    return !this.failing;
  }
  /** Resolve lookups only when released, to hold several in flight at once. */
  private gate: Promise<void> | undefined;
  private openGate: (() => void) | undefined;

  async findByDigest(digest: string): Promise<KeyRecord | undefined> {
    this.lookups++;
    await this.gate;
    if (this.failing) throw Object.assign(new Error('store down'), { code: 'ECONNREFUSED' }); // as a database that is away
    return copy(this.records.get(digest));
  }
  async get(id: string): Promise<KeyRecord | undefined> {
    return copy(this.byId(id));
  }
  async list(accountId?: string): Promise<KeyRecord[]> {
    return [...this.records.values()].filter((record) => accountId === undefined || record.accountId === accountId).map((record) => structuredClone(record));
  }
  async listExpiring(from: Date, to: Date): Promise<KeyRecord[]> {
    return (await this.list())
      .filter((k) => !k.revokedAt && k.expiresAt !== null && Date.parse(k.expiresAt) > from.getTime() && Date.parse(k.expiresAt) <= to.getTime())
      .sort((a, b) => Date.parse(a.expiresAt!) - Date.parse(b.expiresAt!) || (a.id < b.id ? -1 : 1));
  }
  async hasKeys(): Promise<boolean> {
    return this.records.size > 0;
  }
  async insert(record: KeyRecord): Promise<void> {
    this.records.set(record.digest, structuredClone(record));
  }
  async update(id: string, changes: KeyChanges): Promise<KeyRecord | undefined> {
    const record = this.byId(id);
    if (!record) return undefined;
    const { rateLimit, ...fields } = changes;
    Object.assign(record, fields, { rateLimit: { ...record.rateLimit, ...rateLimit } });
    return copy(record);
  }
  async revoke(id: string, at: Date): Promise<KeyRecord | undefined> {
    const record = this.byId(id);
    if (record && !record.revokedAt) record.revokedAt = at.toISOString();
    return copy(record);
  }
  async rotate(id: string, digest: string, prefix: string): Promise<KeyRecord | undefined> {
    const record = this.byId(id);
    if (!record) return undefined;
    this.records.delete(record.digest);
    Object.assign(record, { digest, prefix });
    this.records.set(digest, record);
    return copy(record);
  }
  async recordUse(): Promise<void> {}
  onChange(): void {}
  async ping(): Promise<void> {
    if (this.failing) throw Object.assign(new Error('store down'), { code: 'ECONNREFUSED' }); // as a database that is away
  }
  async close(): Promise<void> {}

  /** From now on, lookups wait (after being counted) until release(). */
  hold(): void {
    this.gate = new Promise((resolve) => (this.openGate = resolve));
  }
  release(): void {
    this.openGate?.();
    this.gate = undefined;
  }

  private byId(id: string): KeyRecord | undefined {
    return [...this.records.values()].find((record) => record.id === id);
  }
}

function copy(record: KeyRecord | undefined): KeyRecord | undefined {
  return record && structuredClone(record);
}
