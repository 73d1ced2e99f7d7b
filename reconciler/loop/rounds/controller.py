"""The controller: wakes on Redis and Kubernetes events and on timers, and runs each group's pass.

Owns: the wake-ups (the Redis stream, informer events, resync and per-group deadline timers), reading
demand once per round and giving each queued job to one group (`assign`), one task per RunnerGroup so
that one group's error or slow API call never stalls another, per-group leases so replicas take turns
on a group (an economy: the invariants rest on claims, names and seats, see `coordination`), errors by
kind (`errors`), and the metrics of facts the receivers recorded. A pass itself is `group_pass`'s; the
Gitea poll and the ghost sweep are `poller`'s; the managed webhooks `webhooks`'.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from reconciler.decide.instances import View
from reconciler.decide.plan import Plan
from reconciler.gitea.api import GiteaClient
from reconciler.gitea.register import Registrar, registrar_of
from reconciler.kube.api import Kube
from reconciler.kube.egress import DIRECT, Egress
from reconciler.kube.informers import caches
from reconciler.kube.objects import GroupObject, JobObject, PodObject
from reconciler.loop.passes.group_pass import GroupPass
from reconciler.loop.passes.registrations import Registrations
from reconciler.loop.passes.reports import Reports
from reconciler.loop.retiring.vetting import RunnerRows
from reconciler.loop.rounds.demand import NONE, Queues, observe
from reconciler.loop.rounds.errors import kind_of
from reconciler.loop.rounds.group_views import GroupViews, contained
from reconciler.loop.rounds.poller import Poller
from reconciler.loop.rounds.proofs import GiteaProver, Ownership, Prover
from reconciler.loop.rounds.scheduler import Scheduler
from reconciler.loop.rounds.webhooks import Webhooks
from reconciler.loop.state import GroupState
from reconciler.metrics import Metrics
from reconciler.model.spec import RunnerGroupSpec
from reconciler.settings import Settings
from reconciler.tasks import run_together
from webhook_scaler.store.jobs.model import QueuedJob
from webhook_scaler.store.jobs.records import JobStore
from webhook_scaler.store.seats.coordination import HEARTBEAT_S, Coordination

log = logging.getLogger(__name__)


class Controller:
    """Runs every RunnerGroup of the watched namespace(s)."""

    def __init__(
        self,
        settings: Settings,
        *,
        kube: Kube,
        store: JobStore,
        gitea: GiteaClient,
        metrics: Metrics,
        clock: Callable[[], float] = time.time,
        egress: Egress = DIRECT,
        registrar: Registrar | None = None,
        prover: Prover | None = None,
    ) -> None:
        self.settings = settings
        self.kube = kube
        self.store = store
        self.metrics = metrics
        self.clock = clock
        self.wake = asyncio.Event()
        self.groups, self.jobs, self.pods = caches(kube, self.wake.set)
        self.group_views = GroupViews(settings, metrics=metrics, groups=lambda: self.groups.items.values())
        self.rounds = 0
        self.coordination = Coordination(store.redis, prefix=store.prefix)
        self.rows = RunnerRows(gitea, kube, metrics)
        self.group_pass = self._group_pass(
            Registrations(kube, registrar or registrar_of(gitea, timeout=settings.register_timeout)), egress
        )
        self.scheduler = self._scheduler()
        self.state = self.scheduler.state
        self.poller = self._poller(gitea)
        self._group_of_runner: dict[str, tuple[str, str]] = {}  # runner name in Gitea -> (namespace, group)
        self.queues = Queues(store, settings.instances)
        self.ownership = Ownership(settings, kube=kube, prover=prover or GiteaProver(gitea), metrics=metrics,
                                   views=self.views, wake=self.wake.set, clock=clock)  # fmt: skip
        self.webhooks = Webhooks(settings, gitea=gitea, ownership=self.ownership, views=self.views,
                                 state_of=self.state_of, wake=self.wake.set)  # fmt: skip
        self._background: set[asyncio.Task[None]] = set()

    def _group_pass(self, registrations: Registrations, egress: Egress) -> GroupPass:
        """The group passes; built after the caches and `rows`, before the scheduler that starts them."""
        return GroupPass(
            self.settings,
            kube=self.kube,
            coordination=self.coordination,
            rows=self.rows,
            metrics=self.metrics,
            wake=self._wake_at,
            reports=Reports(self.kube, self._keep, self.wake.set),
            registrations=registrations,
            clock=self.clock,
            egress=egress,
        )

    def _scheduler(self) -> Scheduler:
        """The scheduler of the group passes; built after `group_pass`, which it starts."""
        return Scheduler(
            self.settings,
            kube=self.kube,
            coordination=self.coordination,
            group_pass=self.group_pass,
            metrics=self.metrics,
            wake=self.wake.set,
            keep=self._keep,
            clock=self.clock,
        )

    def _poller(self, gitea: GiteaClient) -> Poller:
        """The Gitea poll and the ghost sweep; built after the caches, `rows` and the scheduler it reads."""
        return Poller(
            self.settings,
            kube=self.kube,
            store=self.store,
            coordination=self.coordination,
            gitea=gitea,
            rows=self.rows,
            views=self.views,
            state_of=self.scheduler.state_of,
            wake=self.wake.set,
            jobs=lambda: self.jobs.items,
            metrics=self.metrics,
        )

    def state_of(self, group: GroupObject) -> GroupState:
        """What the controller remembers of a group."""
        return self.scheduler.state_of(group)

    # -- the main loop ----------------------------------------------------------------------------
    async def run(self) -> None:
        """Run the informers, the wake-up sources and the reconcile loop until cancelled.

        Every task it started has ended when it returns or raises: the group passes too, so no lease or
        claim is left mid-write by a stopped replica. A task that ends on its own is a bug; it is raised.
        """
        workers = [asyncio.create_task(i.run(), name=f"informer-{i.name}") for i in (self.groups, self.jobs, self.pods)]
        workers.append(asyncio.create_task(self._follow_redis(), name="follow-redis"))
        workers.append(asyncio.create_task(self._resync(), name="resync"))
        workers.append(asyncio.create_task(self._beat_forever(), name="heartbeat"))
        if self.settings.poll_enabled:
            workers.append(asyncio.create_task(self._after_sync(self.poller.poll_forever), name="poll"))
        if self.settings.ghost_sweep_interval:
            workers.append(asyncio.create_task(self._after_sync(self.poller.sweep_forever), name="ghost-sweep"))
        workers.append(asyncio.create_task(self.group_views.read_schema(self.kube, self.wake.set), name="pod-schema"))
        workers.append(asyncio.create_task(self._after_sync(self.ownership.prove_forever), name="proofs"))
        if self.settings.webhook_manage:
            workers.append(asyncio.create_task(self._after_sync(self.webhooks.manage_forever), name="webhooks"))
        workers.append(asyncio.create_task(self._after_sync(self._reconcile_forever), name="reconcile"))
        await run_together(workers, what="controller", also=self._passes_and_background)

    def _passes_and_background(self) -> list[asyncio.Task[None]]:
        return [*(s.task for s in self.state.values() if s.task is not None), *self._background]

    async def _after_sync(self, work: Callable[[], Any]) -> None:
        for informer in (self.groups, self.jobs, self.pods):
            await informer.synced.wait()
        await work()

    async def _reconcile_forever(self) -> None:
        await self.group_views.schema_tried.wait()
        await self.ownership.tried.wait()  # so that no group is reported unproven while the first proofs are asked
        log.info("caches synced; reconciling")
        while True:
            await self.wake.wait()
            self.wake.clear()
            try:
                await self.reconcile_all()
            except Exception as exc:  # reading the queue failed: Redis is down or failing over
                log.warning("reconcile round failed", extra={"error": repr(exc), "kind": kind_of(exc)})
                await asyncio.sleep(self.settings.retry_initial)
                self.wake.set()

    async def _follow_redis(self) -> None:
        last = "$"
        while True:
            try:
                last, changes = await self.store.wait(last, block_ms=1000)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("redis stream unavailable", extra={"error": repr(exc)})
                await asyncio.sleep(self.settings.retry_initial)
                continue
            if changes:
                self.scheduler.due(changes, self._group_of_runner)
                self.wake.set()

    async def _beat_forever(self) -> None:
        """Keep this process's heartbeat, so that its seats are not taken for abandoned ones."""
        seating = self.group_pass.seating
        while True:
            try:
                await seating.coordination.heartbeat(seating.taker)
            except Exception as exc:  # Redis is down: nobody can free seats either
                log.warning("heartbeat failed", extra={"error": repr(exc)})
            await asyncio.sleep(HEARTBEAT_S)

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.settings.resync_interval)
            self.scheduler.all_due()
            self.wake.set()

    def _wake_at(self, state: GroupState, at_ms: int) -> None:
        """Look again at the group's next deadline (nothing else would wake the controller then). One
        timer per group, moved when a pass finds an earlier deadline, so that passes do not pile up timers."""
        now_ms = int(self.clock() * 1000)
        timer = state.timer
        if timer is not None and not timer.cancelled() and now_ms <= state.timer_at_ms <= at_ms:
            return  # the timer that is set fires first anyway
        if timer is not None:
            timer.cancel()
        state.timer_at_ms = at_ms
        state.timer = asyncio.get_running_loop().call_later(max(0, at_ms - now_ms) / 1000 + 0.05, self._deadline, state)

    def _deadline(self, state: GroupState) -> None:
        state.due = True
        self.wake.set()

    # -- one round --------------------------------------------------------------------------------
    def views(self) -> list[View[GroupObject]]:
        """Every group with its validated spec, or None and why (see `group_views`)."""
        return self.ownership.pinned(self.group_views())

    def index(self) -> None:
        """Runner Jobs by group and Pods by Job, once per round, so a round is linear in groups + Jobs."""
        jobs: dict[tuple[str, str], list[JobObject]] = {}
        group_of_runner: dict[str, tuple[str, str]] = {}
        for job in self.jobs.items.values():
            jobs.setdefault((job.namespace, job.group), []).append(job)
            group_of_runner[job.runner] = (job.namespace, job.group)
        pods: dict[tuple[str, str], list[PodObject]] = {}
        for pod in self.pods.items.values():
            pods.setdefault((pod.namespace, pod.job_name), []).append(pod)
        self.group_pass.jobs_by_group, self.group_pass.pods_by_job = jobs, pods
        self._group_of_runner = group_of_runner

    async def reconcile_all(self) -> None:
        """Read demand once (`demand`: each queued job goes to one group), and start each group's pass."""
        self.rounds += 1
        started = time.perf_counter()
        views = self.views()
        self.index()
        valid = [(g.namespace, g.name, spec) for g, spec, _ in views if spec is not None]
        demand = await self.queues.read(valid, self.ownership.standing(views, self.state_of))
        self.metrics.queue_wide(unmatched=self.queues.unmatched, held=self.queues.held)
        for group, spec, problem in views:
            try:
                self.scheduler.start(group, spec, problem, demand.get((group.namespace, group.name), NONE))
            except Exception as exc:  # what one group brings never stops the round of the others
                contained(self.metrics, group, "round", exc)
        await observe(self.queues, self._group_of_runner, self.metrics)
        self._forget({(g.namespace, g.name) for g, _, _ in views})
        self.metrics.pass_seconds.observe(time.perf_counter() - started)

    def _forget(self, keys: set[tuple[str, str]]) -> None:
        for key in set(self.state) - keys:
            self.metrics.forget(f"{key[0]}/{key[1]}")
            state = self.state.pop(key)
            if state.timer is not None:
                state.timer.cancel()
            if state.task is not None and not state.task.done():  # its group is gone; run() still awaits it
                state.task.cancel()
                self._keep(state.task)

    def _keep(self, task: asyncio.Task[None]) -> None:
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def reconcile_group(
        self, group: GroupObject, spec: RunnerGroupSpec, queued: list[QueuedJob], state: GroupState
    ) -> Plan:
        """One group's pass, now, without a lease (for tests and tools; the loop goes through the scheduler)."""
        decided = await self.group_pass.run(group, spec, queued, state)
        assert decided is not None  # only a pass with a lease is ever refused
        return decided

    async def poll_once(self) -> float | None:
        """One poll cycle (see `Poller.poll_once`)."""
        return await self.poller.poll_once()

    async def sweep_once(self) -> int:
        """One ghost sweep (see `Poller.sweep_once`)."""
        return await self.poller.sweep_once()
