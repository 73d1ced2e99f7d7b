"""A runner Job whose Pod the API server refuses is found from the Job controller's `FailedCreate`
Events: when the group looks, how often, and what it remembers."""

from __future__ import annotations

from typing import Any, cast

from reconciler.kube.events import refusals
from reconciler.kube.objects import GroupObject, JobObject, PodObject
from reconciler.loop.passes.admission import PODLESS_AFTER_MS, RECHECK_MS, WAKE_FOR_MS, Admission
from reconciler.loop.state import GroupState

GROUP = GroupObject("ci", "builders", "uid-g", 1, {}, {})
T0 = 1_800_000_000_000


class FakeKube:
    def __init__(self, refused: dict[str, str]) -> None:
        self.refused = refused
        self.reads = 0
        self.events: list[str] = []

    async def refused_pods(self, namespace: str) -> dict[str, str]:
        self.reads += 1
        return dict(self.refused)

    async def event(self, group: Any, *, kind: str, reason: str, message: str) -> None:
        self.events.append(f"{kind} {reason}: {message}")


def job(name: str, uid: str, created_ms: int = T0) -> JobObject:
    return JobObject("ci", name, "builders", 7, created_ms, "", "", uid=uid)


async def test_a_pod_less_runner_job_is_looked_at_after_a_grace_then_every_few_seconds_for_a_while() -> None:
    kube = FakeKube({"u1": 'pods "x" is forbidden: violates PodSecurity "baseline:latest"'})
    admission, state, jobs = Admission(cast(Any, kube)), GroupState(), [job("builders-7-0", "u1")]
    assert await admission.check(GROUP, jobs, {}, state, T0 + 1000) == T0 + PODLESS_AFTER_MS
    assert kube.reads == 0 and state.refused == {}, "no look before the Job controller had its chance"
    at = T0 + PODLESS_AFTER_MS
    assert await admission.check(GROUP, jobs, {}, state, at) == at + RECHECK_MS
    assert state.refused == {"builders-7-0": kube.refused["u1"]} and kube.reads == 1
    assert await admission.check(GROUP, jobs, {}, state, at + 1000) == at + RECHECK_MS
    assert kube.reads == 1, "at most one read per RECHECK_MS"
    assert len(kube.events) == 1 and "RunnerPodRefused" in kube.events[0] and "builders-7-0" in kube.events[0]
    assert await admission.check(GROUP, jobs, {}, state, at + RECHECK_MS) == at + 2 * RECHECK_MS
    assert len(kube.events) == 1, "one Event per refused runner Job"
    assert await admission.check(GROUP, jobs, {}, state, T0 + WAKE_FOR_MS) is None, "no timer after a while"
    assert state.refused, "still refused: its pendingTimeout reaps it"


async def test_a_runner_job_that_got_its_pod_or_ended_is_not_refused_any_more() -> None:
    kube = FakeKube({"u1": "exceeded quota"})
    admission, state, jobs = Admission(cast(Any, kube)), GroupState(), [job("builders-7-0", "u1")]
    await admission.check(GROUP, jobs, {}, state, T0 + PODLESS_AFTER_MS)
    assert state.refused
    pod = PodObject("ci", "builders-7-0-x", "builders-7-0", "Pending", T0 + 9000, None)
    pods = {("ci", "builders-7-0"): [pod]}
    assert await admission.check(GROUP, jobs, pods, state, T0 + 10_000) is None
    assert state.refused == {}, "the quota made room: the Pod was created"


async def test_jobs_with_pods_read_no_events() -> None:
    kube = FakeKube({})
    pod = PodObject("ci", "builders-7-0-x", "builders-7-0", "Running", T0, T0)
    state = GroupState()
    again = await Admission(cast(Any, kube)).check(
        GROUP, [job("builders-7-0", "u1")], {("ci", "builders-7-0"): [pod]}, state, T0 + 60_000
    )
    assert again is None and kube.reads == 0


def test_the_latest_failed_create_of_each_job_counts() -> None:
    def event(uid: str, reason: str, at: str, message: str) -> dict[str, Any]:
        return {"involvedObject": {"uid": uid}, "reason": reason, "lastTimestamp": at, "message": message}

    listed = [
        event("u1", "FailedCreate", "2026-01-01T00:00:05Z", "newer"),
        event("u1", "FailedCreate", "2026-01-01T00:00:01Z", "older"),
        event("u2", "SuccessfulCreate", "2026-01-01T00:00:01Z", "created pod"),
        event("", "FailedCreate", "2026-01-01T00:00:01Z", "no uid"),
    ]
    assert refusals(listed) == {"u1": "newer"}
