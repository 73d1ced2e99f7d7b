"""`RunnerCreated` Events and count-only status writes wait behind the creates in flight."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from reconciler.kube.manifests import GroupRef
from reconciler.kube.objects import GroupObject
from reconciler.loop.passes import reports as reports_module
from reconciler.loop.passes.reports import Reports
from reconciler.loop.state import GroupState

A, B = GroupRef("ci", "a", "uid-a"), GroupRef("ci", "b", "uid-b")


class Events:
    """A Kube stand-in that records the Events sent and the status writes."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str, str]] = []
        self.statuses: list[tuple[str, dict[str, Any]]] = []

    async def event(self, group: GroupRef, *, kind: str, reason: str, message: str) -> None:
        self.sent.append((group.name, kind, reason, message))

    async def patch_status(self, group: GroupRef, status: dict[str, Any]) -> None:
        self.statuses.append((group.name, status))


def new_reports(wake: Any = lambda: None) -> tuple[Reports, Events, list[asyncio.Task[None]]]:
    kube, kept = Events(), list[asyncio.Task[None]]()
    return Reports(cast(Any, kube), kept.append, wake), kube, kept


async def test_events_wait_for_every_create_in_flight_then_one_per_group_says_all() -> None:
    reports, kube, kept = new_reports()
    with reports.creates():
        with reports.creates():
            reports.created(A, ["1", "2"])
            reports.created(B, ["warm"])
        reports.created(A, ["3"])
        assert reports.creating == 1
        done, _ = await asyncio.wait(kept, timeout=0.2)
        assert not done and kube.sent == []  # a create is still in flight: no Event yet
    await asyncio.wait_for(kept[0], 5)
    assert len(kept) == 1  # one flush for all
    assert sorted(kube.sent) == [
        ("a", "Normal", "RunnerCreated", "Created 3 runner(s) for jobs: 1, 2, 3"),
        ("b", "Normal", "RunnerCreated", "Created 1 runner(s) for jobs: warm"),
    ]
    reports.created(B, ["4"])  # nothing in flight: sent at once
    await asyncio.wait_for(kept[1], 5)
    assert kube.sent[-1] == ("b", "Normal", "RunnerCreated", "Created 1 runner(s) for jobs: 4")


async def test_a_long_burst_holds_events_back_no_longer_than_max_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reports_module, "MAX_DELAY", 0.05)
    woken: list[str] = []
    reports, kube, kept = new_reports(lambda: woken.append("round"))
    state = GroupState(due=False)
    with reports.creates():
        for i in range(20):  # more groups than are sent at once while creates are in flight
            reports.created(GroupRef("ci", f"g{i}", f"uid-{i}"), [str(i)])
        reports.later(state)
        await asyncio.wait_for(kept[0], 5)
        assert sorted(k[0] for k in kube.sent) == sorted(f"g{i}" for i in range(20))
        assert state.due and woken == ["round"]
        assert reports.creating == 1


async def test_a_count_only_status_write_waits_for_the_creates_then_its_group_passes_again() -> None:
    woken: list[str] = []
    reports, kube, kept = new_reports(lambda: woken.append("round"))
    timers: list[int] = []

    async def write_status(group: GroupObject, status: dict[str, Any], state: GroupState) -> None:
        await reports.write_status(group, status, state, wake_at=lambda _s, at_ms: timers.append(at_ms), now=0.0)

    status = {"activeRunners": 1, "queuedJobs": 0, "conditions": {}}
    group = GroupObject("ci", "a", "uid-a", 1, {}, {**status, "activeRunners": 0})
    state = GroupState(due=False)
    with reports.creates():
        await write_status(group, status, state)
        assert kube.statuses == [] and timers == []  # put off, and no timer per group
        done, _ = await asyncio.wait(kept, timeout=0.2)
        assert not done and not state.due and woken == []
    await asyncio.wait_for(kept[0], 5)
    assert state.due and woken == ["round"]  # no create in flight: the group's next pass may not skip
    await write_status(group, status, state)
    assert kube.statuses == [("a", status)]
    with reports.creates():  # a change beyond the counts is written at once, creates or not
        await write_status(group, {**status, "conditions": {"Ready": {"status": "True"}}}, state)
    assert len(kube.statuses) == 2
