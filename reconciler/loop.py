"""The controller: wakes on Redis and Kubernetes events and on timers, plans each group, applies the plan.

Owns: the wake-ups (the Redis stream, informer events, the poll, resync and retry timers), one task per
RunnerGroup so that one group's error or slow API call never stalls another, per-group leases in Redis
so replicas take turns on a group, claims before every create, retries with backoff, Events, and
status writes only when the status changed. Decisions come from `plan`; API calls go through `kube`.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from reconciler.crd import RunnerGroupSpec
from reconciler.gitea_runners import RunnerRows, scope_of
from reconciler.giteaapi import GiteaClient, GiteaError, PollScope
from reconciler.kube import GroupObject, JobObject, Kube, PermanentError, PodObject, TransientError
from reconciler.labels import effective_labels, names
from reconciler.manifests import build_job, job_name, runner_suffix
from reconciler.metrics import Metrics
from reconciler.plan import Counts, Create, GroupView, Phase, Plan, Runner, assign, classify, plan
from reconciler.settings import Settings
from reconciler.status import Condition, desired_status, registration_failed, timestamp
from reconciler.tasks import run_together
from webhook_scaler.queue import ALL, Activity, JobStore, JobUpdate, QueuedJob, Scope

log = logging.getLogger(__name__)
CREATED_WINDOW_MS = 120_000
CREATE_CONCURRENCY = 8  # runner Job creates in flight at once, per group
STATUS_INTERVAL = 1.0  # seconds between status writes that only change counts
FAILED_MARK_MS = 24 * 3600 * 1000  # a failed runner is reported once; its Job is gone long before


@dataclass
class GroupState:
    """What the controller remembers about one group between passes (nothing it cannot re-derive)."""

    task: asyncio.Task[None] | None = None
    again: bool = False
    backoff: float = 0.0
    retry_at: float = 0.0
    reported_failures: set[str] = field(default_factory=set)
    last_error: str = ""
    gitea: Condition | None = None
    last_poll: str | None = None
    invalid_generation: int = -1
    status_written: float = 0.0  # monotonic time of the last status write
    quiet_as: tuple[object, object, object] | None = None  # (group object, gitea condition, last poll) found quiet
    timer: asyncio.TimerHandle | None = None  # the wake-up at the group's next deadline
    timer_at_ms: int = 0


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
    ) -> None:
        self.settings = settings
        self.kube = kube
        self.store = store
        self.gitea = gitea
        self.metrics = metrics
        self.clock = clock
        self.wake = asyncio.Event()
        self.groups, self.jobs, self.pods = kube.informers(self.wake.set)
        self.state: dict[tuple[str, str], GroupState] = {}
        self.passes = 0
        self._specs: dict[str, tuple[int, RunnerGroupSpec | None, str]] = {}
        self._jobs_by_group: dict[tuple[str, str], list[JobObject]] = {}
        self._pods_by_job: dict[tuple[str, str], list[PodObject]] = {}
        self._group_of_runner: dict[str, str] = {}  # runner Job name -> "namespace/group"
        self._background: set[asyncio.Task[None]] = set()
        self.rows = RunnerRows(gitea, kube, metrics)

    def now_ms(self) -> int:
        """The clock, in milliseconds."""
        return int(self.clock() * 1000)

    # -- the main loop ----------------------------------------------------------------------------
    async def run(self) -> None:
        """Run the informers, the wake-up sources and the reconcile loop until cancelled.

        Every task it started has ended when it returns or raises: the group passes too, so no lease or
        claim is left mid-write by a stopped replica. A task that ends on its own is a bug; it is raised.
        """
        workers = [asyncio.create_task(i.run(), name=f"informer-{i.name}") for i in (self.groups, self.jobs, self.pods)]
        workers.append(asyncio.create_task(self._follow_redis(), name="follow-redis"))
        workers.append(asyncio.create_task(self._resync(), name="resync"))
        if self.settings.poll_enabled:
            workers.append(asyncio.create_task(self._poll_forever(), name="poll"))
        if self.settings.ghost_sweep_interval:
            workers.append(asyncio.create_task(self._sweep_forever(), name="ghost-sweep"))
        workers.append(asyncio.create_task(self._reconcile_forever(), name="reconcile"))
        await run_together(workers, what="controller", also=self._passes_and_background)

    def _passes_and_background(self) -> list[asyncio.Task[None]]:
        return [*(s.task for s in self.state.values() if s.task is not None), *self._background]

    async def _reconcile_forever(self) -> None:
        for informer in (self.groups, self.jobs, self.pods):
            await informer.synced.wait()
        log.info("caches synced; reconciling")
        while True:
            await self.wake.wait()
            self.wake.clear()
            try:
                await self.reconcile_all()
            except Exception:
                log.exception("reconcile pass failed")
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
                self.wake.set()

    async def _resync(self) -> None:
        while True:
            await asyncio.sleep(self.settings.resync_interval)
            self.wake.set()

    # -- one pass ---------------------------------------------------------------------------------
    def views(self) -> list[tuple[GroupObject, RunnerGroupSpec | None, str]]:
        """Every group with its validated spec, or None and the validation message.

        A spec is validated once per generation (the API server bumps it on every spec change).
        """
        out: list[tuple[GroupObject, RunnerGroupSpec | None, str]] = []
        seen: set[str] = set()
        for group in self.groups.items.values():
            seen.add(group.uid)
            cached = self._specs.get(group.uid)
            if cached is None or cached[0] != group.generation:
                cached = (group.generation, *_validate(group.spec))
                self._specs[group.uid] = cached
            out.append((group, cached[1], cached[2]))
        for uid in set(self._specs) - seen:
            del self._specs[uid]
        return out

    def _index(self) -> None:
        """Runner Jobs by group and Pods by Job, once per pass, so a pass is linear in groups + Jobs."""
        jobs: dict[tuple[str, str], list[JobObject]] = {}
        group_of_runner: dict[str, str] = {}
        for job in self.jobs.items.values():
            jobs.setdefault((job.namespace, job.group), []).append(job)
            group_of_runner[job.name] = f"{job.namespace}/{job.group}"
        pods: dict[tuple[str, str], list[PodObject]] = {}
        for pod in self.pods.items.values():
            pods.setdefault((pod.namespace, pod.job_name), []).append(pod)
        self._jobs_by_group, self._pods_by_job, self._group_of_runner = jobs, pods, group_of_runner

    async def reconcile_all(self) -> None:
        """Read demand once, give each queued job to one group, and start each group's pass."""
        self.passes += 1
        started = time.perf_counter()
        views = self.views()
        self._index()
        valid = [
            GroupView(g.namespace, g.name, spec, names(effective_labels(spec.labels, spec.default_labels)))
            for g, spec, _ in views
            if spec is not None
        ]
        queued = await self.store.queued(ALL)
        assignment = assign(queued, valid)
        keys = set()
        for group, spec, problem in views:
            key = (group.namespace, group.name)
            keys.add(key)
            self._start(group, spec, problem, assignment.get(key, []))
        await self._observe()
        for key in set(self.state) - keys:
            self.metrics.forget(f"{key[0]}/{key[1]}")
            state = self.state.pop(key)
            if state.timer is not None:
                state.timer.cancel()
            if state.task is not None and not state.task.done():  # its group is gone; run() still awaits it
                state.task.cancel()
                self._background.add(state.task)
                state.task.add_done_callback(self._background.discard)
        self.metrics.pass_seconds.observe(time.perf_counter() - started)

    async def _observe(self) -> None:
        """Turn the facts the receivers recorded (a runner took a job, a job completed) into the metrics
        of the runner's group. Each fact is taken by one replica only, so sums across replicas count
        each job once; facts about runners that are not ours are dropped."""
        try:
            facts = await self.store.observations()
        except Exception as exc:  # the metrics wait for Redis; the pass does not
            log.warning("observations unavailable", extra={"error": repr(exc)})
            return
        for fact in facts:
            group = self._group_of_runner.get(fact.runner)
            if group is None:
                continue
            if fact.kind == "picked":
                self.metrics.queue_wait.labels(group=group).observe(fact.seconds)
                continue
            self.metrics.jobs_completed.labels(group=group, conclusion=fact.conclusion or "unknown").inc()
            if fact.seconds >= 0:
                self.metrics.run_seconds.labels(group=group).observe(fact.seconds)

    def _start(self, group: GroupObject, spec: RunnerGroupSpec | None, problem: str, queued: list[QueuedJob]) -> None:
        state = self.state.setdefault((group.namespace, group.name), GroupState())
        if state.task is not None and not state.task.done():
            state.again = True
            return
        if state.retry_at > time.monotonic() or self._quiet(group, spec, queued, state):
            return
        state.task = asyncio.create_task(self._run_group(group, spec, problem, queued, state))

    def _quiet(
        self, group: GroupObject, spec: RunnerGroupSpec | None, queued: list[QueuedJob], state: GroupState
    ) -> bool:
        """A group with nothing queued, no runner Jobs, no warm pool, and its status already right has
        nothing to do: skip its pass (no lease, no Redis or API call). Most groups, most of the time."""
        if spec is None or queued or self._jobs_by_group.get((group.namespace, group.name)):
            return False
        if spec.min_idle_runners and not spec.suspend:
            return False
        seen_as = (group, state.gitea, state.last_poll)
        if state.quiet_as is not None and all(a is b for a, b in zip(state.quiet_as, seen_as, strict=True)):
            return True  # nothing changed since it was last found quiet: not even the status to compare
        status = desired_status(
            generation=group.generation,
            previous=group.status,
            spec=spec,
            counts=Counts(active=0, idle=0, queued=0),
            now=self._now(),
            invalid="",
            gitea=state.gitea,
            last_poll=state.last_poll,
            failed=(),
        )
        quiet = status == dict(group.status)
        state.quiet_as = seen_as if quiet else None
        return quiet

    async def _run_group(
        self, group: GroupObject, spec: RunnerGroupSpec | None, problem: str, queued: list[QueuedJob], state: GroupState
    ) -> None:
        holder = f"{self.settings.replica_id}/{uuid.uuid4().hex[:8]}"
        started = time.perf_counter()
        try:
            if spec is None:
                await self._invalid(group, problem, state)
            elif await self.store.lock(group.uid, holder=holder, ttl_ms=int(self.settings.lease_ttl * 1000)):
                try:
                    await self.reconcile_group(group, spec, queued, state)
                finally:
                    await self.store.unlock(group.uid, holder=holder)
            else:
                state.again = True  # another replica has it right now; look again shortly
                await asyncio.sleep(0.05 + random.random() * 0.1)
            state.backoff = 0.0
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._failed(group, state, exc)
        finally:
            self.metrics.reconcile_seconds.observe(time.perf_counter() - started)
        if state.again:
            state.again = False
            self.wake.set()

    def _failed(self, group: GroupObject, state: GroupState, exc: Exception) -> None:
        transient = isinstance(exc, TransientError | GiteaError | OSError | asyncio.TimeoutError)
        kind = "transient" if transient else "permanent"
        self.metrics.errors.labels(group=f"{group.namespace}/{group.name}", kind=kind).inc()
        state.last_error = str(exc)[:500]
        state.backoff = min(max(state.backoff * 2, self.settings.retry_initial), self.settings.retry_max)
        state.retry_at = time.monotonic() + state.backoff
        log.warning(
            "group reconcile failed",
            extra={"group": group.name, "namespace": group.namespace, "kind": kind, "error": state.last_error},
        )
        asyncio.get_running_loop().call_later(state.backoff, self.wake.set)
        if not transient:
            task = asyncio.create_task(
                self.kube.event(group.ref, kind="Warning", reason="ReconcileError", message=state.last_error)
            )
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _invalid(self, group: GroupObject, problem: str, state: GroupState) -> None:
        status = desired_status(
            generation=group.generation,
            previous=group.status,
            spec=None,
            counts=None,
            now=self._now(),
            invalid=problem,
            gitea=None,
            last_poll=None,
            failed=(),
        )
        if status != dict(group.status):
            await self.kube.patch_status(group.ref, status)
        if state.invalid_generation != group.generation:
            state.invalid_generation = group.generation
            await self.kube.event(group.ref, kind="Warning", reason="InvalidSpec", message=problem)

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)

    def runners(self, group: GroupObject, activity: Activity) -> list[Runner]:
        """The group's runner Jobs, classified."""
        pods = {job.name: self._pods_by_job.get((job.namespace, job.name), []) for job in self._jobs_of(group)}
        return [
            classify(
                job.name,
                job_id=job.job_id,
                created_ms=job.created_ms,
                finished=job.finished,
                reason=next((p.failure for p in pods.get(job.name, []) if p.failure), job.reason),
                pod_phases=[(p.phase, p.running_since_ms) for p in pods.get(job.name, [])],
                busy=job.name in activity.busy or self.rows.busy(job.namespace, job.name),
                finished_ms=job.finished_ms,
                done_ms=activity.done_ms.get(job.name),
            )
            for job in self._jobs_of(group)
        ]

    def _jobs_of(self, group: GroupObject) -> list[JobObject]:
        return self._jobs_by_group.get((group.namespace, group.name), [])

    async def reconcile_group(
        self, group: GroupObject, spec: RunnerGroupSpec, queued: list[QueuedJob], state: GroupState
    ) -> Plan:
        """Plan one group and apply the plan."""
        jobs = self._jobs_of(group)
        activity = await self.store.activity([j.name for j in jobs if not j.finished], jobs=[q.job_id for q in queued])
        # The queue was read for every group before this pass; a job a runner took since then is busy
        # in `activity` and must not count as waiting too (it would start a runner nobody needs).
        queued = [q for q in queued if q.job_id in activity.queued]
        runners = self.runners(group, activity)
        now_ms = self.now_ms()
        recent = await self.store.recently_created(group.uid, since_ms=now_ms - CREATED_WINDOW_MS)
        in_flight = len(recent - {j.name for j in jobs})
        decided = plan(
            queued=queued,
            runners=runners,
            spec=spec,
            now_ms=now_ms,
            in_flight=in_flight,
            idle_grace_ms=int(self.settings.idle_grace * 1000),
            backoff_ms=(int(self.settings.runner_backoff_initial * 1000), int(self.settings.runner_backoff_max * 1000)),
            finish_grace_ms=int(self.settings.finish_grace * 1000),
        )
        if decided.wake_at_ms is not None:
            self._wake_at(state, decided.wake_at_ms, now_ms)
        label = f"{group.namespace}/{group.name}"
        await self._apply_deletes(group, spec, decided, label)
        created = await self._apply_creates(group, spec, decided.create, label)
        await self._report_failures(group, decided, state, label)
        self.metrics.queued_jobs.labels(group=label).set(decided.counts.queued)
        self.metrics.active_runners.labels(group=label).set(decided.counts.active - len(decided.create) + created)
        self.metrics.desired_runners.labels(group=label).set(decided.counts.active)
        self.metrics.max_runners.labels(group=label).set(spec.max_active_runners)
        for phase in Phase:
            self.metrics.runners.labels(group=label, state=phase.value).set(sum(r.phase is phase for r in runners))
        status = desired_status(
            generation=group.generation,
            previous=group.status,
            spec=spec,
            counts=decided.counts,
            now=self._now(),
            invalid="",
            gitea=state.gitea,
            last_poll=state.last_poll,
            failed=decided.failed,
            backoff=decided.backoff,
        )
        await self._write_status(group, status, state)
        return decided

    def _wake_at(self, state: GroupState, at_ms: int, now_ms: int) -> None:
        """Look again at the group's next deadline (nothing else would wake the controller then). One
        timer per group, moved when a pass finds an earlier deadline, so that passes do not pile up timers."""
        timer = state.timer
        if timer is not None and not timer.cancelled() and now_ms <= state.timer_at_ms <= at_ms:
            return  # the timer that is set fires first anyway
        if timer is not None:
            timer.cancel()
        state.timer_at_ms = at_ms
        state.timer = asyncio.get_running_loop().call_later(max(0, at_ms - now_ms) / 1000 + 0.05, self.wake.set)

    async def _write_status(self, group: GroupObject, status: dict[str, Any], state: GroupState) -> None:
        """Write a changed status; while only the counts change, at most once per STATUS_INTERVAL, so a
        burst of runners does not turn into a burst of status writes (a wake-up writes the last one)."""
        previous = dict(group.status)
        if status == previous:
            return
        since = time.monotonic() - state.status_written
        counts_only = all(status.get(k) == previous.get(k) for k in ("conditions", "observedGeneration", "target"))
        if counts_only and since < STATUS_INTERVAL:
            asyncio.get_running_loop().call_later(STATUS_INTERVAL - since, self.wake.set)
            return
        await self.kube.patch_status(group.ref, status)
        state.status_written = time.monotonic()

    async def _apply_deletes(self, group: GroupObject, spec: RunnerGroupSpec, decided: Plan, label: str) -> None:
        allowed = await self.rows.vet(group, spec, decided.delete)
        for d in allowed:
            await self.kube.delete_job(group.namespace, d.name)
            if d.job_id is not None:
                await self.store.release(d.job_id, holder=d.name)
            self.metrics.runners_deleted.labels(group=label, reason=d.reason).inc()
            log.info("runner deleted", extra={"group": group.name, "job": d.name, "reason": d.reason})
        reaped = [d.name for d in allowed if d.reason == "pending_timeout"]
        if reaped:
            message = f"Deleted runner Jobs Pending longer than the pendingTimeout: {', '.join(reaped)}"
            await self.kube.event(group.ref, kind="Warning", reason="RunnerReaped", message=message)

    async def _apply_creates(
        self, group: GroupObject, spec: RunnerGroupSpec, creates: tuple[Create, ...], label: str
    ) -> int:
        slots = asyncio.Semaphore(CREATE_CONCURRENCY)

        async def one(c: Create) -> bool:
            async with slots:
                return await self._create(group, spec, c, label)

        results = await asyncio.gather(*(one(c) for c in creates), return_exceptions=True)
        made = [
            str(c.job_id) if c.job_id is not None else "warm"
            for c, r in zip(creates, results, strict=True)
            if r is True
        ]
        if made:
            message = f"Created {len(made)} runner(s) for jobs: {', '.join(made)}"
            await self.kube.event(group.ref, kind="Normal", reason="RunnerCreated", message=message[:1000])
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return len(made)

    async def _create(self, group: GroupObject, spec: RunnerGroupSpec, c: Create, label: str) -> bool:
        name = job_name(group.name, runner_suffix(c.job_id, uuid.uuid4().hex))
        ttl_ms = int(self.settings.claim_ttl * 1000)
        if c.job_id is not None:
            if c.stale_claim:
                await self.store.release(c.job_id, holder=c.stale_claim)
            if not await self.store.claim(c.job_id, holder=name, ttl_ms=ttl_ms):
                return False  # another replica, or the job left the queue meanwhile
        body = build_job(group.ref, spec, name=name, job_id=c.job_id, queued_ms=c.queued_ms)
        try:
            await self.store.note_created(group.uid, name, now_ms=self.now_ms(), window_ms=CREATED_WINDOW_MS)
            await self.kube.create_job(body)
        except BaseException:
            if c.job_id is not None:
                await self.store.release(c.job_id, holder=name)
            raise
        reason = "queued" if c.job_id is not None else "warm"
        self.metrics.runners_created.labels(group=label, reason=reason).inc()
        if c.queued_ms:
            self.metrics.time_to_runner.observe(max(0.0, (self.now_ms() - c.queued_ms) / 1000))
        log.info("runner created", extra={"group": group.name, "job": name, "gitea_job_id": c.job_id})
        return True

    async def _report_failures(self, group: GroupObject, decided: Plan, state: GroupState, label: str) -> None:
        names_now = {r.name for r in decided.failed}
        for r in decided.failed:
            if r.name in state.reported_failures:
                continue
            # One Event and one count per failed runner across replicas: the first to mark it reports it.
            if not await self.store.lock(f"failed:{r.name}", holder=self.settings.replica_id, ttl_ms=FAILED_MARK_MS):
                continue
            if registration_failed(r):
                self.metrics.registration_failures.labels(group=label).inc()
            message = f"Runner Job {r.name} failed ({r.reason}); its slot is free again"
            await self.kube.event(group.ref, kind="Warning", reason="RunnerFailed", message=message)
        state.reported_failures = names_now

    # -- the polling fallback ---------------------------------------------------------------------
    async def _poll_forever(self) -> None:
        for informer in (self.groups, self.jobs, self.pods):
            await informer.synced.wait()
        delay = self.settings.poll_interval
        while True:
            try:
                retry_after = await self.poll_once()
            except Exception:  # never let one bad cycle stop the fallback for good
                log.exception("poll cycle failed")
                retry_after = 0.0
            if retry_after is None:
                delay = self.settings.poll_interval
            else:  # back off on errors, and at least as long as a 429's Retry-After asks
                delay = min(max(delay * 2, 5.0, retry_after), self.settings.poll_backoff_max)
            jitter = 1 + self.settings.poll_jitter * (2 * random.random() - 1)
            await asyncio.sleep(delay * jitter)

    async def poll_once(self) -> float | None:
        """Poll each distinct (Gitea URL, scope, token) once and reconcile Redis with what Gitea lists.

        Returns None if every poll succeeded, else the longest Retry-After Gitea asked for (0 if none).
        """
        scopes = await self._scopes()
        results = await asyncio.gather(*(self._poll_scope(s, gs) for s, gs in scopes.items()))
        self.wake.set()
        failures = [r for r in results if r is not None]
        return max(failures) if failures else None

    async def _scopes(self) -> dict[PollScope, list[GroupObject]]:
        """The valid groups by (Gitea URL, scope, token), each Secret key read once; a group whose token
        cannot be read gets the condition that says so."""
        scopes: dict[PollScope, list[GroupObject]] = {}
        tokens: dict[tuple[str, str, str], str | Exception] = {}
        for group, spec, _ in self.views():
            if spec is None:
                continue
            try:
                scope = await scope_of(self.kube, spec, group.namespace, cache=tokens)
            except (PermanentError, TransientError) as exc:
                state = self.state.setdefault((group.namespace, group.name), GroupState())
                state.gitea = Condition("GiteaReachable", "False", "AuthTokenUnavailable", str(exc))
                continue
            scopes.setdefault(scope, []).append(group)
        return scopes

    async def _sweep_forever(self) -> None:
        for informer in (self.groups, self.jobs, self.pods):
            await informer.synced.wait()
        while True:
            await asyncio.sleep(self.settings.ghost_sweep_interval)
            try:
                await self.sweep_once()
            except Exception:  # the next sweep tries again
                log.exception("ghost sweep failed")

    async def sweep_once(self) -> int:
        """Delete the runner rows in Gitea that runners of ours left behind; how many."""
        scopes = await self._scopes()
        since = self.now_ms() - CREATED_WINDOW_MS
        recent = {g.uid: await self.store.recently_created(g.uid, since_ms=since) for gs in scopes.values() for g in gs}
        return await self.rows.sweep(scopes, self.jobs.items, recent)

    async def _poll_scope(self, scope: PollScope, groups: list[GroupObject]) -> float | None:
        started_ms = self.now_ms()
        try:
            listing = await self.gitea.jobs(scope)
            polled, complete = listing.jobs, listing.complete  # noqa: F841 (complete: for the Redis sync, next)
            updates = [JobUpdate.from_job(p.job, repo_full_name=p.repo) for p in polled]
            redis_scope = (
                ALL if scope.kind == "global" else Scope("repo" if scope.kind == "repo" else "owner", scope.target)
            )
            added, dropped = await self.store.sync_polled(
                redis_scope, updates, polled_since_ms=started_ms, now_ms=self.now_ms()
            )
            condition = Condition("GiteaReachable", "True", "PollSucceeded", f"{len(polled)} queued or running job(s)")
            failure: float | None = None
            if added or dropped:
                log.info("poll healed redis", extra={"scope": repr(scope), "added": added, "dropped": dropped})
        except GiteaError as exc:
            condition = Condition("GiteaReachable", "False", "PollFailed", str(exc))
            failure = exc.retry_after
            log.warning("poll failed", extra={"scope": repr(scope), "error": str(exc), "status": exc.status})
        checked = timestamp(self._now())
        for group in groups:
            state = self.state.setdefault((group.namespace, group.name), GroupState())
            state.gitea = condition
            state.last_poll = checked
        return failure


def _validate(spec: Mapping[str, Any]) -> tuple[RunnerGroupSpec | None, str]:
    """A spec validated, or None and what is wrong with it."""
    try:
        return RunnerGroupSpec.model_validate(dict(spec)), ""
    except ValidationError as exc:
        problems = "; ".join(
            f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" if e["loc"] else e["msg"]
            for e in exc.errors(include_input=False)
        )
        return None, problems
