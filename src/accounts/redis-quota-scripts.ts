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

/** Lowers a replica's lease in hash `k` by `amount` (gone at 0). */
const LOWER = `
local function lower(k, me, amount)
  local left = tonumber(redis.call('HGET', k, me) or '0') - amount
  if left > 0 then redis.call('HSET', k, me, tostring(left)) else redis.call('HDEL', k, me) end
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
 * KEYS: epoch, replicas, n counters, their n leases. ARGV: epoch, replica id, window ms. Returns the
 * replicas seen in the window, then each counter ('' when missing), this replica's lease of each, and
 * all leases of each.
 */
export const READ = `
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
for i = 1, n do
  local held = 0
  for _, v in ipairs(redis.call('HVALS', KEYS[i + 2 + n])) do held = held + tonumber(v) end
  out[#out + 1] = tostring(held)
end
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
 * grant, what is used, and what is used or leased now}. Leases of replicas not seen in the window are dropped.
 */
export const GROW = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {'reset'} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local me, window = ARGV[2], tonumber(ARGV[3])
local n = (#KEYS - 2) / 2
local live = math.max(1, redis.call('ZCOUNT', KEYS[2], now - window, '+inf'))
local rooms, used, short = {}, {}, 0
for i = 1, n do
  used[i] = tonumber(redis.call('GET', KEYS[i + 2]) or '0')
  local leases = redis.call('HGETALL', KEYS[i + 2 + n])
  local held = 0
  for j = 1, #leases, 2 do
    local seen = now
    if leases[j] ~= me then seen = tonumber(redis.call('ZSCORE', KEYS[2], leases[j]) or '0') end
    if seen >= now - window then held = held + tonumber(leases[j + 1]) else redis.call('HDEL', KEYS[i + 2 + n], leases[j]) end
  end
  rooms[i] = tonumber(ARGV[i * 3 + 1]) - used[i] - held
  if short == 0 and rooms[i] < tonumber(ARGV[i * 3 + 2]) then short = i end
end
if short > 0 then
  local out = {'short', tostring(short - 1)}
  for i = 1, n do
    out[#out + 1] = tostring(rooms[i])
    out[#out + 1] = tostring(used[i])
  end
  return out
end
local out = {'ok'}
for i = 1, n do
  local limit, need = tonumber(ARGV[i * 3 + 1]), tonumber(ARGV[i * 3 + 2])
  local grant = need
  if rooms[i] - need >= limit / 4 then grant = need + math.floor((rooms[i] - need) / (2 * live)) end
  redis.call('HINCRBY', KEYS[i + 2 + n], me, grant)
  redis.call('EXPIRE', KEYS[i + 2 + n], ARGV[i * 3 + 3])
  out[#out + 1] = tostring(grant)
  out[#out + 1] = tostring(used[i])
  out[#out + 1] = tostring(limit - rooms[i] + grant)
end
return out
`;

/** KEYS: epoch, leases. ARGV: epoch, replica id, then per lease what this replica gives back of it. */
export const RELEASE = `${LOWER}
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return {'reset'} end
for i = 2, #KEYS do lower(KEYS[i], ARGV[2], tonumber(ARGV[i + 1])) end
return {'ok'}
`;

export type ScriptedRedis = Redis & {
  chatgateQuotaAdd(numberOfKeys: number, ...args: Array<string | number>): Promise<string[]>;
  chatgateQuotaRead(numberOfKeys: number, ...args: Array<string | number>): Promise<string[]>;
  chatgateQuotaSeed(numberOfKeys: number, ...args: Array<string | number>): Promise<string[]>;
  chatgateQuotaAdopt(numberOfKeys: number, ...args: Array<string | number>): Promise<[string, string]>;
  chatgateQuotaGrow(numberOfKeys: number, ...args: Array<string | number>): Promise<string[]>;
  chatgateQuotaRelease(numberOfKeys: number, ...args: Array<string | number>): Promise<string[]>;
};

/** The scripts as commands of this connection (EVALSHA, loaded on first use). */
export function defineScripts(redis: Redis): ScriptedRedis {
  redis.defineCommand('chatgateQuotaAdd', { lua: ADD });
  redis.defineCommand('chatgateQuotaRead', { lua: READ });
  redis.defineCommand('chatgateQuotaSeed', { lua: SEED });
  redis.defineCommand('chatgateQuotaAdopt', { lua: ADOPT });
  redis.defineCommand('chatgateQuotaGrow', { lua: GROW });
  redis.defineCommand('chatgateQuotaRelease', { lua: RELEASE });
  return redis as ScriptedRedis;
}
