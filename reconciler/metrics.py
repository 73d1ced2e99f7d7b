"""Every Prometheus metric of the reconciler, declared on a registry that the caller passes in."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)


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
                "From a job being queued (as recorded) to its runner Job's creation.",
                buckets=_SECONDS,
                registry=registry,
            ),
        )
