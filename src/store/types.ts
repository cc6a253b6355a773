/**
 * The key store contract. Backends (the file store, the embedded default; PostgreSQL for shared
 * mode) hold key records by digest; none ever sees a clear key. Both pass one contract test suite.
 */
export interface KeyRecord {
  id: string;
  name: string;
  /** SHA-256 of the key, hex. Never leaves the gateway. */
  digest: string;
  /** The first characters of the key, to recognise it in a list. */
  prefix: string;
  createdAt: string;
  revokedAt: string | null;
  expiresAt: string | null;
  /** Globs over `<provider>/<model_name>`; empty means every model. */
  models: string[];
  /** When the key was last accepted, written in batches (so minutes behind at most). */
  lastUsedAt: string | null;
  /** The key's own limits; null: the configured default; 0: no limit for this key. */
  rateLimit: KeyLimits;
  /** Totals since the key was created, written in batches. */
  usage: KeyUsage;
}

export interface KeyLimits {
  requestsPerMinute: number | null;
  tokensPerMinute: number | null;
  maxConcurrent: number | null;
}

export interface KeyUsage {
  requests: number;
  promptTokens: number;
  completionTokens: number;
}

export const NO_OWN_LIMITS: KeyLimits = { requestsPerMinute: null, tokensPerMinute: null, maxConcurrent: null };
export const NO_USAGE: KeyUsage = { requests: 0, promptTokens: 0, completionTokens: 0 };

/** What a batch adds to one key: its latest use and what it used. */
export interface KeyUse extends KeyUsage {
  at: Date;
}

export interface KeyChanges {
  name?: string;
  models?: string[];
  expiresAt?: string | null;
  rateLimit?: Partial<KeyLimits>;
}

export interface KeyStore {
  findByDigest(digest: string): Promise<KeyRecord | undefined>;
  get(id: string): Promise<KeyRecord | undefined>;
  list(): Promise<KeyRecord[]>;
  insert(record: KeyRecord): Promise<void>;
  update(id: string, changes: KeyChanges): Promise<KeyRecord | undefined>;
  /** Marks the key revoked (once; a second call keeps the first time). Undefined when no key has that id. */
  revoke(id: string, at: Date): Promise<KeyRecord | undefined>;
  /** Gives the key a new secret: same id and settings, the old digest stops matching. */
  rotate(id: string, digest: string, prefix: string): Promise<KeyRecord | undefined>;
  /** Adds a batch of use: id -> latest time (later times win) and counts to add to the totals. */
  recordUse(uses: ReadonlyMap<string, KeyUse>): Promise<void>;
  /**
   * Calls back with the digests of keys that changed, whoever changed them (this process, the CLI,
   * another replica), so caches can drop them; `undefined` means "anything may have changed".
   */
  onChange(listener: (digests: string[] | undefined) => void): void;
  /** Resolves when the store can be read; rejects otherwise (readiness). */
  ping(): Promise<void>;
  close(): Promise<void>;
}
