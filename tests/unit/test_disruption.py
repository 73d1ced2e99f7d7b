"""Runners Kubernetes stopped (an eviction, a preemption, a node lost) are not failed runners: read from
their Pods, they neither hold the group back nor count as failures; a busy one is still a lost job."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from reconciler.decide.phases import POD_GONE, Phase, Runner, classify
from reconciler.decide.plan import plan
from reconciler.kube.api import Kube
from reconciler.kube.objects import GroupObject, PodObject, pod_from
from reconciler.loop.passes.disruption import report_failures
from reconciler.loop.state import GroupState
from reconciler.metrics import Metrics
from tests.groups import spec
from webhook_scaler.store.jobs.model import QueuedJob
from webhook_scaler.store.seats.coordination import Coordination

NOW = 1_000_000
T = "2026-01-01T00:00:00Z"


def raw_pod(*, phase: str, reason: str = "", conditions: list[dict[str, Any]] | None = None, **meta: Any) -> PodObject:
    """A runner Pod as the API server shows it."""
    status: dict[str, Any] = {"phase": phase, "conditions": conditions or []}
    if reason:
        status["reason"] = reason
    labels = {"batch.kubernetes.io/job-name": "ci-1"}
    return pod_from({"metadata": {"name": "ci-1-x", "namespace": "ns", "labels": labels, **meta}, "status": status})


def target(reason: str) -> list[dict[str, Any]]:
    """The condition Kubernetes (1.26+) sets on a Pod it is about to stop."""
    return [{"type": "DisruptionTarget", "status": "True", "reason": reason, "lastTransitionTime": T}]


EXITED = {"name": "runner", "state": {"terminated": {"exitCode": 1, "message": "registration refused"}}}
REFUSED = pod_from(
    {"metadata": {"name": "p", "namespace": "ns"}, "status": {"phase": "Failed", "containerStatuses": [EXITED]}}
)


@pytest.mark.parametrize(
    ("pod", "disruption"),
    [
        pytest.param(raw_pod(phase="Running"), "", id="running"),
        pytest.param(REFUSED, "", id="failed-on-its-own"),
        pytest.param(
            raw_pod(phase="Running", conditions=target("EvictionByEvictionAPI"), deletionTimestamp=T),
            "EvictionByEvictionAPI",
            id="drained-kubectl-or-autoscaler",
        ),
        pytest.param(
            raw_pod(phase="Running", conditions=target("PreemptionByScheduler"), deletionTimestamp=T),
            "PreemptionByScheduler",
            id="preempted",
        ),
        pytest.param(
            raw_pod(phase="Running", conditions=target("DeletionByTaintManager"), deletionTimestamp=T),
            "DeletionByTaintManager",
            id="node-unreachable",
        ),
        pytest.param(
            raw_pod(phase="Failed", reason="Evicted", conditions=target("TerminationByKubelet")),
            "TerminationByKubelet",
            id="node-pressure",
        ),
        pytest.param(raw_pod(phase="Failed", reason="Evicted"), "Evicted", id="node-pressure-before-1.26"),
        pytest.param(raw_pod(phase="Failed", reason="Preempting"), "Preempting", id="critical-pod-admitted"),
        pytest.param(raw_pod(phase="Failed", reason="NodeLost"), "NodeLost", id="node-lost"),
        pytest.param(raw_pod(phase="Failed", reason="DeadlineExceeded"), "DeadlineExceeded", id="pod-deadline"),
        pytest.param(raw_pod(phase="Failed", reason="Terminated"), "Terminated", id="node-shutdown"),
        pytest.param(raw_pod(phase="Running", deletionTimestamp=T), "Deleted", id="deleted"),
        pytest.param(
            raw_pod(phase="Running", conditions=[{"type": "DisruptionTarget", "status": "False"}]),
            "",
            id="no-longer-a-target",
        ),
    ],
)
def test_a_pod_says_whether_kubernetes_stopped_it(pod: PodObject, disruption: str) -> None:
    assert pod.disruption == disruption


def failed_runner(name: str, pods: list[PodObject], *, busy: bool = False) -> Runner:
    """A failed runner Job classified as a pass does it (see `apply.GroupPass.runners`)."""
    return classify(
        name,
        job_id=None,
        created_ms=NOW - 60_000,
        finished="Failed",
        reason=next((p.failure for p in pods if p.failure), "BackoffLimitExceeded"),
        pod_phases=[(p.phase, p.running_since_ms) for p in pods],
        busy=busy,
        finished_ms=NOW - 1_000,
        disruption=next((p.disruption for p in pods if p.disruption), ""),
    )


def test_a_drained_node_holds_no_group_back_and_a_failing_runner_still_does() -> None:
    """Every idle runner of a drained node fails its Job, while its Pod stops and after it is gone; none
    of them is a failure. A runner that failed to register still is."""
    queued = [QueuedJob(1, (), "acme", "acme/w", "build", 1, 0, NOW - 90_000, claimed_by=None)]
    evicted = raw_pod(phase="Running", conditions=target("EvictionByEvictionAPI"), deletionTimestamp=T)
    drained = [failed_runner("stopping", [evicted]), failed_runner("gone", [])]
    assert [r.disruption for r in drained] == ["EvictionByEvictionAPI", POD_GONE]
    decided = plan(queued=queued, runners=drained, spec=spec(), now_ms=NOW)
    assert (decided.held, decided.backoff, len(decided.create)) == (False, None, 1)

    broken = failed_runner("broken", [REFUSED])
    decided = plan(queued=queued, runners=[*drained, broken], spec=spec(), now_ms=NOW)
    assert decided.held and decided.backoff is not None and decided.backoff.last == broken


@dataclass
class Events:
    """The Kube calls `report_failures` makes: Events on the group."""

    sent: list[tuple[str, str, str]] = field(default_factory=list)

    async def event(self, group: object, *, kind: str, reason: str, message: str) -> None:
        self.sent.append((kind, reason, message))


class Marks:
    """Coordination's marks: the first to mark a runner reports it."""

    async def lock(self, name: str, *, holder: str, ttl_ms: int) -> bool:
        return True


@pytest.mark.parametrize(
    ("runner", "kind", "reason", "lost", "registration"),
    [
        pytest.param(
            Runner("r", Phase.FAILED, 0, reason="exit code 1: registration refused", finished_ms=1),
            "Warning",
            "RunnerFailed",
            0,
            1,
            id="failed",
        ),
        pytest.param(
            Runner("r", Phase.FAILED, 0, reason="Evicted", finished_ms=1, disruption="TerminationByKubelet"),
            "Normal",
            "RunnerStopped",
            0,
            0,
            id="evicted-idle",
        ),
        pytest.param(
            Runner("r", Phase.FAILED, 0, reason="BackoffLimitExceeded", finished_ms=1, heard=True),
            "Warning",
            "RunnerLost",
            1,
            0,
            id="died-during-its-job",
        ),
        pytest.param(
            Runner("r", Phase.FAILED, 0, reason="x", finished_ms=1, heard=True, disruption="DeletionByTaintManager"),
            "Warning",
            "RunnerLost",
            1,
            0,
            id="node-lost-during-its-job",
        ),
    ],
)
async def test_each_failed_runner_is_reported_as_what_it_is(
    runner: Runner, kind: str, reason: str, lost: int, registration: int
) -> None:
    events, metrics = Events(), Metrics.create(CollectorRegistry())
    group = GroupObject("ns", "ci", "uid", 1, {}, {})
    kube, marks = cast(Kube, events), cast(Coordination, Marks())
    await report_failures(group, [runner], GroupState(), "ns/ci", kube, marks, metrics)
    ((sent_kind, sent_reason, message),) = events.sent
    assert (sent_kind, sent_reason) == (kind, reason)
    assert runner.disruption in message and "r" in message
    assert metrics.runners_lost.labels(group="ns/ci")._value.get() == lost
    assert metrics.registration_failures.labels(group="ns/ci")._value.get() == registration
