/**
 * The Lua scripts of the quota counters in Redis (redis-quota.ts, redis-quota-leases.ts) and the keys
 * they touch. Each is one atomic round trip; every one but the seed checks the epoch first, so a
 * Redis that lost what it held (a restart without persistence, a flush) is noticed, not counted on.
 *
 * Per counter: `chatgate:quota:<scope>`, what was used (added by the replicas' syncs), and
 * `chatgate:quota:lease:<scope>`, a hash of the room each replica holds beyond it for its requests in
 * flight and its use not yet added (its lease, see redis-quota-leases.ts). A lease counts only while
 * its replica has read its counters within the lease window; an older one is dropped.
 */
import type Redis from 'ioredis';

const DAY_SECONDS = 86_400;
const PREFIX = 'chatgate:quota:';
export const counterKey = (scope: string) => `${PREFIX}${scope}`;
export const leaseKey = (scope: string) => `${PREFIX}lease:${scope}`;
export const EPOCH_KEY = `${PREFIX}epoch`;
export const REPLICAS_KEY = `${PREFIX}replicas`;
export const batchKey = (id: string) => `${PREFIX}batch:${id}`;
/** A batch's marker outlives any retry of it. */
export const BATCH_MARKER_MS = 10 * 60_000;
/** Replicas that read their counters within this window count for the share. */
export const REPLICA_WINDOW_MS = 60_000;
/** A counter (and its leases) lives a little past its period. */
export const ttlOf = (scope: string) => (scope.includes(':d:') ? 2 * DAY_SECONDS : 40 * DAY_SECONDS);

/**
 * Lowers a replica's lease in hash `k` by `amount` (gone at 0), in integer arithmetic (Lua's tostring
 * writes 1e14 and up in exponent form, which HINCRBY then refuses: budgets count nano-units). And
 * `int`: a whole number as text, never in exponent form.
 */
const LOWER = `
local function lower(k, me, amount)
  if amount > 0 and redis.call('HINCRBY', k, me, -amount) <= 0 then redis.call('HDEL', k, me) end
end
local function int(x) return string.format('%.0f', x) end
`;

/** `live(replicas, k, me, now, window)`: the leases of replicas seen in the window (this one's too) summed; the others' dropped. */
const LIVE = `
local function live(replicas, k, me, now, window)
  local leases = redis.call('HGETALL', k)
  local held = 0
  for j = 1, #leases, 2 do
    local seen = now
    if leases[j] ~= me then seen = tonumber(redis.call('ZSCORE', replicas, leases[j]) or '0') end
    if seen >= now - window then held = held + tonumber(leases[j + 1]) else redis.call('HDEL', k, leases[j]) end
  end
  return held
end
`;

/**
 * KEYS: epoch, batch marker, n counters, their n leases. ARGV: epoch, marker ms, replica id, then per
 * counter its amount, ttl, and 1 when it may be created (the store has none of it). Adds all or
 * nothing; what is added leaves the replica's lease (it is in the counter now).
 */
export const ADD = `${LOWER}
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {'reset'} end
if redis.call('EXISTS', KEYS[2]) == 1 then return {'dup'} end
local n = (#KEYS - 2) / 2
local out = {'missing'}
for i = 1, n do
  if ARGV[i * 3 + 3] ~= '1' and redis.call('EXISTS', KEYS[i + 2]) == 0 then out[#out + 1] = tostring(i - 1) end
end
if #out > 1 then return out end
for i = 1, n do
  local a = i * 3 + 1
  redis.call('INCRBY', KEYS[i + 2], ARGV[a])
  redis.call('EXPIRE', KEYS[i + 2], ARGV[a + 1])
  lower(KEYS[i + 2 + n], ARGV[3], tonumber(ARGV[a]))
end
redis.call('SET', KEYS[2], '1', 'PX', ARGV[2])
return {'ok'}
`;

/**
 * KEYS: epoch, replicas, n counters, their n leases. ARGV: epoch, replica id, window ms, lease window
 * ms. Returns the replicas seen in the window, then each counter ('' when missing), this replica's
 * lease of each, and all live leases of each.
 */
export const READ = `${LOWER}${LIVE}
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {'reset'} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[3])
redis.call('ZADD', KEYS[2], now, ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
redis.call('PEXPIRE', KEYS[2], 2 * window)
local n = (#KEYS - 2) / 2
local out = {'ok', tostring(redis.call('ZCARD', KEYS[2]))}
for i = 1, n do out[#out + 1] = redis.call('GET', KEYS[i + 2]) or '' end
for i = 1, n do out[#out + 1] = redis.call('HGET', KEYS[i + 2 + n], ARGV[2]) or '0' end
for i = 1, n do out[#out + 1] = int(live(KEYS[2], KEYS[i + 2 + n], ARGV[2], now, tonumber(ARGV[4]))) end
return out
`;

/** KEYS: counters. ARGV: value and ttl per counter. Each counter becomes the larger of itself and the value. */
export const SEED = `
local out = {}
for i = 1, #KEYS do
  local value = tonumber(ARGV[i * 2 - 1])
  local current = tonumber(redis.call('GET', KEYS[i]) or '-1')
  if current < value then
    redis.call('SET', KEYS[i], ARGV[i * 2 - 1], 'EX', ARGV[i * 2])
    current = value
  end
  out[i] = tostring(current)
end
return out
`;

/** KEYS: epoch. ARGV: a new epoch, kept unless one is there already. Returns whether it was made, and the epoch. */
export const ADOPT = `
local made = redis.call('SET', KEYS[1], ARGV[1], 'NX')
return {made and '1' or '0', redis.call('GET', KEYS[1])}
`;

/**
 * A replica's lease grows, on all of a request's counters or none. KEYS: epoch, replicas, n counters,
 * their n leases. ARGV: epoch, replica id, lease window ms, then per counter its limit, what the
 * replica needs beyond its lease, and the ttl. Per counter the room is the limit less what is used and
 * every live lease (this replica's too): when a need exceeds its room, {'short', i, then per counter
 * its room and what is used}; else
 * each lease grows by its need and a share of what is left beyond it (the room's left part divided by
 * twice the live replicas, so that the next requests here need no round trip and the others still
 * find room; only while more than a quarter of the limit is left), and {'ok', then per counter its
 * grant, what is used, and what is used or leased now}. Leases of replicas not seen in the window are
 * dropped. A counter Redis does not have (lost, or not seeded yet): {'missing'}, nothing leased.
 */
export const GROW = `${LOWER}${LIVE}
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {'reset'} end
local n = (#KEYS - 2) / 2
for i = 1, n do
  if redis.call('EXISTS', KEYS[i + 2]) == 0 then return {'missing'} end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local me, window = ARGV[2], tonumber(ARGV[3])
-- A grow is a sign of life as a read is: this replica's leases stay live while it asks.
redis.call('ZADD', KEYS[2], now, me)
local replicas = math.max(1, redis.call('ZCOUNT', KEYS[2], now - window, '+inf'))
local rooms, used, short = {}, {}, 0
for i = 1, n do
  used[i] = tonumber(redis.call('GET', KEYS[i + 2]))
  rooms[i] = tonumber(ARGV[i * 3 + 1]) - used[i] - live(KEYS[2], KEYS[i + 2 + n], me, now, window)
  if short == 0 and rooms[i] < tonumber(ARGV[i * 3 + 2]) then short = i end
end
if short > 0 then
  local out = {'short', tostring(short - 1)}
  for i = 1, n do
    out[#out + 1] = int(rooms[i])
    out[#out + 1] = int(used[i])
  end
  return out
end
local out = {'ok'}
for i = 1, n do
  local limit, need = tonumber(ARGV[i * 3 + 1]), tonumber(ARGV[i * 3 + 2])
  local grant = need
  if rooms[i] - need >= limit / 4 then grant = need + math.floor((rooms[i] - need) / (2 * replicas)) end
  redis.call('HINCRBY', KEYS[i + 2 + n], me, int(grant))
  redis.call('EXPIRE', KEYS[i + 2 + n], ARGV[i * 3 + 3])
  out[#out + 1] = int(grant)
  out[#out + 1] = int(used[i])
  out[#out + 1] = int(limit - rooms[i] + grant)
end
return out
`;

/** KEYS: epoch, leases. ARGV: epoch, replica id, then per lease what this replica gives back of it. */
export const RELEASE = `${LOWER}
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {'reset'} end
for i = 2, #KEYS do lower(KEYS[i], ARGV[2], tonumber(ARGV[i + 1])) end
return {'ok'}
`;

/**
 * After a reseed: what the other replicas leased, as this one last saw it, held as the lease of a
 * placeholder replica seen now, so that it counts for one lease window (their requests then in flight,
 * their use not added yet) and then lapses. KEYS: replicas, leases. ARGV: placeholder id, then per
 * lease an amount; each becomes the larger of itself and the amount.
 */
export const HOLD = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now, ARGV[1])
for i = 2, #KEYS do
  local amount = tonumber(ARGV[i])
  if amount > 0 and tonumber(redis.call('HGET', KEYS[i], ARGV[1]) or '0') < amount then
    redis.call('HSET', KEYS[i], ARGV[1], ARGV[i])
    redis.call('EXPIRE', KEYS[i], 3600)
  end
end
return {'ok'}
`;

export type ScriptedRedis = Redis & {
  chatgateQuotaAdd(numberOfKeys: number, ...args: Array<string | number>): Promise<string[]>;
  chatgateQuotaRead(numberOfKeys: number, ...args: Array<string | number>): Promise<string[]>;
  chatgateQuotaSeed(numberOfKeys: number, ...args: Array<string | number>): Promise<string[]>;
  chatgateQuotaAdopt(numberOfKeys: number, ...args: Array<string | number>): Promise<[string, string]>;
  chatgateQuotaGrow(numberOfKeys: number, ...args: Array<string | number>): Promise<string[]>;
  chatgateQuotaRelease(numberOfKeys: number, ...args: Array<string | number>): Promise<string[]>;
  chatgateQuotaHold(numberOfKeys: number, ...args: Array<string | number>): Promise<string[]>;
};

/** The scripts as commands of this connection (EVALSHA, loaded on first use). */
export function defineScripts(redis: Redis): ScriptedRedis {
  redis.defineCommand('chatgateQuotaAdd', { lua: ADD });
  redis.defineCommand('chatgateQuotaRead', { lua: READ });
  redis.defineCommand('chatgateQuotaSeed', { lua: SEED });
  redis.defineCommand('chatgateQuotaAdopt', { lua: ADOPT });
  redis.defineCommand('chatgateQuotaGrow', { lua: GROW });
  redis.defineCommand('chatgateQuotaRelease', { lua: RELEASE });
  redis.defineCommand('chatgateQuotaHold', { lua: HOLD });
  return redis as ScriptedRedis;
}
