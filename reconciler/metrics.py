"""Every Prometheus metric of the reconciler, declared on a registry that the caller passes in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from reconciler.decide.phases import Phase, Runner
from reconciler.decide.plan import Plan
from reconciler.decide.waiting import HELD_IN_GITEA, NO_GROUP

_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
QUEUE_WAIT_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
_RUN = (5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 10800.0)

# What each metric counts: its HELP text on /metrics.
_HELP = {
    "grs_runners_created": "Runner Jobs created, by reason.",
    "grs_runners_deleted": "Runner Jobs deleted, by reason.",
    "grs_queued_jobs": "Queued Gitea jobs a group serves.",
    "grs_active_runners": "Runner Jobs not finished, per group.",
    "grs_reconcile_duration_seconds": "Time of one group's reconcile pass.",
    "grs_reconcile_pass_duration_seconds": (
        "Time of one whole pass: read the queued jobs, assign them to groups, start the group passes."
    ),
    "grs_gitea_requests": "Gitea API requests by endpoint and outcome (ok, an HTTP status, error).",
    "grs_reconcile_errors": "Reconcile errors by kind (transient, permanent).",
    "grs_group_faults": (
        "Exceptions one group's objects raised that were kept to that group (its status says so; no other group "
        "stopped), by stage (validate, round, poll, sweep, prove): each one is a bug to report."
    ),
    "grs_time_to_runner_seconds": (
        "From a job being queued (as recorded) to the creation of a runner Job for it (not to its pickup: "
        "see grs_job_queue_wait_seconds)."
    ),
    "grs_runners_kept_busy": "Surplus runners not deleted because Gitea said they run a job (Redis did not know).",
    "grs_runners_kept": (
        "Runners a deletion was refused for, by why: unlisted (no row of theirs in any scope the group's API "
        "token can list: the registration token's scope is not the group's), unconfirmed (Gitea could not say "
        "they are idle)."
    ),
    "grs_runner_creates_refused": (
        "Runner creates turned down before anything was written (the API server: throttled, quota; Gitea: "
        "registration): their seats were freed at once."
    ),
    "grs_runners_disabled": "Runners disabled in Gitea (handed no job any more) before their deletion.",
    "grs_gitea_runners_removed": "Runner rows deleted in Gitea, by why their runner went (ghost: found by the sweep).",
    "grs_job_queue_wait_seconds": "From a job being queued to a runner of the group taking it: what developers wait.",
    "grs_job_run_seconds": "From a runner of the group taking a job to the job's completion.",
    "grs_jobs_completed": "Jobs the group's runners ran to completion, by Gitea's conclusion.",
    "grs_runners": "Runner Jobs by state (pending, idle, busy, finishing, succeeded, failed).",
    "grs_desired_runners": "Runners the group wants after this pass (queued jobs + minIdleRunners, within the cap).",
    "grs_max_runners": "The group's maxActiveRunners.",
    "grs_waiting_jobs": (
        'Jobs no runner took yet, by why they wait (reconciler/decide/waiting.py); group="": jobs no group has.'
    ),
    "grs_registration_failures": "Runner Pods that failed before their runner started (their prepare step).",
    "grs_runners_lost": (
        "Runners that died during a job (evicted despite their budget, OOM-killed, their node lost): Gitea fails "
        "the job once it stops hearing from the runner."
    ),
}


@dataclass(frozen=True, slots=True)
class Metrics:
    """The reconciler's metrics; `group` labels are `namespace/name`."""

    runners_created: Counter
    runners_deleted: Counter
    queued_jobs: Gauge
    active_runners: Gauge
    reconcile_seconds: Histogram
    pass_seconds: Histogram
    gitea_requests: Counter
    errors: Counter
    time_to_runner: Histogram
    runners_kept_busy: Counter
    runners_kept: Counter
    runners_disabled: Counter
    creates_refused: Counter
    gitea_runners_removed: Counter
    queue_wait: Histogram
    run_seconds: Histogram
    jobs_completed: Counter
    runners: Gauge
    desired_runners: Gauge
    max_runners: Gauge
    waiting_jobs: Gauge
    registration_failures: Counter
    runners_lost: Counter
    group_faults: Counter

    def forget(self, group: str) -> None:
        """Remove every series of a group that is gone, so that dashboards stop showing it."""
        for metric in (
            self.runners_created,
            self.runners_deleted,
            self.queued_jobs,
            self.active_runners,
            self.errors,
            self.runners_kept_busy,
            self.runners_kept,
            self.runners_disabled,
            self.creates_refused,
            self.gitea_runners_removed,
            self.queue_wait,
            self.run_seconds,
            self.jobs_completed,
            self.runners,
            self.desired_runners,
            self.max_runners,
            self.waiting_jobs,
            self.registration_failures,
            self.runners_lost,
            self.group_faults,
        ):
            metric.remove_by_labels({"group": group})

    def after_pass(
        self, group: str, cap: int, decided: Plan, runners: Sequence[Runner], *, created: int, waits: Mapping[str, int]
    ) -> None:
        """A group's gauges after its pass: `created` of the plan's creates were made; `waits`: its queued
        jobs by why they wait."""
        counts = decided.counts
        self.queued_jobs.labels(group=group).set(counts.queued)
        self.active_runners.labels(group=group).set(counts.active - len(decided.create) + created)
        self.desired_runners.labels(group=group).set(counts.active)
        self.max_runners.labels(group=group).set(cap)
        for phase in Phase:
            self.runners.labels(group=group, state=phase.value).set(sum(r.phase is phase for r in runners))
        for reason, count in waits.items():
            self.waiting_jobs.labels(group=group, reason=reason).set(count)

    def queue_wide(self, *, unmatched: int, held: int) -> None:
        """The waiting jobs no group has: those no group matches, and those Gitea holds `waiting`."""
        self.waiting_jobs.labels(group="", reason=NO_GROUP).set(unmatched)
        self.waiting_jobs.labels(group="", reason=HELD_IN_GITEA).set(held)

    @classmethod
    def create(cls, registry: CollectorRegistry) -> Metrics:
        """Declare the metrics on `registry` (what each one counts is in `_HELP`)."""
        return cls(
            runners_created=_counter(registry, "grs_runners_created", "group", "reason"),
            runners_deleted=_counter(registry, "grs_runners_deleted", "group", "reason"),
            queued_jobs=_gauge(registry, "grs_queued_jobs", "group"),
            active_runners=_gauge(registry, "grs_active_runners", "group"),
            reconcile_seconds=_histogram(registry, "grs_reconcile_duration_seconds", buckets=_SECONDS),
            pass_seconds=_histogram(registry, "grs_reconcile_pass_duration_seconds", buckets=_SECONDS),
            gitea_requests=_counter(registry, "grs_gitea_requests", "endpoint", "outcome"),
            errors=_counter(registry, "grs_reconcile_errors", "group", "kind"),
            time_to_runner=_histogram(registry, "grs_time_to_runner_seconds", buckets=_SECONDS),
            runners_kept_busy=_counter(registry, "grs_runners_kept_busy", "group"),
            runners_kept=_counter(registry, "grs_runners_kept", "group", "reason"),
            runners_disabled=_counter(registry, "grs_runners_disabled", "group"),
            creates_refused=_counter(registry, "grs_runner_creates_refused", "group", "reason"),
            gitea_runners_removed=_counter(registry, "grs_gitea_runners_removed", "group", "reason"),
            queue_wait=_histogram(registry, "grs_job_queue_wait_seconds", "group", buckets=QUEUE_WAIT_BUCKETS),
            run_seconds=_histogram(registry, "grs_job_run_seconds", "group", buckets=_RUN),
            jobs_completed=_counter(registry, "grs_jobs_completed", "group", "conclusion"),
            runners=_gauge(registry, "grs_runners", "group", "state"),
            desired_runners=_gauge(registry, "grs_desired_runners", "group"),
            max_runners=_gauge(registry, "grs_max_runners", "group"),
            waiting_jobs=_gauge(registry, "grs_waiting_jobs", "group", "reason"),
            registration_failures=_counter(registry, "grs_registration_failures", "group"),
            runners_lost=_counter(registry, "grs_runners_lost", "group"),
            group_faults=_counter(registry, "grs_group_faults", "group", "stage"),
        )


def _counter(registry: CollectorRegistry, name: str, *labels: str) -> Counter:
    return Counter(name, _HELP[name], labels, registry=registry)


def _gauge(registry: CollectorRegistry, name: str, *labels: str) -> Gauge:
    return Gauge(name, _HELP[name], labels, registry=registry)


def _histogram(registry: CollectorRegistry, name: str, *labels: str, buckets: tuple[float, ...]) -> Histogram:
    return Histogram(name, _HELP[name], labels, buckets=buckets, registry=registry)
