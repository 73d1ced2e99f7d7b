"""The Lua scripts of the reconciler's coordination: claims, leases, seats and their epoch.

Owns only the script texts; `coordination` runs them. As in `jobs.scripts` (the job records), every script
declares every key it touches in KEYS under the one hash tag, and reads the server's clock.
"""

from __future__ import annotations

from webhook_scaler.store.keys import NOW

# KEYS: a claim or a lease; ARGV: holder
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

# RELEASE for each claim: KEYS: claims; ARGV: one holder per claim
RELEASE_ALL = """
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[i] then redis.call('DEL', KEYS[i]) end
end
return #KEYS
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
    NOW
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
# be freed early (see `coordination`). A seat held already (a runner Job's name is its job's, so a
# replica taking a job again takes the same seat) is granted again from now, to its new taker: its age
# is that of the newest create it allows, so no reclaim that read it before frees it under that create.
# It also binds the runner's name to the owner whose jobs it may run (`*`: any), for the seats' idle ttl.
# KEYS: seats, epoch, taker, the taker's heartbeat, the runner's binding, then for a queued job: claim,
# job; ARGV: max, name, epoch id, the seats' idle ttl (s), the claim's ttl (ms), the taker, its record's
# ttl (ms), the heartbeat's ttl (ms), the owner ('': no binding). Returns 'granted' (or the seat was
# held already), 'full', 'epoch' (Redis lost the seats since the caller read the epoch) or 'claimed'
# (taken, or no longer queued).
TAKE = (
    NOW
    + _SAME_EPOCH
    + """
if not same_epoch(KEYS[2], ARGV[3]) then return 'epoch' end
if #KEYS == 7 then
  if redis.call('HGET', KEYS[7], 'state') ~= 'queued' or redis.call('EXISTS', KEYS[6]) == 1 then
    return 'claimed'
  end
end
if not redis.call('ZSCORE', KEYS[1], ARGV[2]) and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then
  return 'full'
end
redis.call('ZADD', KEYS[1], now, ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('SET', KEYS[3], ARGV[6], 'PX', ARGV[7])
redis.call('SET', KEYS[4], '1', 'PX', ARGV[8])
if ARGV[9] ~= '' then redis.call('SET', KEYS[5], ARGV[9], 'EX', ARGV[4]) end
if #KEYS == 7 then redis.call('SET', KEYS[6], ARGV[2], 'PX', ARGV[5]) end
return 'granted'
"""
)

# The seat of a runner Job whose create is about to be sent, granted again from now to the taker that
# holds it (its register was slow: the create deadline starts again), with its taker's record and
# heartbeat, and the job's claim if it still names the Job. Only while the taker still holds the seat
# and (for a queued job) the claim: else nothing changes, and the create must not be sent.
# KEYS: seats, taker, the taker's heartbeat, then for a queued job: claim; ARGV: name, taker, its
# record's ttl (ms), the heartbeat's ttl (ms), the claim's ttl (ms). Returns 'granted' or 'late'.
RENEW = (
    NOW
    + """
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) or redis.call('GET', KEYS[2]) ~= ARGV[2] then return 'late' end
if #KEYS == 4 and redis.call('GET', KEYS[4]) ~= ARGV[1] then return 'late' end
redis.call('ZADD', KEYS[1], 'XX', now, ARGV[1])
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
redis.call('SET', KEYS[3], '1', 'PX', ARGV[4])
if #KEYS == 4 then redis.call('PEXPIRE', KEYS[4], ARGV[5]) end
return 'granted'
"""
)

# Give back the seat of a runner Job that was not and will not be created, and its job's claim: only
# while the taker still holds the seat (a replica that took the same job again since holds it now, with
# the claim). KEYS: seats, taker, then for a queued job: claim; ARGV: name, taker. Returns 1 if given back.
GIVE_BACK = """
if redis.call('GET', KEYS[2]) ~= ARGV[2] then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2])
if #KEYS == 3 and redis.call('GET', KEYS[3]) == ARGV[1] then redis.call('DEL', KEYS[3]) end
return 1
"""

# One pass's view of a group's seats: frees the seats of runner Jobs that ended or were deleted, seats
# the active runner Jobs that hold none (made before seats existed, or after Redis lost them), and
# frees seats older than `reclaim_ms` among the `orphans` (seats of Jobs the API server says do not
# exist). KEYS: seats; ARGV: reclaim_ms, n_free, n_adopt, free..., adopt..., orphans...
# Returns {now, name, seated_ms, name, seated_ms, ...} after the changes.
SEATS = (
    NOW
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
    NOW
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
