/**
 * Quota counters in Redis (the hot counters every replica shares) over the key store (the truth per
 * period). Each replica adds what its answers used to both: to Redis every sync (one script call,
 * idempotent), to the store every `storeFlushMs` (auth.lastUsedFlushMs), so the store is at most that
 * far behind.
 *
 * Redis coming back empty (a restart without persistence, a flush, an eviction) is noticed by an
 * epoch: a random value every replica remembers and every script checks. It is gone or changed when
 * Redis lost what it held; a counter Redis does not have while the store has a count for it changes
 * it too. Each replica then writes its own unwritten use to the store, reads the store's totals of its
 * counters and merges them into Redis by maximum (atomic, so replicas seeding at once do not add up),
 * and drops what it still owed Redis (the store's totals hold it). What other replicas had not yet
 * written to the store can be missed: at most `storeFlushMs` of their use, a sync's worth when they
 * had noticed Redis away (see below).
 *
 * Redis away (not answering its pings, or a call failing): the replica writes its use to the store
 * every sync instead, and reads the store's totals back, so every replica keeps seeing the others'
 * use, about a sync late. A counter then counts the larger of (the last total Redis gave plus this
 * replica's use since) and (the store's total plus what this replica has not written yet). When the
 * store is away too, this replica's use since Redis went away counts once for every replica seen in
 * the last minute: each replica lets itself spend only its share of what was left. When Redis answers
 * again with its counters, each replica adds what it used meanwhile as the batch it had tried (a
 * marker makes a batch count once, so one a frozen Redis ran late is not counted twice).
 */
import { randomBytes } from 'node:crypto';
import Redis from 'ioredis';
import type { QuotaCounters } from './quota';
import type { LeaseAnswer, LeaseAsk, SharedLeases } from './quota-scopes';
import { EpochLost, Leases } from './redis-quota-leases';
import { BATCH_MARKER_MS, EPOCH_KEY, REPLICAS_KEY, REPLICA_WINDOW_MS, batchKey, counterKey, defineScripts, leaseKey, ttlOf, type ScriptedRedis } from './redis-quota-scripts';

/** The store's quota counters (the truth). */
export interface QuotaTruth {
  addQuotaUsage(amounts: ReadonlyMap<string, number>): Promise<void>;
  quotaUsage(scopes: readonly string[]): Promise<Map<string, number>>;
}

export interface RedisQuotaOptions {
  url: string;
  /** Each Redis call gives up after this long. */
  timeoutMs: number;
  /** Use is written to the store at least this often (every sync while Redis is away). */
  storeFlushMs: number;
  /** Whether Redis answers (the rate limit store's pings): while false, Redis is not asked. */
  redisUp: () => boolean;
  events?: {
    /** Redis or the store did not take a sync; what they did not take is kept and counted here meanwhile. */
    failed?(err: unknown): void;
    /** Redis had lost its quota counters: these many were seeded from the store. */
    reseeded?(counters: number): void;
  };
  now?: () => number;
  /** A replica's leases count while it read its counters within this long (5 s by default): a vanished replica's room comes back after it. */
  leaseWindowMs?: number;
  /** This process's name among the replicas (random when absent): its token and budget counters share one, so a process counts once. */
  replica?: string;
}

export class RedisQuotaCounters implements QuotaCounters {
  private readonly redis: ScriptedRedis;
  private readonly replica: string;
  private readonly now: () => number;
  /** The epoch of Redis this replica counted in; undefined: not known yet, or lost. */
  private epoch: string | undefined;
  /** Seed every counter of this replica before adding to it (the epoch was just adopted). */
  private reseed = false;
  /** Used here, not yet written to the store. */
  private storePending = new Map<string, number>();
  /** Used here, not yet in Redis, nor in the batch under way. */
  private redisOwed = new Map<string, number>();
  /** Sent to Redis, not known to be applied: sent again as it is (its marker makes it count once). */
  private batch: { id: string; amounts: Map<string, number> } | undefined;
  /** Redis's totals at the last read. */
  private lastRedis = new Map<string, number>();
  /** Replicas that read their counters in the last minute (this one included). */
  private replicas = 1;
  private lastStoreFlush: number;
  /** When (performance.now) the last read or grow that Redis answered was sent: leases count only shortly after one. */
  private lastSeen = -Infinity;
  private readonly leaseWindowMs: number;
  private readonly held: Leases;

  constructor(
    private readonly store: QuotaTruth,
    private readonly options: RedisQuotaOptions,
  ) {
    this.now = options.now ?? Date.now;
    this.replica = options.replica ?? randomBytes(9).toString('base64url');
    this.lastStoreFlush = this.now();
    const redis = new Redis(options.url, {
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      commandTimeout: options.timeoutMs,
      connectTimeout: Math.max(options.timeoutMs, 1000),
      retryStrategy: (attempt) => Math.min(attempt * 100, 2000),
    });
    redis.on('error', () => undefined); // surfaced by the failing commands
    this.redis = defineScripts(redis);
    this.leaseWindowMs = options.leaseWindowMs ?? 5000;
    this.held = new Leases(this.redis, this.replica, this.leaseWindowMs, options.timeoutMs);
  }

  /** Room held in Redis for this replica's requests (redis-quota-leases.ts). */
  readonly leases: SharedLeases = {
    room: (scope) => {
      // No leases while Redis is away, its epoch is not known, or its counters are not seeded yet.
      if (this.epoch === undefined || this.reseed || !this.options.redisUp()) return undefined;
      // Not seen by Redis for half the lease window (a sync held up by the store, say): another
      // replica's grow may have dropped this one's leases, so it counts on none until it asks.
      if (performance.now() - this.lastSeen > this.leaseWindowMs / 2) this.held.forgetLeases();
      return this.held.of(scope) - (this.batch?.amounts.get(scope) ?? 0) - (this.redisOwed.get(scope) ?? 0);
    },
    asking: (scope) => this.held.asking(scope),
    grow: (asks: readonly LeaseAsk[]): Promise<LeaseAnswer> => {
      const epoch = this.epoch;
      if (epoch === undefined) return Promise.reject(new Error('redis epoch not known'));
      const sent = performance.now();
      return this.held.grow(epoch, asks).then(
        (answer) => {
          this.lastSeen = Math.max(this.lastSeen, sent);
          // Redis's totals, fresher than the last read: what this replica counts from should Redis go away.
          asks.forEach((ask, i) => {
            this.lastRedis.set(ask.scope, Math.max(this.lastRedis.get(ask.scope) ?? 0, answer.used[i] ?? 0));
          });
          return answer;
        },
        (err: unknown) => {
          if (err instanceof EpochLost) this.lost();
          throw err;
        },
      );
    },
    release: (scope, amount, now) => {
      this.held.release(scope, amount);
      if (now && this.epoch !== undefined && this.options.redisUp()) {
        void this.held.sendReleases(this.epoch).catch((err: unknown) => {
          if (err instanceof EpochLost) this.lost();
          this.options.events?.failed?.(err);
        });
      }
    },
    taken: (scope) => this.held.takenOf(scope),
    others: (scope) => this.held.othersOf(scope),
  };

  /** Resolves once connected, or after `ms`: counters work (through the store) before that too. */
  connected(ms = 2000): Promise<void> {
    if (this.redis.status === 'ready') return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.redis.off('ready', done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.redis.once('ready', done);
    });
  }

  /** Taken here (never fails): kept until Redis and the store have it, counted in the totals meanwhile. */
  async add(amounts: ReadonlyMap<string, number>): Promise<void> {
    for (const [scope, tokens] of amounts) {
      bump(this.storePending, scope, tokens);
      bump(this.redisOwed, scope, tokens);
    }
  }

  /** Never fails: Redis's totals when it answers, else the estimate above. */
  async totals(scopes: readonly string[]): Promise<Map<string, number>> {
    let fromRedis: Map<string, number> | undefined;
    if (this.options.redisUp()) {
      try {
        fromRedis = await this.syncRedis(scopes);
      } catch (err) {
        this.options.events?.failed?.(err);
      }
    } else {
      this.options.events?.failed?.(new Error('redis does not answer'));
    }
    if (!fromRedis || this.now() - this.lastStoreFlush >= this.options.storeFlushMs) {
      await this.flushStore().catch((err: unknown) => this.options.events?.failed?.(err));
    }
    return fromRedis ?? (await this.estimate(scopes));
  }

  async close(): Promise<void> {
    await this.flushStore().catch((err: unknown) => this.options.events?.failed?.(err));
    // The room this replica held goes back to the others now, not after the lease window.
    if (this.epoch !== undefined && this.options.redisUp()) {
      this.held.releaseAll();
      await this.held.sendReleases(this.epoch).catch((err: unknown) => this.options.events?.failed?.(err));
    }
    this.redis.disconnect();
  }

  /** Redis lost what it held: the epoch is adopted (or made) again and every counter of this replica seeded, once. */
  private lost(): void {
    this.epoch = undefined;
    this.reseed = true;
    this.held.clear();
  }

  private async syncRedis(scopes: readonly string[]): Promise<Map<string, number>> {
    for (let round = 0; ; round++) {
      try {
        if (this.epoch === undefined) {
          const [created, epoch] = await this.redis.chatgateQuotaAdopt(1, EPOCH_KEY, randomBytes(12).toString('base64url'));
          this.epoch = epoch;
          if (created === '1') this.reseed = true; // an empty Redis (or the first start ever)
        }
        if (this.reseed) {
          const mine = new Set([...scopes, ...this.lastRedis.keys(), ...this.storePending.keys(), ...this.redisOwed.keys(), ...(this.batch?.amounts.keys() ?? [])]);
          await this.seed([...mine]);
          this.reseed = false;
          if (round > 0) this.options.events?.reseeded?.(mine.size);
        }
        await this.push();
        await this.held.sendReleases(this.epoch!);
        return await this.read(scopes);
      } catch (err) {
        if (!(err instanceof EpochLost)) throw err;
        this.lost();
        if (round > 0) throw err;
      }
    }
  }

  /** The batch under way (or a new one of what is owed), added once. */
  private async push(): Promise<void> {
    if (!this.batch) {
      if (this.redisOwed.size === 0) return;
      this.batch = { id: randomBytes(12).toString('base64url'), amounts: this.redisOwed };
      this.redisOwed = new Map();
    }
    const batch = this.batch;
    const scopes = [...batch.amounts.keys()];
    const fresh = new Set<string>();
    for (let attempt = 0; attempt < 2; attempt++) {
      const args = scopes.flatMap((scope) => [batch.amounts.get(scope)!, ttlOf(scope), fresh.has(scope) ? 1 : 0]);
      const [outcome, ...missing] = await this.redis.chatgateQuotaAdd(2 * scopes.length + 2, EPOCH_KEY, batchKey(batch.id), ...scopes.map(counterKey), ...scopes.map(leaseKey), this.epoch!, BATCH_MARKER_MS, this.replica, ...args);
      if (outcome === 'reset') throw new EpochLost();
      if (outcome === 'ok' || outcome === 'dup') {
        // A 'dup' was applied by an earlier try whose answer was lost: its leases were lowered then.
        this.held.added(batch.amounts);
        this.batch = undefined;
        return;
      }
      // Counters Redis does not have: new ones (the store has none of them either) are created by
      // this batch; one the store knows means Redis lost what it held.
      for (const scope of await this.mustBeNew(missing.map((index) => scopes[Number(index)]!))) fresh.add(scope);
    }
    throw new Error('quota counters disappeared from redis while being added to');
  }

  private async read(scopes: readonly string[]): Promise<Map<string, number>> {
    const mark = this.held.mark();
    const sent = performance.now();
    const [outcome, replicas, ...values] = await this.redis.chatgateQuotaRead(2 * scopes.length + 2, EPOCH_KEY, REPLICAS_KEY, ...scopes.map(counterKey), ...scopes.map(leaseKey), this.epoch!, this.replica, REPLICA_WINDOW_MS, this.leaseWindowMs);
    if (outcome === 'reset') throw new EpochLost();
    this.replicas = Math.max(1, Number(replicas));
    const totals = new Map<string, number>();
    const missing: string[] = [];
    scopes.forEach((scope, i) => {
      if (values[i] === '' || values[i] === undefined) missing.push(scope);
      else totals.set(scope, Number(values[i]));
    });
    if (missing.length > 0) {
      // Never counted anywhere: created at 0, so that the store is asked once, not every sync.
      await this.mustBeNew(missing);
      const created = await this.redis.chatgateQuotaSeed(missing.length, ...missing.map(counterKey), ...missing.flatMap((scope) => [0, ttlOf(scope)]));
      missing.forEach((scope, i) => {
        totals.set(scope, Number(created[i]));
      });
    }
    this.held.readBack(mark, scopes, totals, values.slice(scopes.length));
    this.lastSeen = Math.max(this.lastSeen, sent);
    this.lastRedis = totals;
    return totals;
  }

  /** Counters Redis does not have must be new: when the store has any of them, Redis lost what it held (a new epoch for every replica). */
  private async mustBeNew(scopes: readonly string[]): Promise<readonly string[]> {
    const stored = await this.store.quotaUsage(scopes);
    if (scopes.some((scope) => (stored.get(scope) ?? 0) > 0)) {
      await this.redis.set(EPOCH_KEY, randomBytes(12).toString('base64url'));
      throw new EpochLost();
    }
    return scopes;
  }

  /**
   * Each counter becomes at least the larger of two counts that are both at most the real one: the
   * store's total plus what this replica has not written there (it writes first, so usually nothing),
   * and the last total Redis gave plus what this replica used since. Either holds all of this
   * replica's use, which then owes Redis nothing; the second holds the others' use up to the last read
   * even when they had not written it to the store yet. What they leased when last seen (their
   * requests then in flight, their use not added yet) is held as a lease for one lease window.
   */
  private async seed(scopes: readonly string[]): Promise<void> {
    if (scopes.length === 0) return;
    await this.flushStore().catch(() => undefined); // what is not written is added to the value below
    const stored = await this.store.quotaUsage(scopes);
    const args = scopes.flatMap((scope) => [Math.max((stored.get(scope) ?? 0) + (this.storePending.get(scope) ?? 0), this.knownTotal(scope)), ttlOf(scope)]);
    const merged = await this.redis.chatgateQuotaSeed(scopes.length, ...scopes.map(counterKey), ...args);
    // What the other replicas leased when last seen (their requests then in flight, their use not
    // added yet) is held for one lease window, under a placeholder: by then their use is added.
    const held = scopes.filter((scope) => this.held.othersOf(scope) > 0);
    if (held.length > 0) await this.redis.chatgateQuotaHold(1 + held.length, REPLICAS_KEY, ...held.map(leaseKey), `reseeded:${this.replica}`, ...held.map((scope) => Math.ceil(this.held.othersOf(scope))));
    scopes.forEach((scope, i) => {
      this.lastRedis.set(scope, Number(merged[i]));
      this.redisOwed.delete(scope);
      this.batch?.amounts.delete(scope);
    });
    if (this.batch?.amounts.size === 0) this.batch = undefined;
  }

  private async flushStore(): Promise<void> {
    if (this.storePending.size === 0) {
      this.lastStoreFlush = this.now();
      return;
    }
    const sending = this.storePending;
    this.storePending = new Map();
    try {
      await this.store.addQuotaUsage(sending);
      this.lastStoreFlush = this.now();
    } catch (err) {
      for (const [scope, tokens] of sending) bump(this.storePending, scope, tokens);
      throw err;
    }
  }

  /** The last total Redis gave plus what this replica used since (not in Redis yet): at most the real count. */
  private knownTotal(scope: string): number {
    return (this.lastRedis.get(scope) ?? 0) + (this.batch?.amounts.get(scope) ?? 0) + (this.redisOwed.get(scope) ?? 0);
  }

  /** Redis away: the store's totals (written every sync meanwhile), or this replica's share when the store is away too. */
  private async estimate(scopes: readonly string[]): Promise<Map<string, number>> {
    const stored = await this.store.quotaUsage(scopes).catch((err: unknown) => {
      this.options.events?.failed?.(err);
      return undefined;
    });
    const totals = new Map<string, number>();
    for (const scope of scopes) {
      const mine = (this.batch?.amounts.get(scope) ?? 0) + (this.redisOwed.get(scope) ?? 0);
      const last = this.lastRedis.get(scope) ?? 0;
      totals.set(scope, stored ? Math.max(this.knownTotal(scope), (stored.get(scope) ?? 0) + (this.storePending.get(scope) ?? 0)) : last + this.replicas * mine);
    }
    return totals;
  }
}

function bump(map: Map<string, number>, scope: string, tokens: number): void {
  map.set(scope, (map.get(scope) ?? 0) + tokens);
}
