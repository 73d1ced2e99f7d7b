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
it survives restarts; a runner that takes a job ends it. One Kubernetes stopped (evicted, preempted,
its node lost: `Runner.disruption`) neither counts nor ends it. No I/O, sleep or clock: `now_ms` is given.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from reconciler.decide.phases import ACTIVE, Phase, Runner
from reconciler.model.spec import RunnerGroupSpec
from webhook_scaler.store.jobs.model import QueuedJob


@dataclass(frozen=True, slots=True)
class Create:
    """Start a runner, for a queued job (claimed first) or as a warm one (`job_id` None)."""

    job_id: int | None
    queued_ms: int | None = None
    stale_claim: str | None = None  # a claim held by a runner that failed or finished: replace it
    attempt: int = 0  # the attempt of the job the runner will run (names it)
    about: QueuedJob | None = field(default=None, compare=False)  # that job, as recorded (`attribution`)


@dataclass(frozen=True, slots=True)
class Delete:
    """Delete a runner Job."""

    name: str
    reason: str  # pending_timeout | surplus_idle | job_over | outdated (its spec changed) | drain (group deleted)
    job_id: int | None = None


@dataclass(frozen=True, slots=True)
class Backoff:
    """Runners that failed in a row, and when the next may start."""

    failures: int
    retry_at_ms: int
    last: Runner


def backoff(runners: Sequence[Runner], *, initial_ms: int, max_ms: int) -> Backoff | None:
    """The group's failure streak: runners failed (not stopped by Kubernetes) since one took a job or finished."""
    proven = (r.finished_ms if r.phase is Phase.SUCCEEDED else r.since_ms for r in runners if r.phase in _PROVEN)
    ok_ms = max(proven, default=0)
    failed = sorted((r for r in runners if r.phase is Phase.FAILED and not r.disruption and r.finished_ms > ok_ms),
                    key=_finished)  # fmt: skip
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
    queued_total: int = -1,
    draining: bool = False,
) -> Plan:
    """Decide one pass for one group. `queued`: its queued jobs (its oldest, if it has `queued_total`
    in all; -1: these are all); `runners`: its runner Jobs; `in_flight`: runners created (by any
    replica) that the caller's cache does not show yet; `backoff_ms`: the first and the longest wait
    after failed runners; `finish_grace_ms`: how long a runner may keep running after its job is over;
    `draining`: the group is being deleted: no runner starts, every one that took no job goes at once."""
    streak = backoff(runners, initial_ms=backoff_ms[0], max_ms=backoff_ms[1])
    held = streak is not None and now_ms < streak.retry_at_ms
    active = [r for r in runners if r.phase in ACTIVE]
    pending_limit = spec.pending_timeout_seconds * 1000
    expired = _reaped(active, now_ms=now_ms, pending_limit=pending_limit, finish_grace_ms=finish_grace_ms)
    sizing = _Sizing(spec=spec, held=held, in_flight=in_flight, now_ms=now_ms, idle_grace_ms=idle_grace_ms)
    create, delete, counts = (
        _drained(active, expired, len(queued)) if draining else _sized(queued, runners, expired, sizing)
    )
    counts = replace(counts, queued=queued_total) if queued_total >= 0 else counts
    limits = {Phase.IDLE: idle_grace_ms, Phase.PENDING: pending_limit, Phase.FINISHING: finish_grace_ms}
    return Plan(
        create=tuple(create),
        delete=tuple(delete),
        counts=counts,
        failed=tuple(r for r in runners if r.phase is Phase.FAILED),
        backoff=streak,
        held=held,
        wake_at_ms=_wake_at(active, expired, limits, holding=streak if held else None, now_ms=now_ms),
    )


def _drained(
    active: Sequence[Runner], expired: Sequence[Delete], queued: int
) -> tuple[list[Create], list[Delete], Counts]:
    """A group being deleted: no runner starts, and every one that took no job goes now."""
    reaped = {d.name for d in expired}
    spare = [r for r in active if r.phase in (Phase.PENDING, Phase.IDLE) and r.name not in reaped]
    delete = [*expired, *(Delete(r.name, "drain", r.job_id) for r in spare)]
    return [], delete, Counts(active=len(active) - len(delete), idle=0, queued=queued)


def _wake_at(
    active: Sequence[Runner],
    expired: Sequence[Delete],
    limits: dict[Phase, int],
    *,
    holding: Backoff | None,
    now_ms: int,
) -> int | None:
    """The first deadline still ahead: a runner not reaped reaching its phase's limit, or the end of the
    backoff that is `holding` the group back."""
    reaped = {d.name for d in expired}
    deadlines = [r.since_ms + limits[r.phase] for r in active if r.phase in limits and r.name not in reaped]
    if holding is not None:
        deadlines.append(holding.retry_at_ms)
    return min((d for d in deadlines if d > now_ms), default=None)


@dataclass(frozen=True, slots=True)
class _Sizing:
    """What sizes a group besides its jobs and runners: its spec, the backoff, creates in flight, time."""

    spec: RunnerGroupSpec
    held: bool
    in_flight: frozenset[str]
    now_ms: int
    idle_grace_ms: int


def _sized(
    queued: Sequence[QueuedJob], runners: Sequence[Runner], expired: Sequence[Delete], sizing: _Sizing
) -> tuple[list[Create], list[Delete], Counts]:
    """The group sized to its demand once the `expired` runners go: the runners to create (none while
    suspended or `held`), every runner to delete (the expired ones, then surplus idle ones), the counts."""
    spec, in_flight = sizing.spec, sizing.in_flight
    active = [r for r in runners if r.phase in ACTIVE]
    delete = list(expired)
    reaped = {d.name for d in delete}
    spare = [r for r in active if r.phase in (Phase.PENDING, Phase.IDLE) and r.name not in reaped]
    active_count = len(active) - len(reaped) + len(in_flight)
    wanting, served = _wanting(queued, runners, reaped, in_flight)
    demand = 0 if spec.suspend else len(queued) - len(served) + spec.min_idle_runners
    surplus = len(spare) + len(in_flight) - demand
    idle = _surplus_idle(spare, surplus=surplus, now_ms=sizing.now_ms, idle_grace_ms=sizing.idle_grace_ms)
    delete.extend(idle)
    active_count -= len(idle)
    surplus -= len(idle)
    create: list[Create] = []
    gone = {j.job_id for j in served}
    doubt = _ran_unheard([j for j in queued if j.job_id not in gone], runners, served=served, now_ms=sizing.now_ms)
    if not spec.suspend and not sizing.held and surplus + doubt < 0:
        wanted = min(-surplus - doubt, spec.max_active_runners - active_count)
        create = wanting[: max(0, wanted)]
        create.extend(Create(None) for _ in range(max(0, wanted - len(create))))
    deleted = {d.name for d in delete}
    counts = Counts(
        active=max(0, active_count + len(create)),
        idle=sum(1 for r in spare if r.phase is Phase.IDLE and r.name not in deleted),
        queued=len(queued),
    )
    return create, delete, counts


def _ran_unheard(
    queued: Sequence[QueuedJob], runners: Sequence[Runner], *, served: Sequence[QueuedJob], now_ms: int
) -> int:
    """How many of the `queued` jobs runners may have run unheard of: an ephemeral runner that exited 0
    ran one job, and if no webhook or poll told which, it may be any job known queued before it finished
    and not listed queued by a poll begun after (+1 s: a Job's finish time has whole seconds). They get no
    new runner until a poll tells (`missed`, or listed again). A runner holding the claim of a job
    `served` elsewhere is taken to have run that one."""
    holders = {j.claimed_by for j in served}
    unheard = [r for r in runners if r.phase is Phase.SUCCEEDED and not r.heard and r.name not in holders]
    # each job from when a runner may have run it: known queued, and not listed queued since
    since = deque(sorted(max(j.queued_ms, (j.listed_ms or 0) - 1000) for j in queued))
    doubt = 0
    for finished in sorted(r.finished_ms or now_ms for r in unheard):  # one job each: the first it may have run
        if since and since[0] <= finished:
            since.popleft()
            doubt += 1
    return doubt


def _surplus_idle(spare: Sequence[Runner], *, surplus: int, now_ms: int, idle_grace_ms: int) -> list[Delete]:
    """The idle runners past the idle grace to delete, longest idle first, `surplus` at most."""
    delete: list[Delete] = []
    idle = sorted((r for r in spare if r.phase is Phase.IDLE), key=lambda r: (r.since_ms, r.name))
    for r in idle:
        if surplus - len(delete) <= 0:
            break
        if now_ms - r.since_ms >= idle_grace_ms:
            delete.append(Delete(r.name, "surplus_idle", r.job_id))
    return delete


def _reaped(active: Sequence[Runner], *, now_ms: int, pending_limit: int, finish_grace_ms: int) -> list[Delete]:
    """Runners Pending past the pendingTimeout, runners still up past the grace after their job, and
    runners that took no job made from a spec the group no longer has (each gets a current one)."""
    delete: list[Delete] = []
    for r in active:
        if r.phase is Phase.PENDING and now_ms - r.since_ms > pending_limit:
            delete.append(Delete(r.name, "pending_timeout", r.job_id))
        elif r.outdated and r.phase in (Phase.PENDING, Phase.IDLE):
            delete.append(Delete(r.name, "outdated", r.job_id))
        elif r.phase is Phase.FINISHING and now_ms - r.since_ms > finish_grace_ms:
            delete.append(Delete(r.name, "job_over", r.job_id))
    return delete


def _wanting(
    queued: Sequence[QueuedJob], runners: Sequence[Runner], reaped: set[str], in_flight: frozenset[str]
) -> tuple[list[Create], list[QueuedJob]]:
    """The runners the queued jobs want, oldest job first, and the jobs another runner serves.

    A job wants a runner unless an active runner of the group was started for it, or its claim is
    held by a runner being created (`in_flight`) or by one this group does not have (another group's,
    after the job moved): those jobs are served, and want no warm runner in their place either. A
    claim held by a runner that failed, or is being reaped, is replaced. So is one held by a runner
    that succeeded, but only once a poll begun after it finished still listed the job queued: an
    ephemeral runner exits 0 after running a job, most likely this one, whose webhooks were lost.
    A job the latest complete listing of its scope missed is most likely gone too (taken or cancelled
    with its webhooks lost; it is marked gone at the next miss): it wants no runner, and its own
    runner, if not busy, counts as spare for the others.
    """
    by_name = {r.name: r for r in runners}
    started_for = {r.job_id for r in runners if r.phase in ACTIVE and r.name not in reaped}
    wanting: list[Create] = []
    served: list[QueuedJob] = []
    for job in sorted(queued, key=lambda j: (j.queued_ms, j.job_id)):
        holder = by_name.get(job.claimed_by or "")
        if job.missed:
            served.append(job)
            continue
        if job.job_id in started_for:
            continue
        if job.claimed_by is None:
            wanting.append(Create(job.job_id, job.queued_ms, attempt=job.generation, about=job))
        elif holder is not None and holder.phase is Phase.SUCCEEDED and not _listed_after(job, holder):
            served.append(job)
        elif holder is not None and (holder.phase not in ACTIVE or holder.name in reaped):
            wanting.append(Create(job.job_id, job.queued_ms, job.claimed_by, job.generation, job))  # stale claim
        elif holder is None and job.claimed_by not in in_flight:
            served.append(job)
    return wanting, served


def _listed_after(job: QueuedJob, holder: Runner) -> bool:
    """Whether a poll begun after `holder` finished listed the job queued (the Job's finish time has
    whole seconds, so the poll must begin a second later to count)."""
    return job.listed_ms is not None and job.listed_ms > holder.finished_ms + 1000
