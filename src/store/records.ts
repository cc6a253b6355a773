/** Records of the store contract (types.ts) that are counts rather than things: usage, its breakdowns, alerts. */

/**
 * A secret the gateway makes for itself and keeps in the store, so that every replica has the same
 * one: the key that signs client tokens of one UTC day (`client-tokens:YYYYMMDD`). Random, base64url.
 */
export interface ServerSecret {
  id: string;
  secret: string;
  createdAt: string;
}

/** What one key used on one UTC day. */
export interface UsageDay {
  date: string;
  accountId: string;
  keyId: string;
  /** Requests a worker answered. */
  requests: number;
  /** Requests the gateway refused itself (rate limit, quota, validation, permission, no worker): never billed. */
  refused: number;
  /** What the answers cost by the price table, in nano-units of its currency (1e-9): whole numbers add up exactly. */
  costNanos: number;
  promptTokens: number;
  completionTokens: number;
}

/** What a breakdown groups by, and what it is narrowed to. */
export interface BreakdownQuery {
  by: 'model' | 'endUser';
  keyId?: string;
  /** An end user's digest. */
  endUser?: string;
  limit: number;
}

/** One model's or one end user's part of an account's usage over some days. */
export interface UsageShare {
  /** The model, or the end user's digest ('' for requests that named none). */
  group: string;
  requests: number;
  refused: number;
  costNanos: number;
  promptTokens: number;
  completionTokens: number;
}

/** How long an alert is kept: past any month it was made in (its id keeps a threshold to one alert a period). */
export const ALERTS_KEPT_DAYS = 62;

/** A threshold of a quota or budget crossed in one period: what is sent, and shown in the console. */
export interface AlertRecord {
  /** `<kind>:<key|account>:<id>:<d|m>:<period>:<threshold>`, one per threshold per period. */
  id: string;
  accountId: string;
  /** The key whose own quota or budget it is; null: the account's. */
  keyId: string | null;
  /** A threshold of a token quota or a budget; or a key that expires within a week (`key.expiring`). */
  kind: 'tokens' | 'budget' | 'key.expiring';
  period: 'day' | 'month';
  /** The UTC day (YYYY-MM-DD) or month (YYYY-MM). */
  periodStart: string;
  /** The share of the limit crossed, e.g. 0.8. */
  threshold: number;
  /** What was used when it was seen crossed, and the limit: tokens, or the price table's currency. */
  spent: number;
  limit: number;
  at: string;
  sentAt: string | null;
}
