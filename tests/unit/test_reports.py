"""`RunnerCreated` Events wait behind the creates in flight, and come one per group."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from reconciler import reports as reports_module
from reconciler.manifests import GroupRef
from reconciler.reports import Reports

A, B = GroupRef("ci", "a", "uid-a"), GroupRef("ci", "b", "uid-b")


class Events:
    """A Kube stand-in that records the Events sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str, str]] = []

    async def event(self, group: GroupRef, *, kind: str, reason: str, message: str) -> None:
        self.sent.append((group.name, kind, reason, message))


def new_reports() -> tuple[Reports, Events, list[asyncio.Task[None]]]:
    kube, kept = Events(), list[asyncio.Task[None]]()
    return Reports(cast(Any, kube), kept.append), kube, kept


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
    reports, kube, kept = new_reports()
    with reports.creates():
        reports.created(A, ["1"])
        await asyncio.wait_for(kept[0], 5)
        assert kube.sent == [("a", "Normal", "RunnerCreated", "Created 1 runner(s) for jobs: 1")]
        assert reports.creating == 1
