"""Which queued jobs each group sees in a round, however many are queued.

A round reads the ids of every queued job (one ZRANGE, oldest first). It reads a job's row only if the
job is new to it, or is among the oldest of its group: the group's window, enough for one pass to
start every runner the group may have (`window`). Which group a job goes to (`assign.group_of`)
depends only on what a job id never changes, so it is worked out once per job while the groups stay
the same. So a job queued behind any number of others that no group can run now (labels no group
serves, groups at `maxActiveRunners`) is still seen at once by its own group, and a round costs one
id per queued job plus the rows of the windows.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from reconciler.decide.assign import EVERY_PROVEN, CachedIndex, GroupIndex, Standing, group_of
from reconciler.decide.instances import instance_of
from reconciler.metrics import Metrics
from reconciler.model.spec import RunnerGroupSpec
from webhook_scaler.store.jobs.model import Observation, QueuedJob
from webhook_scaler.store.jobs.records import JobStore, queued_job

log = logging.getLogger(__name__)

Key = tuple[str, str]
HELD_EVERY = 1.0  # seconds between counts of the jobs Gitea holds `waiting` (a report, not demand)


@dataclass(frozen=True, slots=True)
class GroupDemand:
    """One group's queued jobs in a round: the oldest (`window`), read this round, and how many in all."""

    jobs: list[QueuedJob]
    total: int


NONE = GroupDemand([], 0)


def window(spec: RunnerGroupSpec) -> int:
    """How many of a group's oldest queued jobs a pass reads: twice what may run (the jobs of its
    active runners, and as many waiting for the runners it may add), and some for jobs served
    elsewhere."""
    return 2 * spec.max_active_runners + 10


class Demand:
    """Reads the queued jobs round after round, remembering what a job id never changes."""

    def __init__(self, store: JobStore) -> None:
        self.store = store
        self._known: dict[bytes, tuple[list[bytes | None], QueuedJob]] = {}  # by id: its last row, parsed
        self._index: GroupIndex | None = None
        self._group: dict[bytes, Key | None] = {}  # by id: its group under `_index`
        self.unmatched = 0  # the last round's queued jobs no group matches (their labels or scope)
        self.held = 0  # jobs Gitea holds `waiting` (read at most once per HELD_EVERY seconds)
        self._held_read = -HELD_EVERY

    async def read(self, index: GroupIndex) -> dict[Key, GroupDemand]:
        """Every group's queued jobs now (see `GroupDemand`); a group with none has no entry."""
        ids = await self.store.queued_ids()
        if (now := time.monotonic()) - self._held_read >= HELD_EVERY:
            self.held, self._held_read = await self.store.waiting_count(), now
        fresh = await self._read([i for i in ids if i not in self._known])
        if index is not self._index:
            self._index, self._group = index, {}
        sizes = {(g.namespace, g.name): window(g.spec) for g in index.groups}
        picked: dict[Key, list[bytes]] = {}
        totals: dict[Key, int] = {}
        taken: dict[tuple[Key, bool], int] = {}  # the window's jobs, apart for aged ones not confirmed yet
        self.unmatched = 0
        for job_id in ids:
            key = self._group_of(job_id, index)
            if key is None:
                self.unmatched += job_id in self._known
                continue
            totals[key] = totals.get(key, 0) + 1
            # Doubted jobs (maybe replays, see `waiting.believed`) never crowd believed ones out of a window.
            budget = (key, self._known[job_id][1].unconfirmed)
            if (n := taken.get(budget, 0)) < sizes[key]:
                taken[budget] = n + 1
                picked.setdefault(key, []).append(job_id)
        await self._read([i for oldest in picked.values() for i in oldest if i not in fresh])
        self._prune(ids)
        known = self._known
        return {k: GroupDemand([known[i][1] for i in v if i in known], totals[k]) for k, v in picked.items()}

    def _group_of(self, job_id: bytes, index: GroupIndex) -> Key | None:
        if job_id in self._group:
            return self._group[job_id]
        seen = self._known.get(job_id)
        if seen is None:
            return None  # it left the queue while the round read it
        key = self._group[job_id] = group_of(seen[1], index)
        return key

    async def _read(self, ids: Sequence[bytes]) -> set[bytes]:
        """Read `ids`' rows; parse only rows that changed; forget jobs no longer queued."""
        if not ids:
            return set()
        for job_id, row in zip(ids, await self.store.job_rows(ids), strict=True):
            seen = self._known.get(job_id)
            if not row:
                self._known.pop(job_id, None)
                self._group.pop(job_id, None)
            elif seen is None or seen[0] != row:
                job = queued_job(job_id, row)
                if seen is not None and (seen[1].owner, seen[1].repo, seen[1].labels) != (
                    job.owner,
                    job.repo,
                    job.labels,
                ):
                    self._group.pop(job_id, None)  # renamed or moved: assign it again
                self._known[job_id] = (row, job)
        return set(ids)

    def _prune(self, ids: list[bytes]) -> None:
        """Forget jobs that left the queue, once they are as many as those in it (amortized O(1))."""
        if len(self._known) > 2 * len(ids) + 1000:
            queued = set(ids)
            self._known = {i: v for i, v in self._known.items() if i in queued}
            self._group = {i: v for i, v in self._group.items() if i in queued}


class Queues:
    """Every Gitea instance's queue (`decide.instances`): each has keys of its own, and is read round
    after round for the groups that serve that instance."""

    def __init__(self, store: JobStore, named: Mapping[str, str]) -> None:
        self.named = named
        self.demand = {name: Demand(store.of(name)) for name in ("", *named)}
        self._indexes = {name: CachedIndex() for name in self.demand}
        self._instance_of: dict[Key, str] = {}  # each group's instance, as of the last round

    @property
    def unmatched(self) -> int:
        """The last round's queued jobs no group of their instance matches."""
        return sum(d.unmatched for d in self.demand.values())

    @property
    def held(self) -> int:
        """Jobs the instances hold `waiting`."""
        return sum(d.held for d in self.demand.values())

    async def read(
        self, valid: Iterable[tuple[str, str, RunnerGroupSpec]], standing: Standing = EVERY_PROVEN
    ) -> dict[Key, GroupDemand]:
        """Every group's queued jobs now, from the queue of the instance it serves (`Demand.read`), given
        to the groups as they stand (`Standing`: none to a group whose scope is not proven)."""
        served: dict[str, list[tuple[str, str, RunnerGroupSpec]]] = {name: [] for name in self.demand}
        self._instance_of = {}
        for namespace, name, spec in valid:
            instance = self._instance_of[(namespace, name)] = instance_of(spec.gitea.url, self.named)
            served[instance].append((namespace, name, spec))
        out: dict[Key, GroupDemand] = {}
        for instance, reader in self.demand.items():
            out |= await reader.read(self._indexes[instance].of(served[instance], standing))
        return out

    async def observations(self, group_of_runner: Mapping[str, Key]) -> list[tuple[Key, Observation]]:
        """The facts each instance's receivers recorded about runners of its own groups (a runner took a
        job, its job completed), each taken by one replica only; facts naming any other runner (another
        instance's, or none of ours) are dropped."""
        out: list[tuple[Key, Observation]] = []
        for instance, reader in self.demand.items():
            for fact in await reader.store.observations():
                key = group_of_runner.get(fact.runner)
                if key is not None and self._instance_of.get(key) == instance:
                    out.append((key, fact))
        return out


async def observe(queues: Queues, group_of_runner: Mapping[str, Key], metrics: Metrics) -> None:
    """Turn the facts the receivers recorded (a runner took a job, a job completed) into the metrics
    of the runner's group. Each fact is taken by one replica only, so sums across replicas count
    each job once; facts about runners that are not ours, or not of that Gitea instance's groups, are
    dropped (`Queues.observations`)."""
    try:
        facts = await queues.observations(group_of_runner)
    except Exception as exc:  # the metrics wait for Redis; the round does not
        log.warning("observations unavailable", extra={"error": repr(exc)})
        return
    for key, fact in facts:
        group = f"{key[0]}/{key[1]}"
        if fact.kind == "picked":
            metrics.queue_wait.labels(group=group).observe(fact.seconds)
            continue
        metrics.jobs_completed.labels(group=group, conclusion=fact.conclusion or "unknown").inc()
        if fact.seconds >= 0:
            metrics.run_seconds.labels(group=group).observe(fact.seconds)
