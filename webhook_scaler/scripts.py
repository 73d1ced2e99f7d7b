"""The Lua scripts of the Redis contract, one per state change, each atomic on the server.

Owns only the script texts; `queue` (the receiver's job records) and `coordination` (the
reconciler's claims, leases and seats) run them. Every script declares every key it touches in KEYS,
and all keys share one hash tag, so each script touches one Redis Cluster slot. Every ordering and
expiry decision reads the server's clock (`TIME`), never a caller's: replicas whose clocks disagree
still agree on what came first.
"""

from __future__ import annotations

# Redis' clock in milliseconds; every script that orders or expires anything starts with it.
_NOW = """
local _t = redis.call('TIME')
local now = tonumber(_t[1]) * 1000 + math.floor(tonumber(_t[2]) / 1000)
"""

# KEYS: job, delivery (a key under the hash tag even when there is no delivery id), idx all, idx owner,
#   idx repo, claim, stream, busy, done, observations
# A job recorded for one repository takes no webhook naming another ('conflict'); Gitea's own listing wins.
# ARGV[1]: one JSON object (one argument packs far faster than thirty): rank, state, ttl (s),
#   delivered (a webhook delivery id is in KEYS[2]), delivery_ttl (s), maxlen, index_age (ms), poll_since
#   (Redis ms, -1 = a webhook), id, fields
RECORD = (
    _NOW
    + """
local a = cjson.decode(ARGV[1])
local job, dkey, id = KEYS[1], KEYS[2], a.id
local rank, state = tonumber(a.rank), a.state
local poll_since = tonumber(a.poll_since)
local cur = redis.call('HMGET', job, 'rank', 'state', 'updated_ms', 'queued_ms', 'started_ms', 'runner', 'repo')
if cur[7] and cur[7] ~= a.fields.repo and tonumber(a.poll_since) < 0 then return {'conflict', cur[2] or ''} end
if a.delivered and redis.call('SET', dkey, '1', 'NX', 'EX', a.delivery_ttl) == false then
  return {'duplicate', cur[2] or ''}
end
if poll_since >= 0 then redis.call('HDEL', job, 'missed') end
local cur_rank = tonumber(cur[1])
local apply = cur_rank == nil or rank > cur_rank
if not apply and poll_since >= 0 and cur[2] ~= state and tonumber(cur[3]) < poll_since then
  apply = true
end
if not apply then return {'stale', cur[2]} end
redis.call('DEL', job)
local flat = {'rank', a.rank, 'state', state, 'updated_ms', now}
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
redis.call('EXPIRE', job, a.ttl)
redis.call('XADD', KEYS[7], 'MAXLEN', '~', a.maxlen, '*', 'job', id, 'state', state, 'runner', runner)
return {'applied', cur[2] or '', state}
"""
)

# Marks `gone` the queued jobs a complete listing of their scope no longer shows: a job goes only at
# its second miss in a row (a job listed again in between is reset by RECORD), and only if nothing
# recorded it since the poll began, so a webhook that arrived while the poll ran wins.
# KEYS: idx all, idx owner, idx repo, stream, then (job, claim) per id
# ARGV: poll_since (Redis ms), stream_maxlen, then the ids
DROP = (
    _NOW
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

# KEYS: a claim or a lease; ARGV: holder
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# Claims whose runner Jobs exist now last `ttl_ms` from now, each only if its holder still has it.
# KEYS: claims; ARGV: ttl_ms, then one holder per claim
CONFIRM = """
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[i + 1] then redis.call('PEXPIRE', KEYS[i], ARGV[1]) end
end
return #KEYS
"""

# Gitea's word on the runners ARGV[first_runner..] (their scores in busy and done, or false) and the
# states of the jobs KEYS[first_job..] (or false).
_ACTIVITY = """
local function activity(busy_key, done_key, first_runner, first_job)
  local busy, done, states = {}, {}, {}
  for i = first_runner, #ARGV do
    busy[i - first_runner + 1] = redis.call('ZSCORE', busy_key, ARGV[i]) or false
    done[i - first_runner + 1] = redis.call('ZSCORE', done_key, ARGV[i]) or false
  end
  for k = first_job, #KEYS do states[k - first_job + 1] = redis.call('HGET', KEYS[k], 'state') or false end
  return busy, done, states
end
"""

# Whether the seats' epoch (the string `{id}:{start ms}` at `key`) is the one with id `id`.
_SAME_EPOCH = """
local function same_epoch(key, id)
  local epoch = redis.call('GET', key)
  return epoch and string.sub(epoch, 1, string.len(id) + 1) == id .. ':'
end
"""

# KEYS: busy, done, then one job per asked id; ARGV: the runners
ACTIVITY = (
    _ACTIVITY
    + """
local busy, done, states = activity(KEYS[1], KEYS[2], 1, 3)
return {busy, done, states}
"""
)

# The seats' epoch, started if there is none. KEYS: epoch; ARGV: the id of a new epoch
# Returns {epoch id, epoch start (ms), now (ms)}
EPOCH = (
    _NOW
    + """
local epoch = redis.call('GET', KEYS[1])
if not epoch then
  epoch = ARGV[1] .. ':' .. now
  redis.call('SET', KEYS[1], epoch)
end
local sep = string.find(epoch, ':', 1, true)
return {string.sub(epoch, 1, sep - 1), tonumber(string.sub(epoch, sep + 1)), now}
"""
)

# A seat for one runner Job, and for a queued job its claim, in one step: the seat only while fewer
# than `max` are held and the epoch is the expected one; the claim (SET NX) only while the job is
# queued and nobody claimed it. Nothing is taken unless everything is. A granted seat records its
# taker (the replica process), and the taker's heartbeat is renewed: a seat whose taker is dead can
# be freed early (see `coordination`).
# KEYS: seats, epoch, taker, the taker's heartbeat, then for a queued job: claim, job; ARGV: max,
# name, epoch id, the seats' idle ttl (s), the claim's ttl (ms), the taker, its record's ttl (ms), the
# heartbeat's ttl (ms). Returns 'granted' (or the seat was held already), 'full', 'epoch' (Redis lost
# the seats since the caller read the epoch) or 'claimed' (taken, or no longer queued).
TAKE = (
    _NOW
    + _SAME_EPOCH
    + """
if not same_epoch(KEYS[2], ARGV[3]) then return 'epoch' end
if #KEYS == 6 then
  if redis.call('HGET', KEYS[6], 'state') ~= 'queued' or redis.call('EXISTS', KEYS[5]) == 1 then
    return 'claimed'
  end
end
if not redis.call('ZSCORE', KEYS[1], ARGV[2]) then
  if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 'full' end
  redis.call('ZADD', KEYS[1], now, ARGV[2])
  redis.call('EXPIRE', KEYS[1], ARGV[4])
end
redis.call('SET', KEYS[3], ARGV[6], 'PX', ARGV[7])
redis.call('SET', KEYS[4], '1', 'PX', ARGV[8])
if #KEYS == 6 then redis.call('SET', KEYS[5], ARGV[2], 'PX', ARGV[5]) end
return 'granted'
"""
)

# One pass's view of a group's seats: frees the seats of runner Jobs that ended or were deleted, seats
# the active runner Jobs that hold none (made before seats existed, or after Redis lost them), and
# frees seats older than `reclaim_ms` among the `orphans` (seats of Jobs the API server says do not
# exist). KEYS: seats; ARGV: reclaim_ms, n_free, n_adopt, free..., adopt..., orphans...
# Returns {now, name, seated_ms, name, seated_ms, ...} after the changes.
SEATS = (
    _NOW
    + """
local n_free, n_adopt = tonumber(ARGV[2]), tonumber(ARGV[3])
for i = 4, 3 + n_free do redis.call('ZREM', KEYS[1], ARGV[i]) end
for i = 4 + n_free, 3 + n_free + n_adopt do redis.call('ZADD', KEYS[1], 'NX', now, ARGV[i]) end
for i = 4 + n_free + n_adopt, #ARGV do
  local seated = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if seated and tonumber(seated) < now - tonumber(ARGV[1]) then redis.call('ZREM', KEYS[1], ARGV[i]) end
end
local out = {now}
local all = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #all do out[#out + 1] = all[i] end
return out
"""
)

# The start of one group's pass, in one step while the caller's epoch is current: take the pass's
# lease, free the seats of `free` (runner Jobs that ended and whose Pods are gone), seat `seat` (the
# active runner Jobs, each held once, idempotently: seats lost while the epoch survived come back),
# keep the seats from expiring, read the seats, and read Gitea's word on the runners and which of the
# asked jobs are still queued (as ACTIVITY does).
# KEYS: lease, epoch, seats, busy, done, then one job per asked id; ARGV: holder ('': no lease), the
# lease's ttl (ms), epoch id, the seats' idle ttl (s), n_free, n_seat, free..., seat..., runners...
# Returns {'locked'} (another holder has the lease; nothing changed), {'epoch'} (the lease is taken,
# the epoch is another: the caller seats the group the long way), or
# {'ok', now, {name, seated_ms, ...}, busy, done, states}.
BEGIN = (
    _NOW
    + _SAME_EPOCH
    + _ACTIVITY
    + """
if ARGV[1] ~= '' and not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return {'locked'} end
if not same_epoch(KEYS[2], ARGV[3]) then return {'epoch'} end
local seat_from = 7 + tonumber(ARGV[5])
local first = seat_from + tonumber(ARGV[6])
for i = 7, seat_from - 1 do redis.call('ZREM', KEYS[3], ARGV[i]) end
for i = seat_from, first - 1 do redis.call('ZADD', KEYS[3], 'NX', now, ARGV[i]) end
if redis.call('EXISTS', KEYS[3]) == 1 then redis.call('EXPIRE', KEYS[3], ARGV[4]) end
local seats = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
local busy, done, states = activity(KEYS[4], KEYS[5], first, 6)
return {'ok', now, seats, busy, done, states}
"""
)
