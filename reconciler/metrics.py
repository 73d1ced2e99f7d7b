"""Every Prometheus metric of the reconciler, declared on a registry that the caller passes in."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_WAIT = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
_RUN = (5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 10800.0)


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
    gitea_runners_removed: Counter
    queue_wait: Histogram
    run_seconds: Histogram
    jobs_completed: Counter
    runners: Gauge
    desired_runners: Gauge
    max_runners: Gauge
    registration_failures: Counter

    def forget(self, group: str) -> None:
        """Remove every series of a group that is gone, so that dashboards stop showing it."""
        for metric in (
            self.runners_created,
            self.runners_deleted,
            self.queued_jobs,
            self.active_runners,
            self.errors,
            self.runners_kept_busy,
            self.gitea_runners_removed,
            self.queue_wait,
            self.run_seconds,
            self.jobs_completed,
            self.runners,
            self.desired_runners,
            self.max_runners,
            self.registration_failures,
        ):
            metric.remove_by_labels({"group": group})

    @classmethod
    def create(cls, registry: CollectorRegistry) -> Metrics:
        """Declare the metrics on `registry`."""
        return cls(
            runners_created=Counter(
                "grs_runners_created", "Runner Jobs created, by reason.", ["group", "reason"], registry=registry
            ),
            runners_deleted=Counter(
                "grs_runners_deleted", "Runner Jobs deleted, by reason.", ["group", "reason"], registry=registry
            ),
            queued_jobs=Gauge("grs_queued_jobs", "Queued Gitea jobs a group serves.", ["group"], registry=registry),
            active_runners=Gauge(
                "grs_active_runners", "Runner Jobs not finished, per group.", ["group"], registry=registry
            ),
            reconcile_seconds=Histogram(
                "grs_reconcile_duration_seconds",
                "Time of one group's reconcile pass.",
                buckets=_SECONDS,
                registry=registry,
            ),
            pass_seconds=Histogram(
                "grs_reconcile_pass_duration_seconds",
                "Time of one whole pass: read the queued jobs, assign them to groups, start the group passes.",
                buckets=_SECONDS,
                registry=registry,
            ),
            gitea_requests=Counter(
                "grs_gitea_requests",
                "Gitea API requests by endpoint and outcome (ok, an HTTP status, error).",
                ["endpoint", "outcome"],
                registry=registry,
            ),
            errors=Counter(
                "grs_reconcile_errors",
                "Reconcile errors by kind (transient, permanent).",
                ["group", "kind"],
                registry=registry,
            ),
            time_to_runner=Histogram(
                "grs_time_to_runner_seconds",
                "From a job being queued (as recorded) to the creation of a runner Job for it (not to its pickup: "
                "see grs_job_queue_wait_seconds).",
                buckets=_SECONDS,
                registry=registry,
            ),
            runners_kept_busy=Counter(
                "grs_runners_kept_busy",
                "Surplus runners not deleted because Gitea said they run a job (Redis did not know).",
                ["group"],
                registry=registry,
            ),
            gitea_runners_removed=Counter(
                "grs_gitea_runners_removed",
                "Runner rows deleted in Gitea, by why their runner went (ghost: found by the sweep).",
                ["group", "reason"],
                registry=registry,
            ),
            queue_wait=Histogram(
                "grs_job_queue_wait_seconds",
                "From a job being queued to a runner of the group taking it: what developers wait.",
                ["group"],
                buckets=_WAIT,
                registry=registry,
            ),
            run_seconds=Histogram(
                "grs_job_run_seconds",
                "From a runner of the group taking a job to the job's completion.",
                ["group"],
                buckets=_RUN,
                registry=registry,
            ),
            jobs_completed=Counter(
                "grs_jobs_completed",
                "Jobs the group's runners ran to completion, by Gitea's conclusion.",
                ["group", "conclusion"],
                registry=registry,
            ),
            runners=Gauge(
                "grs_runners",
                "Runner Jobs by state (pending, idle, busy, finishing, succeeded, failed).",
                ["group", "state"],
                registry=registry,
            ),
            desired_runners=Gauge(
                "grs_desired_runners",
                "Runners the group wants after this pass (queued jobs + minIdleRunners, within the cap).",
                ["group"],
                registry=registry,
            ),
            max_runners=Gauge("grs_max_runners", "The group's maxActiveRunners.", ["group"], registry=registry),
            registration_failures=Counter(
                "grs_registration_failures",
                "Runners that failed to register with Gitea (wrong token, Gitea unreachable).",
                ["group"],
                registry=registry,
            ),
        )
