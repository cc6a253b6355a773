/**
 * A cached key's parts that many keys hold alike, held once (auth/cache.ts). The key cache lives in
 * the old generation, and each collection there marks every object it holds: a record as a store
 * builds it is some twenty objects (its model and endpoint lists and their strings, its limits, quota
 * and budget, its account's and maker's names, its digest), most of them equal across keys. Shared,
 * a cached key is a handful of objects: its record, its entry and the strings only it has.
 *
 * A shared part is frozen, since every key that holds it sees it. The table of parts is bounded: a part
 * whose id is longer than `MAX_PART_LENGTH` (a long list of globs or addresses) stays the key's own, and
 * once the table holds `MAX_PARTS` it starts again (parts already shared stay with their keys), so it
 * holds at most about 10 MiB (ids and parts of two-byte characters), whatever keys come and go.
 */
import type { KeyAuthRecord } from '../store/types';

/** Distinct parts held at most (lists, limits and names together). */
export const MAX_PARTS = 10_000;
/** The longest part held, in characters of its id. */
export const MAX_PART_LENGTH = 256;

export class SharedParts {
  private readonly parts = new Map<string, unknown>();

  /**
   * A copy of the record with its common parts shared, and its digest the cache's own string for it.
   * Made as one literal, so that every cached record has one shape and holds its fields itself (a
   * record a store built field by field keeps most of them in a second object).
   */
  compact(record: KeyAuthRecord, digest: string): KeyAuthRecord {
    const compacted: KeyAuthRecord = {
      id: record.id,
      name: record.name,
      digest: record.digest === digest ? digest : record.digest,
      prefix: record.prefix,
      createdAt: record.createdAt,
      revokedAt: record.revokedAt,
      expiresAt: record.expiresAt,
      models: this.list(record.models),
      endpoints: this.list(record.endpoints),
      allowedIps: this.list(record.allowedIps),
      rateLimit: this.object('l', record.rateLimit),
      accountId: this.text(record.accountId),
      createdBy: this.text(record.createdBy),
      quota: this.object('q', record.quota),
      budget: this.object('b', record.budget),
    };
    // What few records have: a rotation's grace, and what a store that returns whole keys adds.
    if (record.previousKey !== undefined) compacted.previousKey = record.previousKey;
    if (record.previousKeyExpiresAt !== undefined) compacted.previousKeyExpiresAt = record.previousKeyExpiresAt;
    if (record.usage !== undefined) compacted.usage = record.usage;
    if (record.lastUsedAt !== undefined) compacted.lastUsedAt = record.lastUsedAt;
    return compacted;
  }

  /** How many distinct parts are held. */
  get size(): number {
    return this.parts.size;
  }

  // Each part is shared only when it is what the record's type says (a store of ours always builds
  // it so); anything else stays as the store gave it, so that a copy never fails where the record worked.

  private list(list: string[]): string[] {
    if (!Array.isArray(list) || !list.every((item) => typeof item === 'string')) return list;
    const id = JSON.stringify(list);
    if (id.length > MAX_PART_LENGTH) return Object.freeze([...list]) as string[];
    return this.held(id, () => Object.freeze(list.map((item) => this.text(item))) as string[]);
  }

  /** Limits, a quota, a budget: fields of numbers and nulls, told apart exactly (NaN from null, -0 from 0). */
  private object<T extends object>(kind: string, value: T): T {
    if (typeof value !== 'object' || value === null || Array.isArray(value)) return value;
    const fields = Object.entries(value);
    if (!fields.every(([, field]) => field === null || typeof field === 'number')) return value;
    const id = `${kind}${JSON.stringify(fields.map(([name, field]) => [name, Object.is(field, -0) ? '-0' : String(field)]))}`;
    return this.held(id, () => Object.freeze({ ...value }));
  }

  private text(text: string): string {
    if (typeof text !== 'string') return text;
    return this.held(`'${text}`, () => text);
  }

  private held<T>(id: string, make: () => T): T {
    const part = this.parts.get(id);
    if (part !== undefined) return part as T;
    const made = make();
    if (id.length > MAX_PART_LENGTH) return made;
    if (this.parts.size >= MAX_PARTS) this.parts.clear();
    this.parts.set(id, made);
    return made;
  }
}
