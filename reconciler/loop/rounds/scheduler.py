"""When each group's pass runs: one task per group, leases across replicas, retries by error kind.

Owns: starting a group's pass unless one runs (then it runs again after), skipping quiet groups,
the per-group lease, invalid specs (status and one Event per generation), and failures: transient
ones are retried with backoff and no Event; a permanent one sets `Ready=False ReconcileFailed`, sends
one Event, and stops the group's passes until its spec or annotations change.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from reconciler.decide.plan import Counts
from reconciler.decide.status import desired_status, failing, pass_fields
from reconciler.kube.api import Kube
from reconciler.kube.objects import GroupObject
from reconciler.loop.passes.group_pass import GroupPass
from reconciler.loop.retiring import drain
from reconciler.loop.rounds.demand import GroupDemand
from reconciler.loop.rounds.errors import kind_of
from reconciler.loop.rounds.group_views import validate
from reconciler.loop.state import GroupState
from reconciler.metrics import Metrics
from reconciler.model.spec import RunnerGroupSpec
from reconciler.settings import Settings
from webhook_scaler.store.jobs.model import QueuedJob
from webhook_scaler.store.seats.coordination import Coordination

log = logging.getLogger(__name__)
FAILING_AFTER = 4  # transient failures in a row (their backoff reaching 4 x retry_initial) before the status says so


class Scheduler:
    """The pass tasks of every group of one controller."""

    def __init__(
        self,
        settings: Settings,
        *,
        kube: Kube,
        coordination: Coordination,
        group_pass: GroupPass,
        metrics: Metrics,
        wake: Callable[[], None],
        keep: Callable[[asyncio.Task[None]], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.kube = kube
        self.coordination = coordination
        self.group_pass = group_pass
        self.metrics = metrics
        self.wake = wake
        self.keep = keep  # keeps a background task until it ends (the controller awaits it at exit)
        self.clock = clock
        self.state: dict[tuple[str, str], GroupState] = {}

    def state_of(self, group: GroupObject) -> GroupState:
        """What is remembered of a group."""
        return self.state.setdefault((group.namespace, group.name), GroupState())

    def start(self, group: GroupObject, spec: RunnerGroupSpec | None, problem: str, demand: GroupDemand) -> None:
        """Start the group's pass now, unless one runs (it runs again after), or it waits or is quiet."""
        state = self.state_of(group)
        if state.task is not None and not state.task.done():
            state.again = True
            return
        if self._overdue(group, state):
            state.task = asyncio.create_task(self._give_up(group, state))
            return
        if state.stopped is not None:
            if state.stopped[0] == _version(group):
                return  # a permanent error: nothing changes until the group does
            state.stopped = None
        if state.retry_at > time.monotonic() or self._quiet(group, spec, demand.jobs, state):
            return
        inputs = (*self._inputs(group, demand.jobs, state), demand.total)
        if not state.due and state.done_as is not None and _same(state.done_as, inputs):
            return  # nothing the last pass started from has changed: it would decide the same
        state.due = False
        state.task = asyncio.create_task(self._run(group, spec, problem, demand, state, inputs))

    def _overdue(self, group: GroupObject, state: GroupState) -> bool:
        """A deleted group past its drain deadline (`GRS_DRAIN_TIMEOUT`) whose passes fail, so the pass's own
        check of the deadline (`drain`) is never reached: its finalizer goes here."""
        late_ms = self.clock() * 1000 - self.settings.drain_timeout * 1000
        failing = state.stopped is not None or state.backoff > 0
        return group.deleting and 0 < group.deleted_ms < late_ms and failing and drain.FINALIZER in group.finalizers

    async def _give_up(self, group: GroupObject, state: GroupState) -> None:
        message = (
            f"Drain timed out ({int(self.settings.drain_timeout)} s after the deletion) while its passes failed:"
            f" {state.last_error}. Its runners are left to garbage collection and their rows to Gitea."
        )
        try:
            await self.kube.event(group.ref, kind="Warning", reason="DrainTimedOut", message=message)
            await drain.let_go(self.kube, group)
        except Exception as exc:  # the next round tries again
            log.warning("letting a timed-out group go failed", extra={"group": group.name, "error": repr(exc)})

    def due(self, changes: list[tuple[int, str, str]], group_of_runner: Mapping[str, tuple[str, str]]) -> None:
        """Runners took or finished jobs (the stream's `changes`): their groups' next passes may not
        skip, as nothing in a group's own objects or queued jobs need have changed. A runner without a
        name may be one of ours: then every group looks again."""
        for _job, state, runner in changes:
            if state in ("queued", "waiting", "gone"):
                continue  # a group's queued jobs show these
            if not runner:
                self.all_due()
                return
            key = group_of_runner.get(runner)
            if key in self.state:
                self.state[key].due = True

    def all_due(self) -> None:
        """Let no group's next pass skip (the resync)."""
        for state in self.state.values():
            state.due = True

    def _inputs(self, group: GroupObject, queued: list[QueuedJob], state: GroupState) -> tuple[object, ...]:
        """Everything a pass decides from but Redis' seats and runner activity: the group, its runner Jobs
        and their Pods (cache objects are replaced on every change), its queued jobs (`JobStore` keeps an
        unchanged job's object) and the poll's word. Seats change with Jobs; activity marks the group
        `due` (see `due`); deadlines and the resync do too."""
        jobs = self.group_pass.jobs_of(group)
        names = [*(j.name for j in jobs), *sorted(state.deleting)]  # deleted Jobs' Pods hold their seats
        pods = [p for n in names for p in self.group_pass.pods_by_job.get((group.namespace, n), ())]
        return (group, *state.reported().values(), len(jobs), *jobs, len(pods), *pods, *queued)

    def _quiet(
        self, group: GroupObject, spec: RunnerGroupSpec | None, queued: list[QueuedJob], state: GroupState
    ) -> bool:
        """A group with nothing queued, no runner Jobs, no warm pool, and its status already right has
        nothing to do: skip its pass (no lease, no Redis or API call). Most groups, most of the time."""
        if spec is None or queued or self.group_pass.jobs_of(group) or state.deleting or group.deleting:
            return False
        if spec.min_idle_runners and not spec.suspend:
            return False
        seen_as = (group, *state.reported().values())
        if state.quiet_as is not None and all(a is b for a, b in zip(state.quiet_as, seen_as, strict=True)):
            return True  # nothing changed since it was last found quiet: not even the status to compare
        status = self._status(group, spec, state, counts=Counts(active=0, idle=0, queued=0))
        quiet = status == pass_fields(group.status)
        state.quiet_as = seen_as if quiet else None
        return quiet

    def _status(self, group: GroupObject, spec: RunnerGroupSpec | None, state: GroupState, **kw: Any) -> dict[str, Any]:
        options: dict[str, Any] = {"counts": None, "invalid": "", "failed": ()} | kw
        return desired_status(
            generation=group.generation,
            previous=group.status,
            spec=spec,
            now=datetime.fromtimestamp(self.clock(), UTC),
            **state.reported(),
            **options,
        )

    async def _run(
        self,
        group: GroupObject,
        spec: RunnerGroupSpec | None,
        problem: str,
        demand: GroupDemand,
        state: GroupState,
        inputs: tuple[object, ...],
    ) -> None:
        holder = f"{self.settings.replica_id}/{uuid.uuid4().hex[:8]}"
        started = time.perf_counter()
        state.done_as = None
        try:
            if spec is None:
                await self._invalid(group, problem, state)
            else:
                lease = (holder, int(self.settings.lease_ttl * 1000))
                try:
                    decided = await self.group_pass.run(group, spec, demand.jobs, state, demand.total, lease)
                finally:
                    await self.coordination.unlock(group.uid, holder=holder)
                if decided is not None:
                    state.done_as = inputs
                else:
                    state.again = True  # another replica has it right now; look again shortly
                    await asyncio.sleep(0.05 + random.random() * 0.1)
            state.backoff, state.failing = 0.0, ""
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._failed(group, state, exc)
        finally:
            self.metrics.reconcile_seconds.observe(time.perf_counter() - started)
        if state.again:
            state.again = False
            self.wake()

    def _failed(self, group: GroupObject, state: GroupState, exc: Exception) -> None:
        kind = kind_of(exc)
        self.metrics.errors.labels(group=f"{group.namespace}/{group.name}", kind=kind).inc()
        state.last_error = str(exc)[:500] or type(exc).__name__
        extra = {"group": group.name, "namespace": group.namespace, "kind": kind, "error": state.last_error}
        if kind == "transient":
            state.backoff = min(max(state.backoff * 2, self.settings.retry_initial), self.settings.retry_max)
            state.retry_at = time.monotonic() + state.backoff
            log.warning("group pass failed; retrying", extra=extra)
            asyncio.get_running_loop().call_later(state.backoff, self.wake)
            if state.backoff >= FAILING_AFTER * self.settings.retry_initial and not state.failing:
                state.failing = f"{type(exc).__name__}: {state.last_error}"
                self.keep(asyncio.create_task(self._report_failing(group, state)))
            return
        log.error("group pass failed; stopped until the group changes", extra=extra)
        state.stopped = (_version(group), state.last_error)
        self.keep(asyncio.create_task(self._report_stop(group, state)))

    async def _report_stop(self, group: GroupObject, state: GroupState) -> None:
        status = self._status(group, _spec(group), state, error=state.last_error)
        try:
            await self.kube.patch_status(group.ref, status)
            await self.kube.event(group.ref, kind="Warning", reason="ReconcileError", message=state.last_error)
        except Exception as exc:  # reporting is best effort; the log has it
            log.warning("reporting a stop failed", extra={"error": repr(exc)})

    async def _report_failing(self, group: GroupObject, state: GroupState) -> None:
        """Say in the group's status that its passes keep failing; the next pass that succeeds says the rest."""
        now = datetime.fromtimestamp(self.clock(), UTC)
        try:
            await self.kube.patch_status(
                group.ref, failing(group.status, state.failing, now=now, generation=group.generation)
            )
        except Exception as exc:  # reporting is best effort; the log and grs_reconcile_errors have it
            log.warning("reporting failing passes failed", extra={"error": repr(exc)})

    async def _invalid(self, group: GroupObject, problem: str, state: GroupState) -> None:
        if group.deleting:  # nothing of an invalid group can be asked about: garbage collection takes it
            await drain.let_go(self.kube, group)
            return
        status = self._status(group, None, state, invalid=problem)
        if status != pass_fields(group.status):
            await self.kube.patch_status(group.ref, status)
        if state.invalid_generation != group.generation:
            state.invalid_generation = group.generation
            await self.kube.event(group.ref, kind="Warning", reason="InvalidSpec", message=problem)


def _same(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    """Whether two pass inputs are the same objects, one by one (counts: the same numbers)."""
    return len(a) == len(b) and all(x is y or (type(x) is int and x == y) for x, y in zip(a, b, strict=True))


def _version(group: GroupObject) -> tuple[int, str]:
    """What a user changes to retry a stopped group: its spec (generation) or its annotations; or its
    deletion (a deleted group is drained, stopped or not)."""
    return group.generation, repr((group.deleting, sorted(group.annotations.items())))


def _spec(group: GroupObject) -> RunnerGroupSpec | None:
    return validate(group.spec)[0]
