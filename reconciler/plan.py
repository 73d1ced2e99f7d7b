"""Pure: what one RunnerGroup should do now, from the state it is in.

Owns the scaling decision. Demand is computed from totals, never by counting events: every queued
job wants one runner that has not taken a job yet (pending or idle), plus `minIdleRunners` warm
ones; the difference to the runners that exist is created or deleted, clamped so that the group
never has more than `maxActiveRunners` runners. Which runner takes which job is Gitea's choice
(any matching runner may take any queued job), so runners are counted, not mapped to jobs; the job
a runner was started for only names it and anchors the claim that stops two replicas from starting
two runners for one job.

Runners that fail (a bad registration token, Gitea unreachable, an image that does not start) hold
the group back: after n failures in a row no runner is started until the last failure is
`min(initial * 2^(n-1), max)` old. The streak is read from the failed runner Jobs themselves (failed
after the group's last runner that took a job or finished), so every replica sees the same one and
it survives restarts; a runner that takes a job ends it. Must not do I/O, sleep, or read the clock:
`now_ms` is an argument.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from reconciler.spec import RunnerGroupSpec
from webhook_scaler.jobs import QueuedJob


class Phase(StrEnum):
    """What a runner Job is doing, classified from the Job and its Pod."""

    PENDING = "pending"  # no Pod yet, or the Pod is not running (scheduling, pulling the image)
    IDLE = "idle"  # running, not known to have taken a job
    BUSY = "busy"  # running a Gitea job
    # still running although the one job it took is over: act_runner exits within a second after a
    # job, unless Gitea removed it mid-job (a cancelled run deletes the ephemeral runner's row, and
    # the runner never hears of the cancel); after a grace it is deleted, as it serves nobody
    FINISHING = "finishing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


ACTIVE = frozenset({Phase.PENDING, Phase.IDLE, Phase.BUSY, Phase.FINISHING})


@dataclass(frozen=True, slots=True)
class Runner:
    """One runner Job of the group."""

    name: str
    phase: Phase
    since_ms: int  # when it entered its phase (creation for PENDING, pod start for IDLE)
    job_id: int | None = None  # the Gitea job it was started for (None: a warm runner)
    reason: str = ""  # why it failed, for FAILED
    finished_ms: int = 0  # when it finished, for SUCCEEDED and FAILED


def classify(
    name: str,
    *,
    job_id: int | None,
    created_ms: int,
    finished: str,
    reason: str,
    pod_phases: Sequence[tuple[str, int | None]],
    busy: bool,
    finished_ms: int = 0,
    done_ms: int | None = None,
) -> Runner:
    """A runner's phase from its Job's finish condition, its Pods' (phase, running-since) and Gitea's word
    (`busy`: it runs a job; `done_ms`: when the job it took completed)."""
    if finished == "Complete":
        return Runner(name, Phase.SUCCEEDED, created_ms, job_id, finished_ms=finished_ms or created_ms)
    if finished == "Failed":
        return Runner(name, Phase.FAILED, created_ms, job_id, reason or "Failed", finished_ms or created_ms)
    running = [since for phase, since in pod_phases if phase == "Running"]
    if busy:
        return Runner(name, Phase.BUSY, min((s for s in running if s), default=created_ms), job_id)
    if running and done_ms is not None:
        return Runner(name, Phase.FINISHING, done_ms, job_id)
    if running:
        return Runner(name, Phase.IDLE, min((s for s in running if s), default=created_ms), job_id)
    if any(phase == "Succeeded" for phase, _ in pod_phases):
        # The runner exited 0 after its one job; the Job's Complete condition follows shortly.
        return Runner(name, Phase.SUCCEEDED, created_ms, job_id)
    return Runner(name, Phase.PENDING, created_ms, job_id)


@dataclass(frozen=True, slots=True)
class Create:
    """Start a runner, for a queued job (claimed first) or as a warm one (`job_id` None)."""

    job_id: int | None
    queued_ms: int | None = None
    stale_claim: str | None = None  # a claim held by a runner that failed or finished: replace it
    attempt: int = 0  # the attempt of the job the runner will run (names it)


@dataclass(frozen=True, slots=True)
class Delete:
    """Delete a runner Job."""

    name: str
    reason: str  # pending_timeout | surplus_idle | job_over
    job_id: int | None = None


@dataclass(frozen=True, slots=True)
class Backoff:
    """Runners that failed in a row, and when the next may start."""

    failures: int
    retry_at_ms: int
    last: Runner


def backoff(runners: Sequence[Runner], *, initial_ms: int, max_ms: int) -> Backoff | None:
    """The group's failure streak: runners failed since the last one that took a job or finished."""
    ok_ms = max(
        (r.finished_ms if r.phase is Phase.SUCCEEDED else r.since_ms for r in runners if r.phase in _PROVEN),
        default=0,
    )
    failed = sorted((r for r in runners if r.phase is Phase.FAILED and r.finished_ms > ok_ms), key=_finished)
    if not failed:
        return None
    delay = min(initial_ms * 2 ** min(len(failed) - 1, 30), max_ms)
    return Backoff(len(failed), failed[-1].finished_ms + delay, failed[-1])


_PROVEN = frozenset({Phase.BUSY, Phase.SUCCEEDED})


def _finished(r: Runner) -> tuple[int, str]:
    return r.finished_ms, r.name


@dataclass(frozen=True, slots=True)
class Counts:
    """The numbers the group's status reports."""

    active: int
    idle: int
    queued: int


@dataclass(frozen=True, slots=True)
class Plan:
    """What to create and delete, what to report, and which failed runners to tell about."""

    create: tuple[Create, ...]
    delete: tuple[Delete, ...]
    counts: Counts
    failed: tuple[Runner, ...]
    backoff: Backoff | None = None  # the failure streak, if any
    held: bool = False  # True while the backoff stops new runners
    # when this plan may change with nothing else happening: a runner becomes deletable (idle past the
    # idle grace, pending past its timeout, running past the finish grace) or the backoff ends
    wake_at_ms: int | None = None


def plan(
    *,
    queued: Sequence[QueuedJob],
    runners: Sequence[Runner],
    spec: RunnerGroupSpec,
    now_ms: int,
    in_flight: frozenset[str] = frozenset(),
    idle_grace_ms: int = 60_000,
    backoff_ms: tuple[int, int] = (10_000, 300_000),
    finish_grace_ms: int = 30_000,
) -> Plan:
    """Decide one pass for one group.

    `queued`: the queued jobs assigned to this group; `runners`: its runner Jobs; `in_flight`: names of
    runners created (by any replica) that the caller's cache does not show yet; `backoff_ms`: the
    first and the longest wait after failed runners; `finish_grace_ms`: how long a runner may keep
    running after its job is over.
    """
    streak = backoff(runners, initial_ms=backoff_ms[0], max_ms=backoff_ms[1])
    held = streak is not None and now_ms < streak.retry_at_ms
    active = [r for r in runners if r.phase in ACTIVE]
    pending_limit = spec.pending_timeout_seconds * 1000
    delete = _reaped(active, now_ms=now_ms, pending_limit=pending_limit, finish_grace_ms=finish_grace_ms)
    reaped = {d.name for d in delete}
    spare = [r for r in active if r.phase in (Phase.PENDING, Phase.IDLE) and r.name not in reaped]
    active_count = len(active) - len(reaped) + len(in_flight)

    wanting, served_elsewhere = _wanting(queued, runners, reaped, in_flight)
    demand = 0 if spec.suspend else len(queued) - served_elsewhere + spec.min_idle_runners
    surplus = len(spare) + len(in_flight) - demand
    idle = sorted((r for r in spare if r.phase is Phase.IDLE), key=lambda r: (r.since_ms, r.name))
    for r in idle:
        if surplus <= 0:
            break
        if now_ms - r.since_ms >= idle_grace_ms:
            delete.append(Delete(r.name, "surplus_idle", r.job_id))
            active_count -= 1
            surplus -= 1

    create: list[Create] = []
    if not spec.suspend and not held and surplus < 0:
        wanted = min(-surplus, spec.max_active_runners - active_count)
        create = wanting[: max(0, wanted)]
        create.extend(Create(None) for _ in range(max(0, wanted - len(create))))

    failed = tuple(r for r in runners if r.phase is Phase.FAILED)
    deleted = {d.name for d in delete}
    counts = Counts(
        active=max(0, active_count + len(create)),
        idle=sum(1 for r in spare if r.phase is Phase.IDLE and r.name not in deleted),
        queued=len(queued),
    )
    limits = {Phase.IDLE: idle_grace_ms, Phase.PENDING: pending_limit, Phase.FINISHING: finish_grace_ms}
    deadlines = [r.since_ms + limits[r.phase] for r in active if r.phase in limits and r.name not in reaped]
    if held and streak is not None:
        deadlines.append(streak.retry_at_ms)
    return Plan(
        create=tuple(create),
        delete=tuple(delete),
        counts=counts,
        failed=failed,
        backoff=streak,
        held=held,
        wake_at_ms=min((d for d in deadlines if d > now_ms), default=None),
    )


def _reaped(active: Sequence[Runner], *, now_ms: int, pending_limit: int, finish_grace_ms: int) -> list[Delete]:
    """Runners Pending past the pendingTimeout, and runners still up past the grace after their job."""
    delete: list[Delete] = []
    for r in active:
        if r.phase is Phase.PENDING and now_ms - r.since_ms > pending_limit:
            delete.append(Delete(r.name, "pending_timeout", r.job_id))
        elif r.phase is Phase.FINISHING and now_ms - r.since_ms > finish_grace_ms:
            delete.append(Delete(r.name, "job_over", r.job_id))
    return delete


def _wanting(
    queued: Sequence[QueuedJob], runners: Sequence[Runner], reaped: set[str], in_flight: frozenset[str]
) -> tuple[list[Create], int]:
    """The runners the queued jobs want, oldest job first, and how many jobs another runner serves.

    A job wants a runner unless an active runner of the group was started for it, or its claim is
    held by a runner being created (`in_flight`) or by one this group does not have (another group's,
    after the job moved): those jobs are served, and want no warm runner in their place either. A
    claim held by a runner that ended, or is being reaped, is replaced.
    """
    by_name = {r.name: r for r in runners}
    started_for = {r.job_id for r in runners if r.phase in ACTIVE and r.name not in reaped}
    wanting: list[Create] = []
    served_elsewhere = 0
    for job in sorted(queued, key=lambda j: (j.queued_ms, j.job_id)):
        holder = by_name.get(job.claimed_by or "")
        if job.job_id in started_for:
            continue
        if job.claimed_by is None:
            wanting.append(Create(job.job_id, job.queued_ms, attempt=job.generation))
        elif holder is not None and (holder.phase not in ACTIVE or holder.name in reaped):
            wanting.append(Create(job.job_id, job.queued_ms, stale_claim=job.claimed_by, attempt=job.generation))
        elif holder is None and job.claimed_by not in in_flight:
            served_elsewhere += 1
    return wanting, served_elsewhere
