/**
 * What a key may use and what it costs: rate limits (`rateLimit`), token quotas (`quota`), usage
 * accounting (`usage`), chargeback prices (`prices`) and the alerts at thresholds of quotas and
 * budgets (`alerts`).
 */
import { z } from 'zod';
import { count, milliseconds } from './parts';

export const rateLimitSection = z
  .strictObject({
    /** Defaults for every key; absent means unlimited. A key's own limits override them. */
    requestsPerMinute: count.optional(),
    tokensPerMinute: count.optional(),
    maxConcurrent: count.optional(),
    /** memory: this process only; redis: one limit across every replica. */
    store: z.enum(['memory', 'redis']).default('memory'),
    url: z.string().regex(/^rediss?:\/\//, 'must be a redis:// URL').optional(),
    /** When Redis cannot be reached: true admits requests unlimited, false refuses them (503). */
    failOpen: z.boolean().default(true),
    timeoutMs: milliseconds.default(250),
  })
  .prefault({})
  .refine((limits) => limits.store !== 'redis' || limits.url !== undefined, { message: 'store: redis needs url (or env CHATGATE_REDIS_URL)', path: ['url'] });

/** Token quotas of accounts and keys: counters every replica shares, synced this often. */
export const quotaSection = z
  .strictObject({
    syncMs: milliseconds.default(500),
    /** Reserved at admission for the output of a request that sets no max_tokens (or kin), under a quota. */
    defaultReserveTokens: z.number().int().min(0).max(100_000_000).default(1024),
    /** A request whose output bound does not fit what is left is served with its bound lowered to fit, instead of refused. */
    capMaxTokens: z.boolean().default(false),
  })
  .prefault({});

/** What an answer used, as the worker reports it. */
export const usageSection = z
  .strictObject({
    /**
     * A client that leaves during an answer: its rest is read (not relayed) this long at most for the
     * worker's usage, then the worker's connection is closed and the estimate charged; 0: at once.
     */
    drainAfterDisconnectMs: z.number().int().min(0).max(600_000).default(5_000),
    /** Days of usage kept (daily rows and the ledger), today not counted; older days are deleted. At least 62: a month's quota starts from its usage. */
    retentionDays: z.number().int().min(62).max(3650).default(400),
    /**
     * The ledger's rows a key may make in a UTC day, one per model and end user, in each process: a
     * client naming a new end user on every request would make a row a request. Its further pairs
     * that day are counted under model and end user `*`.
     */
    maxPairsPerKeyDay: z.number().int().min(1).max(1_000_000).default(10_000),
  })
  .prefault({});

/** A price per million tokens: a chargeback rate in the operator's currency, never negative. */
const perMillion = z.number().min(0).max(1_000_000);

/**
 * `prices`: what a million tokens of a model cost, per `<provider>/<model_name>` glob (the first
 * that matches, in the order written), in one currency: the operator's own table, versioned with
 * the config, never fetched.
 */
export const pricesSection = z
  .strictObject({
    currency: z.string().regex(/^[A-Z]{3}$/, 'must be a three-letter currency code such as USD or EUR').default('USD'),
    models: z
      .record(
        z.string().regex(/^[^\s]+$/, "must be a '<provider>/<model_name>' glob such as 'vllm/*'"),
        z.strictObject({ inputPerMillion: perMillion, outputPerMillion: perMillion, cachedInputPerMillion: perMillion.optional() }),
      )
      .default({}),
    /**
     * A model no glob names: served at no cost (`allow`), or refused 403 model_not_priced (`refuse`).
     * Unset: served at no cost, except to a key that has a budget (of its own or its account's).
     */
    unpricedModels: z.enum(['allow', 'refuse']).optional(),
  })
  .prefault({});

/**
 * Alerts at thresholds of quotas and budgets: one POST to `webhookUrl` (JSON; its `text` reads well in
 * Slack or Teams) per threshold per period of a key's or an account's limit, from one replica.
 */
export const alertsSection = z
  .strictObject({
    /** Where alerts are POSTed; absent: they are kept and shown in the console only. A secret: never logged. */
    webhookUrl: z.url({ protocol: /^https?$/, error: 'must be an http:// or https:// URL' }).optional(),
    /** Shares of a limit, ascending, each above 0 and at most 1. */
    thresholds: z
      .array(z.number().gt(0).max(1))
      .min(1)
      .max(10)
      .refine((list) => list.every((value, i) => i === 0 || value > list[i - 1]!), { message: 'must be ascending, each once' })
      .default([0.5, 0.8, 1]),
    /** An account's own webhook (its owners set it) may be at a loopback or private address: for gateways whose chat tools are inside. */
    allowPrivateAccountWebhooks: z.boolean().default(false),
    /** Each POST's deadline. */
    timeoutMs: z.number().int().min(100).max(60_000).default(5000),
    /** How often each replica looks for keys that expire within a week (a key.expiring alert each). */
    expiringCheckMs: z.number().int().min(1000).max(86_400_000).default(600_000),
  })
  .prefault({});
