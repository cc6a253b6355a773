/**
 * The quota tracker's side of leases (the room Redis holds for this replica, redis-quota-leases.ts):
 * a reservation past them asks for more, a lease not needed goes back. Pure over the tracker's
 * counters; the tracker (quota.ts) calls these.
 */
import { secondsToNext, usedOf, type Counter, type LeaseAsk, type Period, type QuotaReservation, type ScopeKind, type SharedLeases } from './quota-scopes';

export interface Reserved {
  counter: Counter;
  scope: string;
  kind: ScopeKind;
  period: Period;
}

/**
 * A reservation (already counted here) past this replica's leases asks the shared counters for room:
 * one round trip, all its counters or none. Refused when they have too little; else it holds. Without
 * leases (no Redis, or Redis away) it holds on this replica's count alone (undefined: nothing asked).
 */
export function askShared(leases: SharedLeases | undefined, counters: readonly Reserved[], tokens: number, room: number, at: Date, failed: (err: unknown) => void): QuotaReservation['shared'] {
  if (!leases) return undefined;
  const asks: Array<LeaseAsk & { left: number }> = [];
  const short: Reserved[] = [];
  for (const entry of counters) {
    const { counter, scope } = entry;
    const lease = leases.room(scope);
    if (lease === undefined) return undefined;
    const holds = counter.pending + counter.sending + counter.reserved;
    if (holds <= lease) continue;
    // What this replica counts beyond the shared counter (the daily usage of a quota set midway) is not room either.
    const beyond = usedOf(counter) - (counter.synced + counter.pending + counter.sending);
    // Grows under way ask for the requests before this one: it asks for the rest, and at least for
    // its own part that no lease holds (should theirs be refused, it still holds what it takes).
    const need = Math.max(holds - lease - leases.asking(scope), Math.min(tokens, holds - lease));
    asks.push({ scope, limit: counter.limit! - beyond, need, left: lease - (holds - tokens) });
    short.push(entry);
  }
  if (asks.length === 0) return undefined;
  return leases.grow(asks.map(({ scope, limit, need }) => ({ scope, limit, need }))).then(
    (outcome) => {
      // What the shared counters hold is news to this replica's count too: near a limit a replica asks
      // at almost every request, so its count is then as fresh as its last request's (should Redis go
      // away, it counts on from there, not from its last sync).
      short.forEach(({ counter }, i) => {
        counter.synced = Math.max(counter.synced, outcome.used[i] ?? 0);
      });
      if (outcome.short === undefined) return undefined;
      const { kind, period } = short[outcome.short]!;
      // What a capped request could still take: on each asked counter its room and what its lease left it.
      const shared = Math.min(...asks.map((ask, i) => (outcome.rooms[i] ?? 0) + ask.left));
      return { scope: kind, period, retryAfterSeconds: secondsToNext(period, at), room: Math.max(0, Math.min(room, shared)) };
    },
    (err: unknown) => {
      // Not asked (Redis away, or it lost what it held): on this replica's count, where what the
      // other replicas held when last seen counts as used, as for a request admitted while away.
      failed(err);
      const over = short.find(({ counter, scope }) => usedOf(counter) + counter.reserved + leases.others(scope) > counter.limit!);
      return over && { scope: over.kind, period: over.period, retryAfterSeconds: secondsToNext(over.period, at), room: 0 };
    },
  );
}

/**
 * Near a limit (less than a quarter of it neither used nor leased), what this replica's lease holds
 * beyond its requests in flight and its use goes back at once when a request ends: else another
 * replica could be refused room this one no longer needs.
 */
export function giveBack(leases: SharedLeases, counters: ReadonlyArray<{ counter: Counter; scope: string }>): void {
  for (const { counter, scope } of counters) {
    const room = leases.room(scope);
    const taken = leases.taken(scope);
    if (room === undefined || taken === undefined || counter.limit === undefined) continue;
    const spare = room - counter.pending - counter.sending - counter.reserved;
    if (spare > 0 && counter.limit - taken < counter.limit / 4) leases.release(scope, spare, true);
  }
}

/**
 * At a sync: a lease this replica has not needed for two syncs goes back to the other replicas; near a
 * limit, what it holds beyond its requests in flight and its use goes back even while a request is in
 * flight (one long answer would otherwise keep it from the others).
 */
export function releaseIdle(leases: SharedLeases, counters: ReadonlyMap<string, Counter>, syncs: number): void {
  for (const [scope, counter] of counters) {
    const spare = (leases.room(scope) ?? 0) - counter.pending - counter.sending - counter.reserved;
    if (!(spare > 0)) continue;
    const idle = counter.reserved === 0 && syncs - (counter.reservedSync ?? -Infinity) >= 2;
    const taken = leases.taken(scope);
    const tight = taken !== undefined && counter.limit !== undefined && counter.limit - taken < counter.limit / 4;
    if (idle || tight) leases.release(scope, spare);
  }
}
