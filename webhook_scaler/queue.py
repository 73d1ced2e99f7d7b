"""The Redis contract shared by the receiver and the reconciler: every key, TTL and Lua script.

Callers never format a key. Every state change is one Lua script, so it is atomic across any number
of receiver and reconciler replicas. All keys share the hash tag `{prefix}`, so a Redis Cluster keeps
them in one slot and the scripts stay legal there.

| key                              | type   | holds                                             | expires          |
|----------------------------------|--------|---------------------------------------------------|------------------|
| `{p}:job:{job_id}`               | hash   | state, rank, labels, owner, repo, times           | job/completed TTL|
| `{p}:delivery:{delivery_id}`     | string | seen marker for X-Gitea-Delivery                  | delivery TTL     |
| `{p}:queued`                     | zset   | every queued job id, scored by queued time (ms)   | pruned at job TTL|
| `{p}:queued:owner:{owner}`       | zset   | queued job ids of one owner (org or user)         | pruned at job TTL|
| `{p}:queued:repo:{owner}/{repo}` | zset   | queued job ids of one repository                  | pruned at job TTL|
| `{p}:claim:{job_id}`             | string | name of the runner Job started for it             | claim TTL        |
| `{p}:busy:{runner_name}`         | string | job id the runner took (`in_progress`)            | job TTL          |
| `{p}:done:{runner_name}`         | string | when the job the runner took completed (ms)       | job TTL          |
| `{p}:lock:{name}`                | string | a short lease, e.g. one group's reconcile pass    | lease TTL        |
| `{p}:created:{group_uid}`        | zset   | runner Jobs created lately, scored by time (ms)   | created window   |
| `{p}:observed`                   | list   | picked/completed facts for the metrics (JSON)     | last 10,000 kept |
| `{p}:events`                     | stream | `job`, `state` for every applied change (wake-up) | MAXLEN ~ 10,000  |

Ordering. A job id is reused by reruns, and deliveries come late, twice, or out of order. Each event
gets a rank `generation * 8 + phase`: the generation is the attempt a runner picked (`in_progress`,
or `completed` after a pickup) or the next one (`waiting`, `queued`, `completed` without a pickup,
because `run_attempt` grows only at pickup); the phase orders waiting < queued < in_progress <
completed. A change applies only if its rank is higher than the stored one, so any order and any
duplication of a job's events ends in the state of the last event in order. What webhooks cannot
settle (a lost event, a rerun of a never-picked job) the reconciler's poller settles: Gitea's answer
wins over a record older than the poll.

Owner and repository names are compared case-insensitively, as Gitea does, and stored lower-case.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal, cast

from redis.asyncio import Redis

from webhook_scaler.gitea import JobStatus, WorkflowJob, WorkflowJobPayload

_PHASE = {JobStatus.WAITING: 1, JobStatus.QUEUED: 2, JobStatus.IN_PROGRESS: 3, JobStatus.COMPLETED: 4}

# KEYS: job, delivery ("" = none), idx all, idx owner, idx repo, claim, stream, busy-key prefix, done-key prefix,
#   observations
# ARGV[1]: one JSON object (one argument packs far faster than thirty): rank, state, now (ms), ttl (s),
#   delivery_ttl (s), maxlen, index_age (ms), poll_since (ms, -1 = a webhook), id, fields {name: value}
_RECORD = """
local a = cjson.decode(ARGV[1])
local job, dkey, id = KEYS[1], KEYS[2], a.id
local rank, state, now = tonumber(a.rank), a.state, tonumber(a.now)
local poll_since = tonumber(a.poll_since)
local cur = redis.call('HMGET', job, 'rank', 'state', 'updated_ms', 'queued_ms', 'started_ms')
if dkey ~= '' then
  if redis.call('SET', dkey, '1', 'NX', 'EX', a.delivery_ttl) == false then
    return {'duplicate', cur[2] or ''}
  end
end
local cur_rank = tonumber(cur[1])
local apply = cur_rank == nil or rank > cur_rank
if not apply and poll_since >= 0 and cur[2] ~= state and tonumber(cur[3]) < poll_since then
  apply = true
end
if not apply then
  return {'stale', cur[2]}
end
local previous_runner = redis.call('HGET', job, 'runner')
redis.call('DEL', job)
local flat = {'rank', a.rank, 'state', state, 'updated_ms', a.now}
for name, value in pairs(a.fields) do
  if value ~= '' then
    flat[#flat + 1] = name
    flat[#flat + 1] = value
  end
end
redis.call('HSET', job, unpack(flat))
if previous_runner and state == 'completed' and not redis.call('HGET', job, 'runner') then
  redis.call('HSET', job, 'runner', previous_runner)
end
local runner = redis.call('HGET', job, 'runner')
local observed = nil
if runner and runner ~= '' then
  if state == 'in_progress' then
    redis.call('SET', KEYS[8] .. runner, id, 'EX', a.ttl)
    redis.call('HSET', job, 'started_ms', now)
    if cur[2] == 'queued' and cur[4] then
      observed = {r = runner, k = 'picked', ms = now - tonumber(cur[4])}
    end
  else
    redis.call('DEL', KEYS[8] .. runner)
    if state == 'completed' then
      redis.call('SET', KEYS[9] .. runner, a.now, 'EX', a.ttl)
      local ran = -1
      if cur[2] == 'in_progress' and cur[5] then ran = now - tonumber(cur[5]) end
      observed = {r = runner, k = 'completed', ms = ran, c = a.fields.conclusion or ''}
    end
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
  local cutoff = now - tonumber(a.index_age)
  for i = 3, 5 do
    redis.call('ZADD', KEYS[i], since, id)
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', cutoff)
  end
else
  for i = 3, 5 do
    redis.call('ZREM', KEYS[i], id)
  end
  redis.call('DEL', KEYS[6])
end
redis.call('EXPIRE', job, a.ttl)
redis.call('XADD', KEYS[7], 'MAXLEN', '~', a.maxlen, '*', 'job', id, 'state', state)
return {'applied', cur[2] or '', state}
"""

# KEYS: idx all, idx owner, idx repo, stream; ARGV: now_ms, since_ms, job key prefix, claim key prefix,
#       stream_maxlen, then the ids, of one owner and repo, that Gitea no longer lists as queued
_DROP = """
local dropped = 0
for i = 6, #ARGV do
  local id = ARGV[i]
  local cur = redis.call('HMGET', ARGV[3] .. id, 'state', 'updated_ms')
  local stale = cur[1] ~= 'queued'
  if cur[1] == 'queued' and tonumber(cur[2]) < tonumber(ARGV[2]) then
    redis.call('HSET', ARGV[3] .. id, 'state', 'gone', 'updated_ms', ARGV[1])
    redis.call('DEL', ARGV[4] .. id)
    redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[5], '*', 'job', id, 'state', 'gone')
    dropped = dropped + 1
    stale = true
  end
  if stale then
    for k = 1, 3 do redis.call('ZREM', KEYS[k], id) end
  end
end
return dropped
"""

# KEYS: one scope index; ARGV: job key prefix, claim key prefix, limit
_QUEUED = """
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[3]) - 1)
local out = {}
for _, id in ipairs(ids) do
  local f = redis.call('HMGET', ARGV[1] .. id, 'state', 'labels', 'owner', 'repo', 'name', 'run_id',
                       'attempt', 'queued_ms')
  f[9] = redis.call('GET', ARGV[2] .. id)
  if f[1] == 'queued' then
    table.insert(out, id)
    table.insert(out, f)
  end
end
return out
"""

# KEYS: claim, job; ARGV: holder, ttl_ms
_CLAIM = """
if redis.call('HGET', KEYS[2], 'state') ~= 'queued' then return 0 end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
return 0
"""

# KEYS: claim; ARGV: holder
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


@dataclass(frozen=True, slots=True)
class Observation:
    """A fact for the metrics, recorded with the change that made it: a runner took a job (`picked`,
    `seconds` it waited queued) or its job completed (`seconds` it ran, -1 if its start was not seen)."""

    runner: str
    kind: Literal["picked", "completed"]
    seconds: float
    conclusion: str = ""


class Outcome(StrEnum):
    """What recording one event did."""

    APPLIED = "applied"
    DUPLICATE = "duplicate"  # this delivery id was recorded before
    STALE = "stale"  # older than what is stored: changes nothing


@dataclass(frozen=True, slots=True)
class JobUpdate:
    """One observed state of a job, from a webhook or a poll."""

    job_id: int
    state: JobStatus
    rank: int
    attempt: int
    labels: tuple[str, ...]
    owner: str
    repo: str  # owner/name, lower-case
    name: str
    run_id: int
    runner_name: str | None = None
    conclusion: str | None = None

    @classmethod
    def from_job(cls, job: WorkflowJob, *, repo_full_name: str) -> JobUpdate:
        """The update a job in a webhook or an API listing describes."""
        picked = job.status is JobStatus.IN_PROGRESS or (job.status is JobStatus.COMPLETED and job.was_picked)
        generation = job.run_attempt if picked else job.run_attempt + 1
        repo = repo_full_name.lower()
        return cls(
            job_id=job.id,
            state=job.status,
            rank=generation * 8 + _PHASE[job.status],
            attempt=job.run_attempt,
            labels=job.labels,
            owner=repo.split("/", 1)[0],
            repo=repo,
            name=job.name,
            run_id=job.run_id,
            runner_name=job.runner_name,
            conclusion=job.conclusion,
        )

    @classmethod
    def from_payload(cls, payload: WorkflowJobPayload) -> JobUpdate:
        """The update a `workflow_job` webhook describes."""
        return cls.from_job(payload.workflow_job, repo_full_name=payload.repository.full_name)


@dataclass(frozen=True, slots=True)
class RecordResult:
    """The outcome of recording one update, and the job's state before and after."""

    outcome: Outcome
    previous: str | None
    state: str | None


@dataclass(frozen=True, slots=True)
class Scope:
    """Which queued jobs a reader wants: all of them, one owner's, or one repository's."""

    kind: Literal["all", "owner", "repo"]
    name: str = ""


ALL = Scope("all")


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """A job waiting for a runner, as the reconciler sees it."""

    job_id: int
    labels: tuple[str, ...]
    owner: str
    repo: str
    name: str
    run_id: int
    attempt: int
    queued_ms: int
    claimed_by: str | None


@dataclass(frozen=True, slots=True)
class Ttls:
    """How long each kind of key lives, in seconds (claims in milliseconds)."""

    job: int = 25 * 3600  # longer than Gitea's 24 h ABANDONED_JOB_TIMEOUT
    completed: int = 24 * 3600  # keeps a tombstone against late duplicates
    delivery: int = 24 * 3600
    stream_maxlen: int = 10_000


class JobStore:
    """Typed async operations over the Redis contract."""

    def __init__(self, redis: Redis, *, prefix: str = "grs", ttls: Ttls | None = None) -> None:
        self.redis = redis
        self.ttls = ttls or Ttls()
        self._p = "{" + prefix + "}"
        self._record = redis.register_script(_RECORD)
        self._drop = redis.register_script(_DROP)
        self._queued = redis.register_script(_QUEUED)
        self._claim = redis.register_script(_CLAIM)
        self._release = redis.register_script(_RELEASE)

    # -- keys -------------------------------------------------------------------------------------
    def _job_key(self, job_id: int | str) -> str:
        return f"{self._p}:job:{job_id}"

    def _claim_key(self, job_id: int | str) -> str:
        return f"{self._p}:claim:{job_id}"

    def _busy_key(self, runner: str) -> str:
        return f"{self._p}:busy:{runner}"

    def _done_key(self, runner: str) -> str:
        return f"{self._p}:done:{runner}"

    def _index(self, scope: Scope) -> str:
        if scope.kind == "all":
            return f"{self._p}:queued"
        return f"{self._p}:queued:{scope.kind}:{scope.name.lower()}"

    @property
    def _observed(self) -> str:
        return f"{self._p}:observed"

    @property
    def stream(self) -> str:
        """The wake-up stream's key."""
        return f"{self._p}:events"

    def _indexes(self, owner: str, repo: str) -> list[str]:
        return [self._index(ALL), self._index(Scope("owner", owner)), self._index(Scope("repo", repo))]

    # -- writes -----------------------------------------------------------------------------------
    async def record(
        self,
        update: JobUpdate,
        *,
        now_ms: int,
        delivery_id: str | None = None,
        polled_since_ms: int = -1,
    ) -> RecordResult:
        """Apply one observed job state atomically; idempotent and monotonic (see the module doc)."""
        ttl = self.ttls.completed if update.state is JobStatus.COMPLETED else self.ttls.job
        keys = [
            self._job_key(update.job_id),
            f"{self._p}:delivery:{delivery_id}" if delivery_id else "",
            *self._indexes(update.owner, update.repo),
            self._claim_key(update.job_id),
            self.stream,
            self._busy_key(""),
            self._done_key(""),
            self._observed,
        ]
        packed = {
            "rank": str(update.rank),
            "state": update.state.value,
            "now": str(now_ms),
            "ttl": str(ttl),
            "delivery_ttl": str(self.ttls.delivery),
            "maxlen": str(self.ttls.stream_maxlen),
            "index_age": str(self.ttls.job * 1000),
            "poll_since": str(polled_since_ms),
            "id": str(update.job_id),
            "fields": {
                "labels": json.dumps(list(update.labels)),
                "owner": update.owner,
                "repo": update.repo,
                "name": update.name,
                "run_id": str(update.run_id),
                "attempt": str(update.attempt),
                "runner": update.runner_name or "",
                "conclusion": update.conclusion or "",
            },
        }
        reply = await self._record(keys=keys, args=[json.dumps(packed)])
        parts = [_text(p) for p in reply]
        return RecordResult(
            outcome=Outcome(parts[0]),
            previous=parts[1] or None,
            state=parts[2] if len(parts) > 2 else (parts[1] or None),
        )

    async def sync_polled(
        self, scope: Scope, jobs: Iterable[JobUpdate], *, polled_since_ms: int, now_ms: int
    ) -> tuple[int, int]:
        """Reconcile one scope with Gitea's list of its queued jobs, both ways.

        Adds what no webhook reported and marks `gone` what Gitea no longer lists, but only records
        older than the poll: a webhook that arrived while the poll ran wins. Returns (added, dropped).
        """
        listed: set[str] = set()
        added = 0
        for update in jobs:
            listed.add(str(update.job_id))
            result = await self.record(update, now_ms=now_ms, polled_since_ms=polled_since_ms)
            if result.outcome is Outcome.APPLIED and result.previous != JobStatus.QUEUED:
                added += 1
        members = cast("list[bytes]", await self.redis.zrange(self._index(scope), 0, -1))
        indexed = [_text(m) for m in members]
        missing = [m for m in indexed if m not in listed]
        if not missing:
            return added, 0
        owner_repo = await self._owner_repo_of(missing)
        dropped = 0
        for (owner, repo), ids in owner_repo.items():
            dropped += int(
                await self._drop(
                    keys=[*self._indexes(owner, repo), self.stream],
                    args=[
                        now_ms,
                        polled_since_ms,
                        self._job_key(""),
                        self._claim_key(""),
                        self.ttls.stream_maxlen,
                        *ids,
                    ],
                )
            )
        return added, dropped

    async def _owner_repo_of(self, ids: Sequence[str]) -> dict[tuple[str, str], list[str]]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hmget(self._job_key(job_id), "owner", "repo")
            rows: list[list[Any]] = await pipe.execute()
        grouped: dict[tuple[str, str], list[str]] = {}
        for job_id, (owner, repo) in zip(ids, rows, strict=True):
            grouped.setdefault((_text(owner or b""), _text(repo or b"")), []).append(job_id)
        return grouped

    async def claim(self, job_id: int, *, holder: str, ttl_ms: int) -> bool:
        """Atomically take the right to start a runner for a queued job; False if taken or not queued."""
        keys = [self._claim_key(job_id), self._job_key(job_id)]
        return bool(await self._claim(keys=keys, args=[holder, ttl_ms]))

    async def release(self, job_id: int, *, holder: str) -> None:
        """Give a claim back (the runner Job could not be created), only if `holder` still has it."""
        await self._release(keys=[self._claim_key(job_id)], args=[holder])

    # -- reads ------------------------------------------------------------------------------------
    async def queued(self, scope: Scope = ALL, *, limit: int = 10_000) -> list[QueuedJob]:
        """The queued jobs of one scope, oldest first, with who claimed each; cost ~ jobs returned."""
        reply = await self._queued(keys=[self._index(scope)], args=[self._job_key(""), self._claim_key(""), limit])
        out: list[QueuedJob] = []
        for i in range(0, len(reply), 2):
            f = [None if v is None else _text(v) for v in reply[i + 1]]
            out.append(
                QueuedJob(
                    job_id=int(_text(reply[i])),
                    labels=tuple(json.loads(f[1] or "[]")),
                    owner=f[2] or "",
                    repo=f[3] or "",
                    name=f[4] or "",
                    run_id=int(f[5] or 0),
                    attempt=int(f[6] or 0),
                    queued_ms=int(f[7] or 0),
                    claimed_by=f[8] if len(f) > 8 else None,
                )
            )
        return out

    async def state(self, job_id: int) -> dict[str, str]:
        """The stored record of one job (empty if unknown or expired)."""
        raw = await self.redis.hgetall(self._job_key(job_id))
        return {_text(k): _text(v) for k, v in raw.items()}

    async def wait(self, last_id: str, *, block_ms: int) -> tuple[str, list[tuple[int, str]]]:
        """Block until the stream has entries after `last_id`; return the newest id and (job, state)s."""
        reply = cast(
            "list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes]]]]] | None",
            await self.redis.xread({self.stream: last_id}, block=block_ms, count=1000),
        )
        changes: list[tuple[int, str]] = []
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                last_id = _text(entry_id)
                f = {_text(k): _text(v) for k, v in fields.items()}
                changes.append((int(f["job"]), f["state"]))
        return last_id, changes

    async def lock(self, name: str, *, holder: str, ttl_ms: int) -> bool:
        """Take a short exclusive lease (e.g. one group's reconcile pass across replicas)."""
        return bool(await self.redis.set(f"{self._p}:lock:{name}", holder, nx=True, px=ttl_ms))

    async def unlock(self, name: str, *, holder: str) -> None:
        """Give a lease back, only if `holder` still has it."""
        await self._release(keys=[f"{self._p}:lock:{name}"], args=[holder])

    async def note_created(self, group: str, name: str, *, now_ms: int, window_ms: int) -> None:
        """Remember a runner Job created for a group, so replicas whose cache lags still count it."""
        key = f"{self._p}:created:{group}"
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zadd(key, {name: now_ms})
            pipe.zremrangebyscore(key, "-inf", now_ms - window_ms)
            pipe.pexpire(key, window_ms)
            await pipe.execute()

    async def recently_created(self, group: str, *, since_ms: int) -> set[str]:
        """Names of the group's runner Jobs created since `since_ms`, by any replica."""
        members = cast("list[bytes]", await self.redis.zrangebyscore(f"{self._p}:created:{group}", since_ms, "+inf"))
        return {_text(m) for m in members}

    async def activity(self, runners: Sequence[str], *, jobs: Sequence[int] = ()) -> Activity:
        """What Gitea reported about these runners (which run a job, when the job of others ended) and
        which of these `jobs` are still queued, read in one transaction.

        One snapshot matters: a runner that takes a job is busy and the job leaves the queue in one
        write, so a caller that read the queue a moment earlier learns here that the job is gone, and
        does not count it as waiting for a runner that is already running it.
        """
        if not runners and not jobs:
            return Activity(set(), {}, set())
        async with self.redis.pipeline(transaction=True) as pipe:
            if runners:
                pipe.mget([self._busy_key(r) for r in runners] + [self._done_key(r) for r in runners])
            for job_id in jobs:
                pipe.hget(self._job_key(job_id), "state")
            results = await pipe.execute()
        values = results.pop(0) if runners else []
        busy, done = values[: len(runners)], values[len(runners) :]
        return Activity(
            busy={r for r, v in zip(runners, busy, strict=True) if v is not None},
            done_ms={r: int(v) for r, v in zip(runners, done, strict=True) if v is not None},
            queued={
                j for j, state in zip(jobs, results, strict=True) if state is not None and _text(state) == "queued"
            },
        )

    async def observations(self, *, limit: int = 1000) -> list[Observation]:
        """Take up to `limit` recorded facts, oldest first: each is handed to one caller only."""
        raw = await self.redis.lpop(self._observed, limit)
        out: list[Observation] = []
        for item in raw or []:
            fact = json.loads(_text(item))
            seconds = float(fact["ms"]) / 1000 if float(fact["ms"]) >= 0 else -1.0
            out.append(Observation(fact["r"], fact["k"], seconds, fact.get("c") or ""))
        return out

    async def ping(self) -> bool:
        """Whether Redis answers."""
        return bool(await self.redis.ping())


@dataclass(frozen=True, slots=True)
class Activity:
    """Gitea's word on runners: busy ones (`in_progress`), and when the job of others completed; and
    which of the jobs asked about are still queued."""

    busy: set[str]
    done_ms: dict[str, int]
    queued: set[int] = field(default_factory=set)


def _text(value: bytes | str | int) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return str(value)


def connect(url: str, *, password: str | None, timeout: float) -> Redis:
    """A Redis client that fails fast, so callers can answer 503 instead of hanging."""
    return Redis.from_url(
        url,
        password=password,
        socket_timeout=timeout,
        socket_connect_timeout=timeout,
        health_check_interval=30,
    )
