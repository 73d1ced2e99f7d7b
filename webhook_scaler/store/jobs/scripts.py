"""The Lua scripts of the job records, one per state change, each atomic on the server.

Owns only the script texts; `records` (the receiver's job records) runs them, as `seats.coordination`
runs the reconciler's claims, leases and seats from `seats.scripts`. Every script declares every key
it touches in KEYS, and all keys share one hash tag, so each script touches one Redis Cluster slot.
Every ordering and expiry decision reads the server's clock (`keys.NOW`), never a caller's: replicas
whose clocks disagree still agree on what came first.
"""

from __future__ import annotations

from webhook_scaler.store.keys import NOW

# KEYS: job, delivery (a key under the hash tag even when there is no delivery id), idx all, idx owner,
#   idx repo, claim, stream, busy, done, observations, waiting, runner binding, then the owner and repo
#   indexes of `from_repo`
# Whose repository a job id is: Gitea's listing (a poll) moves the id to the repository it lists,
# whatever the states and ranks. Until a poll listed it under its repository ('confirmed'), a job's
# first webhook (`queued` or `waiting`) naming another repository moves it too, so a squat on an id
# not used yet blocks no job; any other webhook naming another repository is refused ('conflict',
# with why: 'listed' or 'started'). A moved id starts afresh: its old indexes and claim go, nothing of
# the old record is kept. A move needs the old repository's indexes in KEYS: when `from_repo` is not
# the recorded repository the script changes nothing and answers 'move' with it, for the caller to
# call again with those keys.
# A webhook naming a runner of ours bound to another owner (`Keys.runner`) says nothing about that runner.
# ARGV[1]: one JSON object (one argument packs far faster than thirty): rank, state, ttl (s),
#   delivered (a webhook delivery id is in KEYS[2]), delivery_ttl (s), maxlen, index_age (ms), poll_since
#   (Redis ms, -1 = a webhook), id, from_repo, fields
# Returns {'applied', previous state, state, '1' if moved}, {'duplicate' | 'stale', state},
#   {'conflict', state, why} or {'move', state, the recorded repository}.
RECORD = (
    NOW
    + """
local a = cjson.decode(ARGV[1])
local job, dkey, id = KEYS[1], KEYS[2], a.id
local rank, state = tonumber(a.rank), a.state
local poll_since = tonumber(a.poll_since)
local cur = redis.call(
  'HMGET', job, 'rank', 'state', 'updated_ms', 'queued_ms', 'started_ms', 'runner', 'repo', 'confirmed'
)
local moved = cur[7] ~= false and cur[7] ~= a.fields.repo
if moved and poll_since < 0 then
  if cur[8] then return {'conflict', cur[2] or '', 'listed'} end
  if state ~= 'queued' and state ~= 'waiting' then return {'conflict', cur[2] or '', 'started'} end
end
if moved and cur[7] ~= a.from_repo then return {'move', cur[2] or '', cur[7]} end
if a.delivered and redis.call('SET', dkey, '1', 'NX', 'EX', a.delivery_ttl) == false then
  return {'duplicate', cur[2] or ''}
end
if moved then
  redis.call('ZREM', KEYS[13], id)
  redis.call('ZREM', KEYS[14], id)
  redis.call('ZREM', KEYS[11], id)
  redis.call('DEL', KEYS[6])
  cur = {}
elseif poll_since >= 0 and cur[1] then
  redis.call('HDEL', job, 'missed')
  redis.call('HSET', job, 'confirmed', '1')
end
local cur_rank = tonumber(cur[1])
local apply = cur_rank == nil or rank > cur_rank
if not apply and poll_since >= 0 and cur[2] ~= state and tonumber(cur[3]) < poll_since then
  apply = true
end
if not apply then return {'stale', cur[2]} end
if a.fields.runner ~= '' and poll_since < 0 then
  local bound = redis.call('GET', KEYS[12])
  if bound and bound ~= '*' and bound ~= a.fields.owner then a.fields.runner = '' end
end
redis.call('DEL', job)
local flat = {'rank', a.rank, 'state', state, 'updated_ms', now}
if poll_since >= 0 or cur[8] then
  flat[#flat + 1] = 'confirmed'
  flat[#flat + 1] = '1'
end
for name, value in pairs(a.fields) do
  if value ~= '' then
    flat[#flat + 1] = name
    flat[#flat + 1] = value
  end
end
redis.call('HSET', job, unpack(flat))
local runner = a.fields.runner
if runner == '' and state == 'completed' and cur[6] then
  runner = cur[6]
  redis.call('HSET', job, 'runner', runner)
end
local ttl_ms = tonumber(a.ttl) * 1000
local observed = nil
if runner ~= '' then
  if state == 'in_progress' then
    redis.call('ZADD', KEYS[8], now, runner)
    redis.call('HSET', job, 'started_ms', now)
    if cur[2] == 'queued' and cur[4] then
      observed = {r = runner, k = 'picked', ms = now - tonumber(cur[4])}
    end
  else
    redis.call('ZREM', KEYS[8], runner)
    if state == 'completed' then
      redis.call('ZADD', KEYS[9], now, runner)
      local ran = -1
      if cur[2] == 'in_progress' and cur[5] then ran = now - tonumber(cur[5]) end
      observed = {r = runner, k = 'completed', ms = ran, c = a.fields.conclusion or ''}
    end
  end
  for i = 8, 9 do
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now - ttl_ms)
    redis.call('PEXPIRE', KEYS[i], ttl_ms)
  end
end
if observed then
  redis.call('RPUSH', KEYS[10], cjson.encode(observed))
  redis.call('LTRIM', KEYS[10], -10000, -1)
end
if state == 'queued' then
  local since = now
  if cur[2] == 'queued' and cur[4] then since = tonumber(cur[4]) end
  redis.call('HSET', job, 'queued_ms', since)
  for i = 3, 5 do
    redis.call('ZADD', KEYS[i], since, id)
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now - tonumber(a.index_age))
  end
else
  for i = 3, 5 do redis.call('ZREM', KEYS[i], id) end
  redis.call('DEL', KEYS[6])
end
if state == 'waiting' then
  redis.call('ZADD', KEYS[11], now, id)
  redis.call('ZREMRANGEBYSCORE', KEYS[11], '-inf', now - tonumber(a.index_age))
elseif cur[2] == 'waiting' then
  redis.call('ZREM', KEYS[11], id)
end
redis.call('EXPIRE', job, a.ttl)
redis.call('XADD', KEYS[7], 'MAXLEN', '~', a.maxlen, '*', 'job', id, 'state', state, 'runner', runner)
return {'applied', cur[2] or '', state, moved and '1' or ''}
"""
)

# Marks `gone` the queued jobs a complete listing of their scope no longer shows: a job goes only at
# its second miss in a row (a job listed again in between is reset by RECORD), and only if nothing
# recorded it since the poll began, so a webhook that arrived while the poll ran wins.
# KEYS: idx all, idx owner, idx repo, stream, then (job, claim) per id
# ARGV: poll_since (Redis ms), stream_maxlen, then the ids
DROP = (
    NOW
    + """
local dropped = 0
for i = 3, #ARGV do
  local id, job, claim = ARGV[i], KEYS[3 + 2 * (i - 2)], KEYS[4 + 2 * (i - 2)]
  local cur = redis.call('HMGET', job, 'state', 'updated_ms', 'missed')
  if cur[1] ~= 'queued' then
    for k = 1, 3 do redis.call('ZREM', KEYS[k], id) end
  elseif tonumber(cur[2]) < tonumber(ARGV[1]) then
    if cur[3] then
      redis.call('HSET', job, 'state', 'gone', 'updated_ms', now)
      redis.call('HDEL', job, 'missed')
      redis.call('DEL', claim)
      for k = 1, 3 do redis.call('ZREM', KEYS[k], id) end
      redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[2], '*', 'job', id, 'state', 'gone')
      dropped = dropped + 1
    else
      redis.call('HSET', job, 'missed', ARGV[1])
    end
  end
end
return dropped
"""
)

# Stamps the jobs a listing showed queued with the poll's start, once the whole listing was recorded and
# its misses dropped (so whoever reads the stamp also reads everything else that listing told).
# KEYS: the jobs; ARGV: poll_since (Redis ms)
LISTED = """
for i = 1, #KEYS do
  if redis.call('HGET', KEYS[i], 'state') == 'queued' then redis.call('HSET', KEYS[i], 'listed_ms', ARGV[1]) end
end
return 0
"""

# Reads many jobs in one call (a pipeline of a command per job cost the reconciler most of its CPU).
# KEYS: job, claim, job, claim, ...; ARGV: the fields to read, 'state' first
# Returns one entry per job: false unless it is queued, else its fields and its claim's holder
QUEUED = """
local out = {}
for i = 1, #KEYS, 2 do
  local f = redis.call('HMGET', KEYS[i], unpack(ARGV))
  if f[1] == 'queued' then
    f[#ARGV + 1] = redis.call('GET', KEYS[i + 1])
    out[#out + 1] = f
  else
    out[#out + 1] = false
  end
end
return out
"""
