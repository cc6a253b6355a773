/**
 * Quotas per UTC day and month, of a key and of its account, in tokens (or, with a Measure of money,
 * budgets in nano-units: one tracker each): once what is counted for the period reaches the limit,
 * requests with the account's keys get 429 insufficient_quota until the period turns. A stream in
 * flight is never cut: only admission is checked.
 *
 * Admission reserves what a request may cost (its prompt estimate plus the output it allows, see
 * enforce-quota.ts) on this replica's counters until its real use is charged: a request whose
 * reservation does not fit beside what is used and what the requests in flight here reserved is
 * refused, so no burst through one replica (or one process) overshoots. With Redis, reservations hold
 * across replicas too: each admits on its own within the room Redis leased it, and asks for more in
 * one atomic call when a request goes past it (quota-leases.ts, redis-quota-leases.ts). Without Redis
 * (the store alone) replicas see each other's use at the syncs, not each other's requests in flight.
 *
 * One count across all replicas: each replica adds what its answers used to shared counters (the key
 * store; with Redis configured, Redis over the key store, see redis-quota.ts) and reads the totals
 * back, both every `syncMs`; between two syncs it adds its own uncounted use to the last totals it
 * read. So a quota reached through one replica is enforced by every replica within about two syncs
 * (1 s by default), and the check on the request path is a few map lookups, no store round trip;
 * but a counter's first request on this replica (a replica that just started, a key back after a
 * quiet spell) waits for one read of its shared total, else a burst would pass against a count of 0.
 * Account quotas are read from the store on the same sync, for the accounts in use.
 *
 * Only what has a quota is counted (a key with one of its own, an account with one): no sync writes
 * or reads anything for a key with neither (counting every key cost 63 % of the gateway's CPU at
 * 100,000 keys in use, docs/performance.md). A use whose account's quota is not known yet (its first
 * use on this replica) is held until the next sync has read it, then counted or let go.
 *
 * A quota set when the period is under way starts from what was already used in it, which the quota
 * counters cannot tell (they hold nothing of the use while neither key nor account had a quota). The store's daily usage can: every replica writes every key's use to it
 * every `usageFlushMs` (auth.lastUsedFlushMs). So a counter counts the larger (never the sum) of two
 * figures that are each at most the real use: the shared counter plus this replica's use not yet in
 * it, and the daily usage last read (the day's or the month's; the key's or its account's) plus this
 * replica's use since that read. It is read for a new counter at the next sync, one read per account
 * for all its counters (a few accounts a sync), and then:
 * - while it is above the shared counter (a quota set midway), again every `usageFlushMs`, to the
 *   end of the period: the count is then up to `usageFlushMs` of the replicas' use behind;
 * - else once more after `settleMs` (every replica knows the quota by then and has written what it
 *   used before), and no more: use from before the quota that is smaller than what all replicas use
 *   in `usageFlushMs` can so go uncounted.
 */
import type { CallerKey } from '../context';
import { FULL_SHARE, tellCrossings } from './quota-crossings';
import { askShared, giveBack, releaseIdle } from './quota-leases';
import { readFloors } from './quota-floors';
import { charged, limitOf, periodKind, periodOf, scopeName, secondsToNext, TOKENS, usedOf, type Counter, type Measure, type Period, type QuotaCounters, type QuotaEvents, type QuotaOptions, type QuotaRefusal, type QuotaReservation, type ScopeKind, type AccountLimits } from './quota-scopes';

export { scopeName, secondsToNext, TOKENS, type Measure, type Period, type QuotaCounters, type QuotaEvents, type QuotaOptions, type QuotaRefusal, type QuotaReservation, type AccountLimits } from './quota-scopes';

/** A counter not used for this many syncs is no longer read back. */
const IDLE_SYNCS = 120;
const LEARN_RETRY_MS = 5_000;
const PERIODS = ['day', 'month'] as const;

export class QuotaTracker {
  private readonly counters = new Map<string, Counter>();
  /** An account's quota as last read; null: it has none. Not here: not read yet. */
  private readonly accountQuotas = new Map<string, AccountLimits | null>();
  private readonly activeAccounts = new Map<string, number>();
  /** Use of accounts whose quota is not known yet: account -> day -> tokens. */
  private readonly held = new Map<string, Map<string, number>>();
  private readonly learning = new Map<string, Promise<void>>();
  /** Accounts whose quota a request could not read, and when: their requests do not wait for another read for LEARN_RETRY_MS. */
  private readonly unread = new Map<string, number>();
  /** Keys that have (or lately had) counters: a key seen without its quota has them dropped. */
  private keysCounted = new Set<string>();
  private readonly usageFlushMs: number;
  private readonly settleMs: number;
  private readonly measure: Measure;
  private thresholds: readonly number[];
  private readonly primeTimeoutMs: number;
  private syncs = 0;
  private timer: NodeJS.Timeout | undefined;
  private syncing: Promise<void> | undefined;

  constructor(
    private readonly shared: QuotaCounters,
    private readonly events: QuotaEvents,
    private readonly now: () => Date = () => new Date(),
    options: QuotaOptions = {},
  ) {
    this.usageFlushMs = options.usageFlushMs ?? 10_000;
    this.settleMs = options.settleMs ?? 3 * this.usageFlushMs;
    this.measure = options.measure ?? TOKENS;
    this.thresholds = options.thresholds ?? [];
    this.primeTimeoutMs = options.primeTimeoutMs ?? 1000;
  }

  private scope(scope: ScopeKind, id: string, period: Period, at: Date): string {
    return this.measure.prefix + scopeName(scope, id, period, at);
  }

  /** A reload's alert thresholds: every counter is told its crossings again (the store keeps each alert to one). */
  setThresholds(thresholds: readonly number[]): void {
    if (thresholds.length === this.thresholds.length && thresholds.every((value, i) => value === this.thresholds[i])) return;
    this.thresholds = thresholds;
    for (const counter of this.counters.values()) counter.alerted = -1;
  }

  start(syncMs: number): void {
    this.timer = setInterval(() => void this.sync(), syncMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.sync();
    await this.shared.close?.();
  }

  /**
   * Whether a request with this key (and end user's digest, when it names one) is over a quota now
   * (no I/O); `unread` when it is not over as far as this replica knows, and a counter it needs has
   * not read its shared total yet (see prime).
   */
  check(key: CallerKey, endUser?: string): QuotaRefusal | 'unread' | undefined {
    const at = this.now();
    this.activeAccounts.set(key.accountId, this.syncs);
    if (this.keysCounted.has(key.id)) {
      // Its quota is gone: a new one starts from the daily usage.
      for (const period of PERIODS) if (limitOf(this.measure.keyLimits(key), period) === null) this.counters.delete(this.scope('key', key.id, period, at));
    }
    let unread = false;
    for (const { counter, kind, period, limit } of this.countersOf(key, endUser, at)) {
      if (this.used(counter) + counter.reserved >= limit) return { scope: kind, period, retryAfterSeconds: secondsToNext(period, at) };
      unread ||= !counter.read;
    }
    return unread ? 'unread' : undefined;
  }

  /**
   * The counters a request counts on, each with its limit, made as needed: the key's and its
   * account's for the day and month where each has one, and the end user's day where the account
   * limits its end users. An account whose limits are not read yet has none here.
   */
  private *countersOf(key: CallerKey, endUser: string | undefined, at: Date): Generator<{ counter: Counter; scope: string; kind: ScopeKind; period: Period; limit: number }> {
    const counted = (kind: ScopeKind, id: string, period: Period, limit: number) => {
      const scope = this.scope(kind, id, period, at);
      const counter = this.counter(scope, key.accountId, kind === 'key' ? key.id : undefined, kind === 'endUser');
      counter.limit = limit;
      return { counter, scope, kind, period, limit };
    };
    for (const period of PERIODS) {
      const limit = limitOf(this.measure.keyLimits(key), period);
      if (limit !== null) yield counted('key', key.id, period, limit);
    }
    const account = this.accountQuotas.get(key.accountId);
    if (!account) return;
    for (const period of PERIODS) {
      const limit = limitOf(account, period);
      if (limit !== null) yield counted('account', key.accountId, period, limit);
    }
    const perEndUser = account.endUserPerDay;
    if (endUser !== undefined && perEndUser !== null && perEndUser !== undefined) yield counted('endUser', `${key.accountId}:${endUser}`, 'day', perEndUser);
  }

  /**
   * Waits (at most `primeTimeoutMs`) for a sync to read the shared totals of the key's (and its
   * account's) counters that have not read one yet. Through the sync, which is serialized and reads
   * every counter in one call: a sync already under way may have listed its counters before these
   * were made, so at most two. Whatever is still unread then (the store or Redis slow or away) counts
   * on from what this replica knows, and requests no longer wait for it; the next sync reads it.
   */
  async prime(key: CallerKey, endUser?: string): Promise<void> {
    const until = Date.now() + this.primeTimeoutMs;
    for (let i = 0; i < 2 && this.unreadOf(key, endUser).length > 0; i++) {
      const left = until - Date.now();
      if (left <= 0) break;
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([this.sync(), new Promise<void>((resolve) => (timer = setTimeout(resolve, left)))]);
      clearTimeout(timer);
    }
    for (const counter of this.unreadOf(key, endUser)) counter.read = true;
  }

  private unreadOf(key: CallerKey, endUser: string | undefined): Counter[] {
    return [...this.countersOf(key, endUser, this.now())].map(({ counter }) => counter).filter((counter) => !counter.read);
  }

  /** Whether the account (as last read) limits each end user: only then has a request's end user a counter. */
  limitsEndUsers(accountId: string): boolean {
    const account = this.accountQuotas.get(accountId);
    return !!account && (account.endUserPerDay ?? null) !== null;
  }

  /** Whether the key, its account (as last read) or the end user has a limit: what reserve() needs to be asked. */
  limits(key: CallerKey, endUser?: string): boolean {
    const own = this.measure.keyLimits(key);
    const account = this.accountQuotas.get(key.accountId);
    return own.tokensPerDay !== null || own.tokensPerMonth !== null || (!!account && (account.tokensPerDay !== null || account.tokensPerMonth !== null || (endUser !== undefined && (account.endUserPerDay ?? null) !== null)));
  }

  /**
   * Reserves `tokens` on every counter of the key's and its account's quotas (no I/O): a refusal when
   * they do not fit beside what is used and reserved (with the least room left, what a capped request
   * may still take); undefined when nothing has a quota (nothing to release). An account whose quota
   * is not read yet reserves nothing for it (as check() lets it by).
   */
  reserve(key: CallerKey, tokens: number, endUser?: string): QuotaReservation | (QuotaRefusal & { room: number }) | undefined {
    if (!this.limits(key, endUser)) return undefined;
    const at = this.now();
    const counters: Array<{ counter: Counter; scope: string; kind: ScopeKind; period: Period }> = [];
    let refusal: QuotaRefusal | undefined;
    let room = Infinity;
    for (const { counter, scope, kind, period, limit } of this.countersOf(key, endUser, at)) {
      // No leases now (Redis away): what the other replicas held for their requests when last seen is used as far as this replica knows.
      const away = this.shared.leases && this.shared.leases.room(scope) === undefined ? this.shared.leases.others(scope) : 0;
      const left = limit - this.used(counter) - counter.reserved - away;
      room = Math.min(room, left);
      if (tokens > left) {
        refusal ??= { scope: kind, period, retryAfterSeconds: secondsToNext(period, at) };
        if (limit - this.used(counter) < FULL_SHARE * limit) counter.full = true; // for its alert at the limit
      }
      counters.push({ counter, scope, kind, period });
    }
    if (refusal) return { ...refusal, room: Math.max(0, room) };
    if (counters.length === 0) return undefined;
    for (const { counter } of counters) [counter.reserved, counter.reservedSync] = [counter.reserved + tokens, this.syncs];
    let held = true;
    const shared = this.shared.leases;
    return {
      release: () => {
        if (held) for (const { counter } of counters) counter.reserved -= tokens;
        held = false;
        // Also when called again: room a grow won after the client left goes back too.
        if (shared) giveBack(shared, counters);
      },
      shared: askShared(this.shared.leases, counters, tokens, room, at, (err) => this.events.syncFailed?.(err)),
    };
  }


  /** An answer used these tokens: counted, this day and month, for the key, its account and its end user where they have a limit. */
  charge(key: CallerKey, tokens: number, endUser?: string): void {
    if (!(tokens > 0)) return;
    const at = this.now();
    for (const { counter } of this.countersOf(key, endUser, at)) charged(counter, tokens);
    if (this.accountQuotas.get(key.accountId) !== undefined) return;
    // Its account's limits not read yet: held until the next sync says whether it has a quota.
    this.activeAccounts.set(key.accountId, this.syncs);
    const day = at.toISOString().slice(0, 10);
    let held = this.held.get(key.accountId);
    if (!held) {
      held = new Map();
      this.held.set(key.accountId, held);
    }
    held.set(day, (held.get(day) ?? 0) + tokens);
  }

  /** Reads the account quotas in use, adds what was used here to the shared counters, then reads back their totals. */
  sync(): Promise<void> {
    this.syncing ??= this.syncOnce().finally(() => (this.syncing = undefined));
    return this.syncing;
  }

  private async syncOnce(): Promise<void> {
    this.syncs++;
    await this.readAccountQuotas();
    if (this.shared.leases) releaseIdle(this.shared.leases, this.counters, this.syncs);
    const amounts = new Map<string, number>();
    for (const [scope, counter] of this.counters) {
      if (counter.pending === 0) continue;
      counter.sending = counter.pending;
      counter.pending = 0;
      amounts.set(scope, counter.sending);
    }
    try {
      await this.shared.add(amounts);
      // Added: the totals read next include it.
      const scopes = [...this.counters].filter(([, counter]) => !counter.dormant).map(([scope]) => scope);
      const totals = scopes.length > 0 ? await this.shared.totals(scopes) : new Map<string, number>();
      for (const [scope, total] of totals) {
        const counter = this.counters.get(scope);
        if (!counter) continue;
        counter.synced = total;
        counter.sending = 0;
        counter.read = true;
      }
      this.forgetIdle();
    } catch (err) {
      // Not added (or not known to be): kept for the next sync, still counted here meanwhile.
      for (const [scope, tokens] of amounts) {
        const counter = this.counters.get(scope);
        if (counter && counter.sending === tokens) {
          counter.pending += tokens;
          counter.sending = 0;
        }
      }
      this.events.syncFailed?.(err);
      return;
    }
    await readFloors(this.counters, this.events, this.now(), { usageFlushMs: this.usageFlushMs, settleMs: this.settleMs, measure: this.measure });
    if (this.events.crossed) tellCrossings(this.counters, this.thresholds, (counter) => this.used(counter), this.events.crossed, this.now());
  }

  /** Whether the account's quota is known here, or could not be read a moment ago (its use is then held: see learn). */
  knowsAccount(accountId: string): boolean {
    return this.accountQuotas.has(accountId) || this.now().getTime() - (this.unread.get(accountId) ?? -Infinity) < LEARN_RETRY_MS;
  }

  /** The account's quota, read now (once for the requests that wait for it): its first request here need not wait for a sync. */
  learn(accountId: string): Promise<void> {
    let reading = this.learning.get(accountId);
    if (reading) return reading;
    reading = this.readAccountQuotas([accountId]).finally(() => {
      this.learning.delete(accountId);
      if (this.accountQuotas.has(accountId)) this.unread.delete(accountId);
      else this.unread.set(accountId, this.now().getTime());
    });
    this.learning.set(accountId, reading);
    return reading;
  }

  /** The quotas of the accounts in use; then held use is counted or let go, and counters of quotas gone are dropped. */
  private async readAccountQuotas(accounts = [...this.activeAccounts.keys()]): Promise<void> {
    if (accounts.length === 0) return;
    try {
      const quotas = await this.events.accountQuota(accounts);
      for (const id of accounts) {
        const quota = quotas.get(id);
        this.accountQuotas.set(id, quota && (quota.tokensPerDay !== null || quota.tokensPerMonth !== null || (quota.endUserPerDay ?? null) !== null) ? quota : null);
      }
    } catch (err) {
      this.events.syncFailed?.(err); // the quotas last read hold meanwhile
      return;
    }
    for (const [id, held] of this.held) {
      const quota = this.accountQuotas.get(id);
      if (quota === undefined) continue;
      this.held.delete(id);
      if (!quota) continue;
      for (const [day, tokens] of held) {
        const at = new Date(`${day}T00:00:00Z`);
        // Used before any read of the daily usage for these counters: added to the counter, not to `sinceFloor`.
        for (const period of PERIODS) if (limitOf(quota, period) !== null) this.counter(this.scope('account', id, period, at), id, undefined).pending += tokens;
      }
    }
    for (const [scope, counter] of this.counters) {
      if (counter.keyId !== undefined) continue;
      const quota = this.accountQuotas.get(counter.accountId);
      const limit = quota && (counter.endUser ? (quota.endUserPerDay ?? null) : limitOf(quota, periodKind(scope)));
      if (quota === null || limit === null) this.counters.delete(scope);
    }
  }


  private used(counter: Counter): number {
    return usedOf(counter);
  }

  private counter(scope: string, accountId: string, keyId: string | undefined, endUser = false): Counter {
    let counter = this.counters.get(scope);
    if (!counter) {
      const born = this.now().getTime();
      const floorDue = this.events.usage && !endUser ? born : undefined; // the daily usage knows no end user
      counter = { synced: 0, pending: 0, sending: 0, reserved: 0, read: false, alerted: -1, dormant: false, touched: this.syncs, accountId, keyId, born, floor: 0, sinceFloor: 0, floorDue, ...(endUser ? { endUser: true as const } : {}) };
      this.counters.set(scope, counter);
      if (keyId !== undefined) this.keysCounted.add(keyId);
    }
    counter.touched = this.syncs;
    if (counter.dormant) counter.read = false; // its total was not read while it slept
    counter.dormant = false;
    return counter;
  }

  /** Counters of past periods, or long unused, are dropped (with nothing left to add). */
  private forgetIdle(): void {
    const at = this.now();
    const today = at.toISOString().slice(0, 10);
    const month = today.slice(0, 7);
    const keys = new Set<string>();
    for (const [scope, counter] of this.counters) {
      const period = periodOf(scope);
      const current = period === today || period === month;
      const idle = counter.pending === 0 && counter.sending === 0 && counter.reserved === 0;
      if (idle && !current) {
        this.counters.delete(scope);
        continue;
      }
      if (idle && this.syncs - counter.touched > IDLE_SYNCS) counter.dormant = true;
      if (counter.keyId !== undefined) keys.add(counter.keyId);
    }
    this.keysCounted = keys;
    // An account not used for a while is no longer read each sync; its quota as last read holds meanwhile.
    for (const [account, seen] of this.activeAccounts) {
      if (this.syncs - seen <= IDLE_SYNCS) continue;
      this.activeAccounts.delete(account);
      this.held.delete(account);
    }
  }
}
