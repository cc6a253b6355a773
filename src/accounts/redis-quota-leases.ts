/**
 * Leases: room in a quota counter that Redis holds for one replica, so that replicas admitting a
 * burst at once cannot together pass the limit, and a request far from it makes no round trip.
 *
 * A replica admits a request on its own while what it holds in a counter (its requests in flight, its
 * use not yet added to the counter) fits in its lease. When it does not, the request waits for one
 * script call (GROW) that takes what it needs, and a share of what is left, from the counter's room:
 * the limit less what is used and every live replica's lease, atomically, on all the request's
 * counters or none; when the room is too small the request is refused. What a replica adds to a
 * counter leaves its lease in the same call (ADD); a lease a replica no longer needs (no request for
 * two syncs) goes back (RELEASE), and so does all of it when the replica stops. A replica that
 * vanishes holds its lease until it has not read its counters for the lease window (then GROW drops
 * it), so a crash blocks room for a few seconds, not for the period.
 *
 * This replica's view of its leases never exceeds what Redis holds for it (it may be lower: a grow
 * whose answer was lost, the order of concurrent calls): it is read back from Redis at each sync when
 * no grow is under way. While Redis is away (or its epoch unknown) there are no leases: admission
 * falls back to the replica's own count (redis-quota.ts).
 */
import { EPOCH_KEY, REPLICAS_KEY, counterKey, leaseKey, ttlOf, type ScriptedRedis } from './redis-quota-scripts';
import type { LeaseAnswer, LeaseAsk } from './quota-scopes';

export class EpochLost extends Error {}

/** How long a grow refused while other replicas lease room waits before it asks again. */
const RETRY_AFTER_MS = 25;

export class Leases {
  private readonly leases = new Map<string, number>();
  private readonly releases = new Map<string, number>();
  private readonly asked = new Map<string, number>();
  /** Per counter, what was used or leased (by any replica) at the last read or grow. */
  private readonly taken = new Map<string, number>();
  /** Per counter, what the other replicas leased at the last read or grow. */
  private readonly others = new Map<string, number>();
  private inFlight = 0;
  private started = 0;

  constructor(
    private readonly redis: ScriptedRedis,
    private readonly replica: string,
    /** A lease counts while its replica read its counters within this window. */
    private readonly windowMs: number,
    /** How long a grow may take in all, its second ask included. */
    private readonly timeoutMs: number,
  ) {}

  /** This replica's lease of the scope as it knows it (0 when it has none). */
  of(scope: string): number {
    return this.leases.get(scope) ?? 0;
  }

  /** What grows under way ask for, per scope: a request arriving meanwhile asks only for what they do not. */
  asking(scope: string): number {
    return this.asked.get(scope) ?? 0;
  }

  /**
   * Grows the leases by these needs (one call, all or none). Refused while other replicas lease room
   * that would do, it asks once more shortly after: near a limit a replica gives back what it no
   * longer needs as each request ends (quota-leases.ts), and a grow that reaches Redis just before
   * that release would refuse room about to be free. Both calls end within the Redis timeout.
   */
  async grow(epoch: string, asks: readonly LeaseAsk[]): Promise<LeaseAnswer> {
    const sent = performance.now();
    const first = await this.growOnce(epoch, asks);
    const short = first.short === undefined ? undefined : asks[first.short];
    if (!short || !(this.othersOf(short.scope) > 0) || (first.rooms[first.short!] ?? 0) + this.othersOf(short.scope) < short.need) return first;
    const left = this.timeoutMs - (performance.now() - sent) - RETRY_AFTER_MS;
    if (left <= 0) return first;
    await new Promise((resolve) => setTimeout(resolve, RETRY_AFTER_MS));
    const again = this.growOnce(epoch, asks);
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<LeaseAnswer>((resolve) => (timer = setTimeout(() => resolve(first), left)));
    // Past the deadline the first answer stands; what the late call leased this replica's view then counts (never more than Redis holds).
    again.catch(() => undefined);
    return Promise.race([again, late]).finally(() => clearTimeout(timer));
  }

  private async growOnce(epoch: string, asks: readonly LeaseAsk[]): Promise<LeaseAnswer> {
    this.inFlight++;
    this.started++;
    for (const ask of asks) this.asked.set(ask.scope, this.asking(ask.scope) + ask.need);
    try {
      const args = asks.flatMap((ask) => [Math.floor(ask.limit), Math.ceil(ask.need), ttlOf(ask.scope)]);
      const [outcome, ...values] = await this.redis.chatgateQuotaGrow(2 + 2 * asks.length, EPOCH_KEY, REPLICAS_KEY, ...asks.map((ask) => counterKey(ask.scope)), ...asks.map((ask) => leaseKey(ask.scope)), epoch, this.replica, this.windowMs, ...args);
      if (outcome === 'reset') throw new EpochLost();
      if (outcome === 'missing') throw new Error('a quota counter is not in redis (lost, or not seeded yet)');
      if (outcome === 'short') {
        const [index, ...rest] = values.map(Number);
        const rooms = asks.map((_, i) => rest[2 * i]!);
        const used = asks.map((_, i) => rest[2 * i + 1]!);
        asks.forEach((ask, i) => {
          this.taken.set(ask.scope, Math.floor(ask.limit) - rooms[i]!);
          this.others.set(ask.scope, Math.floor(ask.limit) - rooms[i]! - used[i]! - this.of(ask.scope));
        });
        return { short: index, rooms, used };
      }
      asks.forEach((ask, i) => {
        this.leases.set(ask.scope, this.of(ask.scope) + Number(values[3 * i]));
        this.taken.set(ask.scope, Number(values[3 * i + 2]));
        this.others.set(ask.scope, Number(values[3 * i + 2]) - Number(values[3 * i + 1]) - this.of(ask.scope));
      });
      return { short: undefined, rooms: [], used: asks.map((_, i) => Number(values[3 * i + 1])) };
    } finally {
      this.inFlight--;
      for (const ask of asks) {
        const left = this.asking(ask.scope) - ask.need;
        if (left > 0) this.asked.set(ask.scope, left);
        else this.asked.delete(ask.scope);
      }
    }
  }

  /** Gives back so much of a lease: at once here, to Redis at the next sync. */
  release(scope: string, amount: number): void {
    if (!(amount > 0)) return;
    this.leases.set(scope, this.of(scope) - amount);
    this.releases.set(scope, (this.releases.get(scope) ?? 0) + amount);
  }

  /** Every lease given back (the replica stops). */
  releaseAll(): void {
    for (const [scope, lease] of this.leases) this.release(scope, lease);
  }

  /** What a sync added left the leases (ADD took it from them in Redis). */
  added(amounts: ReadonlyMap<string, number>): void {
    for (const [scope, amount] of amounts) if (this.leases.has(scope)) this.leases.set(scope, this.of(scope) - amount);
  }

  /** What the other replicas leased in the counter, as last seen: while Redis is away, counted as used (their requests in flight then, their use not added yet). */
  othersOf(scope: string): number {
    return Math.max(0, this.others.get(scope) ?? 0);
  }

  /** What the counter's replicas used or leased, as last seen (at most a sync old). */
  takenOf(scope: string): number | undefined {
    return this.taken.get(scope);
  }

  /** Sends what was given back (once: should it fail, the leases read back at the next sync still hold it, and it is given back again). */
  async sendReleases(epoch: string): Promise<void> {
    if (this.releases.size === 0) return;
    const scopes = [...this.releases.keys()];
    const amounts = scopes.map((scope) => Math.floor(this.releases.get(scope)!));
    this.releases.clear();
    this.inFlight++;
    this.started++;
    try {
      const [outcome] = await this.redis.chatgateQuotaRelease(1 + scopes.length, EPOCH_KEY, ...scopes.map(leaseKey), epoch, this.replica, ...amounts);
      if (outcome === 'reset') throw new EpochLost();
    } finally {
      this.inFlight--;
    }
  }

  /** A mark taken before reading the leases back: they are taken as read only when no grow was under way meanwhile. */
  mark(): number | undefined {
    return this.inFlight === 0 ? this.started : undefined;
  }

  /** The leases as Redis holds them, read at a sync (see mark). */
  readBack(mark: number | undefined, scopes: readonly string[], totals: ReadonlyMap<string, number>, values: readonly string[]): void {
    const read = new Set(scopes);
    // What is not read is of counters gone (a past period, long idle): forgotten.
    for (const map of [this.taken, this.others]) for (const scope of map.keys()) if (!read.has(scope)) map.delete(scope);
    for (const [scope, lease] of this.leases) if (!read.has(scope) && lease <= 0) this.leases.delete(scope);
    // Raised to what Redis holds only when no grow or release was under way (its answer could come
    // after and count twice); lowered always: a view at or under Redis's is the safe side.
    const raise = mark !== undefined && mark === this.started && this.inFlight === 0;
    scopes.forEach((scope, i) => {
      const mine = Number(values[i] ?? 0);
      const all = Number(values[scopes.length + i] ?? 0);
      this.taken.set(scope, (totals.get(scope) ?? 0) + all);
      this.others.set(scope, all - mine);
      const value = raise ? mine : Math.min(mine, this.of(scope));
      if (value !== 0) this.leases.set(scope, value);
      else this.leases.delete(scope);
    });
  }

  /** This replica has not been seen for too long: another's grow may have dropped its leases, so it counts on none (Redis may hold more: the safe side). */
  forgetLeases(): void {
    this.leases.clear();
  }

  /** Redis lost what it held, or is away: no leases until it is read again. */
  clear(): void {
    this.leases.clear();
    this.releases.clear();
    this.taken.clear();
    // What the others held is kept: it is part of what seeds Redis again (redis-quota.ts), until read anew.
  }
}
