"""The receiver's job records in Redis: the one place job states are written and read back.

Owns: recording an observed job state (from a webhook or a poll) atomically, idempotently and in
rank order (see `model`), reconciling a scope with what Gitea lists, reading the queued jobs of a
scope, the wake-up stream and the facts for the metrics. Key names are in `store.keys`, the scripts in
`scripts`; the reconciler's claims, leases and seats are in `store.seats`.

What webhooks cannot settle (a lost event, a rerun of a never-picked job) the reconciler's poller
settles: Gitea's answer wins over a record older than the poll. A queued job the listings no longer
show is marked `gone` only when two complete listings in a row missed it. Owner and repository
names are compared case-insensitively, as Gitea does, and stored lower-case.

Whose repository a job id is (ids are one sequence per Gitea, so a webhook can name an id not used
yet, a squat): a poll's listing moves the id to the repository it lists, whatever the states; until
a poll listed it, a job's first webhook (`queued` or `waiting`) naming another repository moves it
too, and no other webhook does (see `scripts.RECORD`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from redis.asyncio import Redis

from webhook_scaler.gitea import JobStatus
from webhook_scaler.store.batching import ScriptBatch
from webhook_scaler.store.jobs.model import ALL, JobUpdate, Observation, QueuedJob, Scope
from webhook_scaler.store.jobs.rows import QUEUED_FIELDS, Outcome, RecordResult, queued_job, record_result
from webhook_scaler.store.jobs.scripts import DROP, LISTED, QUEUED, RECORD
from webhook_scaler.store.keys import Keys, text

__all__ = ["JobStore", "Outcome", "RecordResult", "Ttls", "queued_job"]  # the results' types are `rows`'


@dataclass(frozen=True, slots=True)
class Ttls:
    """How long each kind of key lives, in seconds."""

    job: int = 25 * 3600  # longer than Gitea's 24 h ABANDONED_JOB_TIMEOUT
    completed: int = 24 * 3600  # keeps a tombstone against late duplicates
    delivery: int = 24 * 3600
    stream_maxlen: int = 10_000


_MOVES = 3  # attempts at moving a job id whose record other moves keep moving meanwhile


class JobStore:
    """Typed async operations over the job records."""

    def __init__(self, redis: Redis, *, prefix: str = "grs", ttls: Ttls | None = None, instance: str = "") -> None:
        self.redis = redis
        self.ttls = ttls or Ttls()
        self.prefix = prefix
        self.keys = Keys(prefix, instance)
        self._record = ScriptBatch(redis, RECORD)  # concurrent deliveries share round trips
        self._drop = redis.register_script(DROP)
        self._listed = redis.register_script(LISTED)
        self._queued = redis.register_script(QUEUED)

    def of(self, instance: str) -> JobStore:
        """The records of another Gitea instance's jobs ("": the default one), on the same connections."""
        if instance == self.keys.instance:
            return self
        other = copy.copy(self)
        other.keys = Keys(self.prefix, instance)
        return other

    async def now_ms(self) -> int:
        """Redis' clock, the one every record is ordered by, in milliseconds."""
        seconds, micros = await self.redis.time()
        return int(seconds) * 1000 + int(micros) // 1000

    async def record(
        self, update: JobUpdate, *, delivery_id: str | None = None, polled_since_ms: int = -1
    ) -> RecordResult:
        """Apply one observed job state atomically; idempotent and monotonic (see `model`).

        `polled_since_ms` (Redis' clock, from `now_ms`) marks an update from a poll that began then: it
        also replaces a record older than the poll whatever their ranks, and a record of another
        repository whatever its age (`RecordResult.moved`).
        """
        k = self.keys
        keys = [
            k.job(update.job_id),
            k.delivery(delivery_id or "-"),
            *k.indexes(update.owner, update.repo),
            k.claim(update.job_id),
            k.stream,
            k.busy,
            k.done,
            k.observed,
            k.waiting,
            k.runner(update.runner_name or ""),
        ]
        packed = self._packed(update, polled_since_ms) | {"delivered": bool(delivery_id)}
        from_repo = update.repo
        for _ in range(_MOVES):  # a move learns the recorded repository first: its indexes are KEYS too
            indexes = k.indexes(from_repo.split("/", 1)[0], from_repo)[1:]
            reply = await self._record(keys=[*keys, *indexes], args=[json.dumps(packed | {"from_repo": from_repo})])
            if text(reply[0]) != "move":
                return record_result(reply)
            from_repo = text(reply[2])
        state = text(reply[1]) or None
        return RecordResult(Outcome.CONFLICT, state, state, reason="moving")

    def _packed(self, update: JobUpdate, polled_since_ms: int) -> dict[str, Any]:
        return {
            "rank": str(update.rank),
            "state": update.state.value,
            "ttl": str(self.ttls.completed if update.state is JobStatus.COMPLETED else self.ttls.job),
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
                "aged": "1" if update.aged else "",
            },
        }

    async def sync_polled(
        self,
        scope: Scope,
        jobs: Iterable[JobUpdate],
        *,
        polled_since_ms: int,
        complete: bool,
        repos: Collection[str] | None = None,
    ) -> tuple[int, int]:
        """Reconcile one scope with Gitea's list of its queued and running jobs, both ways.

        Adds what no webhook reported. Only from a `complete` listing, marks `gone` a queued job missed
        by this listing and the one before it, if nothing recorded it since the poll began (see DROP);
        with `repos`, only a job of one of those repositories (`owner/name`): the listing read only
        them, so it says nothing of the scope's others (a user's repositories its token cannot see).
        Last, stamps the jobs listed queued with the poll's start (`QueuedJob.listed_ms`).
        Returns (added, dropped).
        """
        listed: set[str] = set()
        queued: list[str] = []
        added = 0
        for update in jobs:
            listed.add(str(update.job_id))
            if update.state is JobStatus.QUEUED:
                queued.append(self.keys.job(update.job_id))
            result = await self.record(update, polled_since_ms=polled_since_ms)
            if result.outcome is Outcome.APPLIED and (result.previous != JobStatus.QUEUED or result.moved):
                added += 1
        seen = None if repos is None else {r.lower() for r in repos}
        dropped = await self._drop_missing(scope, listed, polled_since_ms, seen) if complete else 0
        if queued:
            await self._listed(keys=queued, args=[polled_since_ms])
        return added, dropped

    async def _drop_missing(self, scope: Scope, listed: set[str], polled_since_ms: int, seen: set[str] | None) -> int:
        members = cast("list[bytes]", await self.redis.zrange(self.keys.index(scope), 0, -1))
        missing = [m for m in (text(b) for b in members) if m not in listed]
        dropped = 0
        for (owner, repo), ids in (await self._owner_repo_of(missing)).items():
            if seen is not None and repo not in seen:
                continue  # the listing did not read this repository
            keys = [*self.keys.indexes(owner, repo), self.keys.stream]
            for job_id in ids:
                keys += [self.keys.job(job_id), self.keys.claim(job_id)]
            dropped += int(await self._drop(keys=keys, args=[polled_since_ms, self.ttls.stream_maxlen, *ids]))
        return dropped

    async def _owner_repo_of(self, ids: Sequence[str]) -> dict[tuple[str, str], list[str]]:
        rows = await self._hmget_each(ids, ("owner", "repo"))
        grouped: dict[tuple[str, str], list[str]] = {}
        for job_id, (owner, repo, _claim) in zip(ids, rows, strict=True):
            grouped.setdefault((text(owner or b""), text(repo or b"")), []).append(job_id)
        return grouped

    async def _hmget_each(self, ids: Sequence[str], fields: Sequence[str]) -> list[list[Any]]:
        if not ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hmget(self.keys.job(job_id), list(fields))
                pipe.get(self.keys.claim(job_id))
            replies: list[Any] = await pipe.execute()
        return [[*replies[i], replies[i + 1]] for i in range(0, len(replies), 2)]

    async def queued(self, scope: Scope = ALL, *, limit: int = 10_000) -> list[QueuedJob]:
        """The queued jobs of one scope, oldest first, with who claimed each; cost ~ jobs returned.

        Two round trips up to 5,000 jobs: the index, then one script reads every job on it. (The
        reconciler reads round after round through `reconciler.loop.rounds.demand`, which parses only what changed.)"""
        ids = await self.queued_ids(scope, limit=limit)
        return [queued_job(job_id, row) for job_id, row in zip(ids, await self.job_rows(ids), strict=True) if row]

    async def queued_ids(self, scope: Scope = ALL, *, limit: int = 0) -> list[bytes]:
        """The ids of a scope's queued jobs, oldest first: all of them, or the oldest `limit`."""
        return cast("list[bytes]", await self.redis.zrange(self.keys.index(scope), 0, limit - 1))

    async def waiting_count(self) -> int:
        """How many jobs Gitea holds `waiting` (on `needs:`, an approval or a concurrency group), as its
        webhooks told, recorded within the job TTL."""
        since = await self.now_ms() - self.ttls.job * 1000
        return int(await self.redis.zcount(self.keys.waiting, since, "+inf"))

    async def job_rows(self, ids: Sequence[bytes], *, chunk: int = 5_000) -> list[list[bytes | None] | None]:
        """Each job's row for `queued_job` (None for a job no longer queued), one script per `chunk` jobs
        so that Redis never blocks long on one."""
        rows: list[list[bytes | None] | None] = []
        for at in range(0, len(ids), chunk):
            keys = [
                k
                for job_id in ids[at : at + chunk]
                for k in (self.keys.job(text(job_id)), self.keys.claim(text(job_id)))
            ]
            rows += cast("list[list[bytes | None] | None]", await self._queued(keys=keys, args=list(QUEUED_FIELDS)))
        return rows

    async def wait(self, last_id: str, *, block_ms: int) -> tuple[str, list[tuple[int, str, str]]]:
        """Block until the stream has entries after `last_id`; return the newest id and the changes:
        (job, state, the runner that took it, or "" if none is known)."""
        reply = cast(
            "list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes]]]]] | None",
            await self.redis.xread({self.keys.stream: last_id}, block=block_ms, count=1000),
        )
        changes: list[tuple[int, str, str]] = []
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                last_id = text(entry_id)
                f = {text(k): text(v) for k, v in fields.items()}
                changes.append((int(f["job"]), f["state"], f.get("runner", "")))
        return last_id, changes

    async def observations(self, *, limit: int = 1000) -> list[Observation]:
        """Take up to `limit` recorded facts, oldest first: each is handed to one caller only."""
        raw = await self.redis.lpop(self.keys.observed, limit)
        out: list[Observation] = []
        for item in cast("list[bytes] | None", raw) or []:
            fact = json.loads(text(item))
            seconds = float(fact["ms"]) / 1000 if float(fact["ms"]) >= 0 else -1.0
            out.append(Observation(fact["r"], fact["k"], seconds, fact.get("c") or ""))
        return out

    async def ping(self) -> bool:
        """Whether Redis answers."""
        return bool(await self.redis.ping())
