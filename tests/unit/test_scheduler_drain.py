"""A deleted group's drain ends at its deadline even when every one of its passes fails (issue 34): the pass's
own check of the deadline is never reached then, so the scheduler lets the group go."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from reconciler.kube.api import PermanentError
from reconciler.kube.objects import GroupObject
from reconciler.loop.retiring import drain, ghosts
from reconciler.loop.rounds.demand import NONE
from reconciler.loop.rounds.scheduler import Scheduler
from reconciler.metrics import Metrics
from reconciler.settings import Settings
from tests.groups import spec

DELETED_MS = 1_000_000_000_000
HOUR = 3600.0


class Kube:
    """What the scheduler writes: Events and the finalizer."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.finalizers: list[Any] = []

    async def event(self, ref: Any, *, kind: str, reason: str, message: str) -> None:
        self.events.append((reason, message))

    async def patch_finalizers(self, ref: Any, ops: Any) -> None:
        self.finalizers.append(ops)

    async def patch_status(self, ref: Any, status: Any) -> None:
        pass


class FailingPass:
    """A group pass that always fails the same way (a bug, or Gitea's answer no code foresaw)."""

    def __init__(self) -> None:
        self.runs = 0

    def jobs_of(self, group: GroupObject) -> list[Any]:
        return []

    async def run(self, *args: Any, **kwargs: Any) -> None:
        self.runs += 1
        raise ValueError("a pass that cannot succeed")


class Rows:
    """The runner rows' memory: the drain forgets a group's when it lets it go."""

    def forget(self, uid: str) -> None:
        pass


class Coordination:
    async def unlock(self, uid: str, *, holder: str) -> None:
        pass


def deleted() -> GroupObject:
    return GroupObject(
        namespace="ci", name="gone", uid="u-1", generation=2, spec={}, status={}, deleting=True,
        finalizers=(drain.FINALIZER,), deleted_ms=DELETED_MS,
    )  # fmt: skip


@pytest.mark.parametrize(("after", "let_go"), [(HOUR - 1, False), (HOUR + 1, True)], ids=["before", "after"])
async def test_a_deleted_group_whose_passes_fail_goes_at_its_deadline(after: float, let_go: bool) -> None:
    kube, passes = Kube(), FailingPass()
    now = [DELETED_MS / 1000 + after]
    scheduler = Scheduler(
        Settings(redis_url="redis://localhost:1", drain_timeout=HOUR), kube=kube,  # type: ignore[arg-type]
        coordination=Coordination(), group_pass=passes, metrics=Metrics.create(CollectorRegistry()),  # type: ignore[arg-type]
        wake=lambda: None, keep=lambda task: None, clock=lambda: now[0],
    )  # fmt: skip
    group = deleted()
    scheduler.start(group, spec(), "", NONE)  # the pass fails: a permanent error stops the group's passes
    await scheduler.state_of(group).task  # type: ignore[misc]
    assert passes.runs == 1 and scheduler.state_of(group).stopped is not None
    scheduler.start(group, spec(), "", NONE)
    task = scheduler.state_of(group).task
    if task is not None:
        await task
    await asyncio.sleep(0)
    assert passes.runs == 1, "a stopped group's pass is not run again"
    assert bool(kube.finalizers) is let_go
    assert [r for r, _ in kube.events].count("DrainTimedOut") == (1 if let_go else 0)
    if let_go:
        message = next(m for r, m in kube.events if r == "DrainTimedOut")
        assert "a pass that cannot succeed" in message


async def test_a_pass_on_the_caches_stale_copy_of_a_group_let_go_asks_nothing_and_says_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The drain lets a group go (its rows cleared, its finalizer removed, its token forgotten); the cache
    still shows it, finalizer and all, and the next pass finishes it again before the cache hears it went.
    That pass is told it is done: no call to Gitea, no DrainAbandoned (its token Secret is gone too, as
    GitOps deletes both), no second finalizer patch. Seen once on the node, where it failed the test."""
    cleared: list[str] = []

    async def clear(rows: Any, group: GroupObject, spec: Any) -> list[str]:
        cleared.append(group.uid)
        if len(cleared) > 1:
            raise PermanentError("Secret ci/gitea-runner-tokens not found")
        return []

    monkeypatch.setattr(ghosts, "clear", clear)
    kube = Kube()
    draining = drain.Drain(kube, Rows())  # type: ignore[arg-type]
    group = deleted()
    assert await draining.finish(group, spec(), [], now=DELETED_MS / 1000 + 5, drain_timeout=HOUR)
    assert await draining.finish(group, spec(), [], now=DELETED_MS / 1000 + 6, drain_timeout=HOUR)
    assert cleared == ["u-1"] and kube.events == [] and len(kube.finalizers) == 1
