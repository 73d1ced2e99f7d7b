"""One group's pass: read its runners and Gitea's word on them, plan, apply the plan, report.

Owns: classifying the group's runner Jobs, the seats a pass starts from (`seating`), deleting and creating runners as
the plan says (deletions vetted by Gitea first, `vetting`), the reports and protections that follow (`disruption`,
`admission`), the group's metrics and its status write. The decisions are `plan`'s, the passes' order `controller`'s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Collection, Mapping
from datetime import UTC, datetime

from reconciler.decide.phases import Phase, Runner, classify
from reconciler.decide.plan import Create, Plan, plan
from reconciler.decide.status import desired_status, starved
from reconciler.decide.waiting import believed, waiting
from reconciler.kube.api import Kube, TransientError
from reconciler.kube.egress import DIRECT, Egress
from reconciler.kube.manifests import template_hash
from reconciler.kube.objects import GroupObject, JobObject, PodObject
from reconciler.loop.passes.admission import Admission
from reconciler.loop.passes.disruption import Budgets, report_failures
from reconciler.loop.passes.registrations import Registrations
from reconciler.loop.passes.reports import Reports
from reconciler.loop.passes.seating import Ready, Seating
from reconciler.loop.retiring.deletions import Deletions
from reconciler.loop.retiring.vetting import RunnerRows
from reconciler.loop.state import GroupState
from reconciler.metrics import Metrics
from reconciler.model.spec import RunnerGroupSpec
from reconciler.settings import Settings
from webhook_scaler.store.jobs.model import QueuedJob
from webhook_scaler.store.seats.coordination import Coordination
from webhook_scaler.store.seats.model import Activity

log = logging.getLogger(__name__)
# Gitea's word on a runner (busy since, done at; Redis' clock) counts for a runner Job only if it came
# after the Job was created (the API server's clock, to the second): a fact about an earlier runner of
# the same name (its Job gone, its name given again) says nothing about this one.
FACT_SKEW_MS = 2000
DRAIN_RECHECK_MS = 5000  # a deleted group's runners or rows not done yet, or its finalizer not written


class GroupPass:
    """Runs passes for the groups of one controller, from its caches."""

    def __init__(
        self,
        settings: Settings,
        *,
        kube: Kube,
        coordination: Coordination,
        rows: RunnerRows,
        metrics: Metrics,
        wake: Callable[[GroupState, int], None],
        reports: Reports,
        registrations: Registrations,
        clock: Callable[[], float] = time.time,
        egress: Egress = DIRECT,
    ) -> None:
        self.settings = settings
        self.reports = reports
        self.kube = kube
        self.coordination = coordination
        self.rows = rows
        self.metrics = metrics
        self.wake_at = wake  # look at the group again at this time (ms of `clock`)
        self.clock = clock
        self.create_slots = asyncio.Semaphore(settings.create_concurrency)  # shared by every group's pass
        self.seating = Seating(
            coordination, kube, registrations, claim_ttl_s=settings.claim_ttl, replica=settings.replica_id,
            egress=egress, named=settings.instances, placement=settings.placement,
        )  # fmt: skip
        self.deletions = Deletions(kube=kube, coordination=self.seating.of, rows=rows, metrics=metrics)
        self.budgets, self.admission = Budgets(kube), Admission(kube)
        self.facts_window_ms = int((2 * settings.poll_interval + 10) * 1000)
        self.jobs_by_group: Mapping[tuple[str, str], list[JobObject]] = {}
        self.pods_by_job: Mapping[tuple[str, str], list[PodObject]] = {}

    def jobs_of(self, group: GroupObject) -> list[JobObject]:
        """The group's runner Jobs in the cache."""
        return self.jobs_by_group.get((group.namespace, group.name), [])

    def _asked(self, jobs: list[JobObject]) -> list[str]:
        """The runners (by name in Gitea) to ask Gitea's word on: active Jobs', and those finished within two polls (see
        `plan._ran_unheard` and `_report_failures`: whether Gitea told of the job they ran)."""
        since = int(self.clock() * 1000) - self.facts_window_ms
        return [j.runner for j in jobs if not j.finished or j.finished_ms >= since]

    def runners(
        self, group: GroupObject, activity: Activity, spec: RunnerGroupSpec | None, asked: Collection[str] | None = None
    ) -> list[Runner]:
        """The group's runner Jobs, classified; those made from another template than `spec`'s now (see
        `manifests.template_hash`; None: none is) are outdated. A finished Job not `asked` about is taken to
        have run a job Gitea told of, if it succeeded, and not to have died during one, if it failed."""
        template = template_hash(spec, self.seating.egress, self.seating.placement.of(group.namespace)) if spec else ""
        out = []
        for job in self.jobs_of(group):
            pods = self.pods_by_job.get((job.namespace, job.name), [])
            runner = classify(
                job.name,
                job_id=job.job_id,
                created_ms=job.created_ms,
                finished=job.finished,
                reason=next((p.failure for p in pods if p.failure), job.reason),
                pod_phases=[(p.phase, p.running_since_ms) for p in pods],
                busy=_since(activity.busy_ms, job) is not None or self.rows.busy(job.namespace, job.runner),
                finished_ms=job.finished_ms,
                done_ms=_since(activity.done_ms, job),
                disruption=next((p.disruption for p in pods if p.disruption), ""),
            )
            if asked is not None and job.finished and job.runner not in asked:
                runner = dataclasses.replace(runner, heard=runner.phase is Phase.SUCCEEDED)
            outdated = bool(template and job.template and job.template != template)
            out.append(dataclasses.replace(runner, outdated=True) if outdated else runner)
        return out

    async def run(
        self,
        group: GroupObject,
        spec: RunnerGroupSpec,
        queued: list[QueuedJob],
        state: GroupState,
        total: int = -1,
        lease: tuple[str, int] | None = None,
    ) -> Plan | None:
        """Plan one group and apply the plan: `queued` are its oldest queued jobs, of `total` (-1: all).
        With a `lease` (holder, ttl ms), None if another replica has the group's lease."""
        jobs, ids = self.jobs_of(group), [q.job_id for q in queued]
        asked = self._asked(jobs)
        prepared = await self.seating.prepare(
            group, spec, jobs, state, lease=lease, runners=asked, queued=ids, lingering=self._lingering(group, state)
        )
        if prepared is None:
            return None
        ready, activity = prepared
        # The queue was read before this pass; a job a runner took since is busy in `activity`, not waiting.
        still = [q for q in queued if q.job_id in activity.queued]
        total = (len(queued) if total < 0 else total) - (len(queued) - len(still))
        runners = self.runners(group, activity, spec, asked=asked)
        now_ms = int(self.clock() * 1000)
        decided = self._plan(spec, still, total, runners, ready.in_flight, now_ms, (group, state))
        if decided.wake_at_ms is not None:
            self.wake_at(state, decided.wake_at_ms)
        kept = await self.deletions.apply(group, spec, decided.delete, state, jobs)
        # A runner whose deletion Gitea did not allow still serves its job: it gets no replacement.
        creates = tuple(c for c in decided.create if c.stale_claim not in kept) if ready.wait_until_ms is None else ()
        label = f"{group.namespace}/{group.name}"
        created, refusal = await self._creates(group, spec, creates, ready, label, state=state)
        await self._tend(group, decided, runners, state, label)
        waits = self._gauges(group, spec, decided, runners, (created, len(ready.in_flight), refusal is not None))
        await self._write_status(group, spec, decided, state, waits, min((q.queued_ms for q in still), default=None))
        if refusal is not None:
            raise refusal  # the scheduler's backoff tries again
        if not await self.deletions.hold_or_finish(group, spec, jobs, now_ms, self.settings.drain_timeout):
            self.wake_at(state, now_ms + DRAIN_RECHECK_MS)
        return decided

    def _lingering(self, group: GroupObject, state: GroupState) -> frozenset[str]:
        """Seated runner Jobs gone from the cache whose Pods are not: deleted, their Pods still stopping."""
        held = state.deleting | (state.seated or set())
        names = {j.name for j in self.jobs_of(group)}
        return frozenset(n for n in held - names if self.pods_by_job.get((group.namespace, n)))

    def _plan(
        self, spec: RunnerGroupSpec, queued: list[QueuedJob], total: int, runners: list[Runner],
        in_flight: frozenset[str], now_ms: int, of: tuple[GroupObject, GroupState],
    ) -> Plan:  # fmt: skip
        group, state = of
        polled = self.settings.poll_enabled and (state.gitea is None or state.gitea.status == "True")
        return plan(
            queued=believed(queued, polled=polled),
            queued_total=total,
            runners=runners,
            spec=spec,
            now_ms=now_ms,
            in_flight=in_flight,
            idle_grace_ms=int(self.settings.idle_grace * 1000),
            backoff_ms=(int(self.settings.runner_backoff_initial * 1000), int(self.settings.runner_backoff_max * 1000)),
            finish_grace_ms=int(self.settings.finish_grace * 1000),
            draining=group.deleting,
        )

    def _gauges(
        self,
        group: GroupObject,
        spec: RunnerGroupSpec,
        decided: Plan,
        runners: list[Runner],
        made: tuple[int, int, bool],
    ) -> dict[str, int]:
        """Set the group's gauges after a pass that made `made` = (runners created here, runners in flight
        from elsewhere, whether creates were refused); return its queued jobs by why they wait (see
        `waiting`), which its status reports too."""
        created, in_flight, refused = made
        waits = waiting(spec, decided, runners, created=created, in_flight=in_flight, refused=refused,
                        draining=group.deleting)  # fmt: skip
        label = f"{group.namespace}/{group.name}"
        self.metrics.after_pass(label, spec.max_active_runners, decided, runners, created=created, waits=waits)
        return waits

    async def _write_status(
        self, group: GroupObject, spec: RunnerGroupSpec, decided: Plan, state: GroupState, waits: dict[str, int],
        oldest_ms: int | None,
    ) -> None:  # fmt: skip
        """Write the group's status; `oldest_ms`: when its oldest queued job was queued (None: none is)."""
        age = self.clock() - oldest_ms / 1000 if oldest_ms is not None else 0.0
        objective = self.settings.queue_objective
        hungry = starved(spec, waits, oldest_wait_s=age, objective_s=objective) if objective else None
        status = desired_status(
            generation=group.generation,
            previous=group.status,
            spec=spec,
            counts=decided.counts,
            waiting=waits,
            now=datetime.fromtimestamp(self.clock(), UTC),
            invalid="",
            **state.reported(),
            failed=decided.failed,
            backoff=decided.backoff,
            unlisted=state.unlisted,
            refused=state.refused,
            create_refused=state.create_refused,
            scope=f"{spec.scope} {spec.target}".strip(),
            starved=hungry,
        )
        await self.reports.write_status(group, status, state, wake_at=self.wake_at, now=self.clock())

    async def _creates(
        self,
        group: GroupObject,
        spec: RunnerGroupSpec,
        creates: tuple[Create, ...],
        ready: Ready,
        label: str,
        *,
        state: GroupState,
    ) -> tuple[int, TransientError | None]:
        """The pass's creates: how many were made, and a refusal before anything was written (a quota, the
        API server's throttling), kept for the status and returned, not raised (the pass raises it last).
        While creates of an older seat epoch may still land, none: look again when they cannot."""
        if ready.wait_until_ms is not None:
            self.wake_at(state, int(self.clock() * 1000) + max(0, ready.wait_until_ms - ready.now_ms))
        if creates and not group.deleting and not await self.deletions.hold(group, spec):
            creates = ()  # no runner before the group has its finalizer (and its token is kept) for the drain
        jobs = self.jobs_of(group)
        taken = state.deleting | self._lingering(group, state)  # not seats alone: see `Seating.name_for`
        names = [self.seating.name_for(group, c, jobs, taken=taken) for c in creates]

        async def one(c: Create, name: str) -> str:
            async with self.create_slots:
                return await self.seating.create(group, spec, c, name, ready.epoch)

        with self.reports.creates():
            results = await asyncio.gather(
                *(one(c, n) for c, n in zip(creates, names, strict=True)), return_exceptions=True
            )
        await self.seating.confirm(spec, zip(creates, names, results, strict=True))
        made = [(c, n) for c, n, r in zip(creates, names, results, strict=True) if r == "created"]
        self._made(group, label, made)
        refused = [r for r in results if isinstance(r, TransientError) and r.refused]
        for refusal in refused:
            self.metrics.creates_refused.labels(group=label, reason=refusal.refused).inc()
        for r in results:
            if isinstance(r, BaseException) and r not in refused:
                raise r
        state.create_refused = str(refused[0]) if refused else ""
        return len(made), (refused[0] if refused else None)

    def _made(self, group: GroupObject, label: str, made: list[tuple[Create, str]]) -> None:
        """Count, log and report (one Event, later) the runners a pass created."""
        for c, name in made:
            self.metrics.runners_created.labels(group=label, reason="queued" if c.job_id else "warm").inc()
            if c.queued_ms:
                self.metrics.time_to_runner.observe(max(0.0, self.clock() - c.queued_ms / 1000))
            log.info("runner created", extra={"group": group.name, "job": name, "gitea_job_id": c.job_id})
        if made:
            self.reports.created(group.ref, [str(c.job_id) if c.job_id is not None else "warm" for c, _ in made])

    async def _tend(
        self, group: GroupObject, decided: Plan, runners: list[Runner], state: GroupState, label: str
    ) -> None:
        """Report the runners that failed and those whose Pods the API server refuses (see `admission`), and
        protect the busy ones from evictions (see `disruption`)."""
        await report_failures(group, decided.failed, state, label, self.kube, self.coordination, self.metrics)
        await self.budgets.protect(group, runners, self.jobs_of(group), state)
        now_ms = int(self.clock() * 1000)
        again = await self.admission.check(group, self.jobs_of(group), self.pods_by_job, state, now_ms)
        if again is not None:
            self.wake_at(state, again)


def _since(facts: Mapping[str, int], job: JobObject) -> int | None:
    """The time of a fact about the runner Job's runner, if it is not older than the Job."""
    at = facts.get(job.runner)
    return at if at is not None and at >= job.created_ms - FACT_SKEW_MS else None
