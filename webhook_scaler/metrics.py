"""Every Prometheus metric of the receiver, declared on a registry that the caller passes in."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


@dataclass(frozen=True, slots=True)
class Metrics:
    """The receiver's metrics."""

    deliveries: Counter
    signature_failures: Counter
    request_seconds: Histogram
    redis_write_seconds: Histogram
    jobs_recorded: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> Metrics:
        """Declare the metrics on `registry`."""
        return cls(
            deliveries=Counter(
                "grs_webhook_deliveries",
                "Webhook deliveries by event and outcome.",
                ["event", "outcome"],
                registry=registry,
            ),
            signature_failures=Counter(
                "grs_webhook_signature_failures",
                "Deliveries refused for a missing or bad signature.",
                ["reason"],
                registry=registry,
            ),
            request_seconds=Histogram(
                "grs_webhook_request_duration_seconds",
                "Time to answer a webhook delivery.",
                buckets=_LATENCY_BUCKETS,
                registry=registry,
            ),
            redis_write_seconds=Histogram(
                "grs_webhook_redis_write_duration_seconds",
                "Time of the Redis script that records a job's state.",
                buckets=_LATENCY_BUCKETS,
                registry=registry,
            ),
            jobs_recorded=Counter(
                "grs_webhook_jobs_recorded",
                "Job state changes applied in Redis, by new state.",
                ["state"],
                registry=registry,
            ),
        )
