"""Why a group's queued jobs wait: each reason from the plan of a pass that meets it."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings

from reconciler.decide.phases import Phase, Runner
from reconciler.decide.plan import plan
from reconciler.decide.waiting import REASONS, believed, waiting
from reconciler.model.spec import RunnerGroupSpec
from tests.groups import spec
from tests.unit.test_plan import NOW, failed, job, runner, situations
from webhook_scaler.store.jobs.model import QueuedJob


def _waits(
    queued: list[QueuedJob], runners: list[Runner], *, group: RunnerGroupSpec | None = None, **kw: Any
) -> dict[str, int]:
    """What a pass reports when all its creates are made, unless `created` or `refused` say otherwise."""
    s = group or spec()
    draining = kw.pop("draining", False)
    decided = plan(queued=queued, runners=runners, spec=s, now_ms=NOW, draining=draining)
    made = dict(created=len(decided.create), in_flight=0, refused=False) | kw
    counts = waiting(s, decided, runners, draining=draining, **made)
    return {reason: n for reason, n in counts.items() if n}


@pytest.mark.parametrize(
    ("queued", "runners", "kw", "expected"),
    [
        pytest.param([], [], {}, {}, id="nothing-queued"),
        pytest.param([job(1), job(2)], [], {}, {"runnerStarting": 2}, id="runners-just-created"),
        pytest.param(
            [job(i) for i in range(1, 6)], [], {}, {"runnerStarting": 3, "maxActiveRunners": 2}, id="at-the-cap"
        ),
        pytest.param(
            [job(1), job(2)],
            [runner("r1", Phase.PENDING), runner("r2", Phase.IDLE)],
            {},
            {"runnerStarting": 2},
            id="runners-up-not-yet-picked",
        ),
        pytest.param(
            [job(i) for i in range(1, 6)],
            [runner(f"b{i}", Phase.BUSY, job_id=90 + i) for i in range(3)],
            {},
            {"maxActiveRunners": 5},
            id="the-cap-busy-with-other-jobs",
        ),
        pytest.param([job(1), job(2)], [], {"created": 0, "refused": True}, {"refused": 2}, id="creates-refused"),
        pytest.param([job(1)], [], {"created": 0, "in_flight": 1}, {"runnerStarting": 1}, id="made-by-another-replica"),
        pytest.param([job(1), job(2)], [failed("f1", NOW - 5_000)], {}, {"backoff": 2}, id="backing-off"),
        pytest.param([job(1)], [], {"draining": True}, {"deleting": 1}, id="group-deleted"),
        pytest.param(
            [job(1, queued_ms=NOW - 60_000)],
            [Runner("done", Phase.SUCCEEDED, NOW - 30_000, finished_ms=NOW - 10_000)],
            {},
            {"unconfirmed": 1},
            id="a-runner-may-have-run-it-unheard",
        ),
    ],
)
def test_each_reason(
    queued: list[QueuedJob], runners: list[Runner], kw: dict[str, Any], expected: dict[str, int]
) -> None:
    assert _waits(queued, runners, **kw) == expected


def test_a_suspended_group_says_so() -> None:
    assert _waits([job(1), job(2)], [runner("r1", Phase.IDLE)], group=spec(suspend=True)) == {
        "runnerStarting": 1,
        "suspended": 1,
    }


@settings(max_examples=300, deadline=None)
@given(situation=situations())
def test_every_queued_job_is_counted_once_under_a_known_reason(
    situation: tuple[list[QueuedJob], list[Runner], RunnerGroupSpec, frozenset[str]],
) -> None:
    queued, runners, s, in_flight = situation
    decided = plan(queued=queued, runners=runners, spec=s, now_ms=NOW, in_flight=in_flight)
    counts = waiting(s, decided, runners, created=len(decided.create), in_flight=len(in_flight), refused=False,
                     draining=False)  # fmt: skip
    assert tuple(counts) == REASONS and all(n >= 0 for n in counts.values())
    assert sum(counts.values()) == len(queued)


def test_an_aged_job_waits_for_a_poll_to_list_it_where_the_poll_works_counted_unconfirmed() -> None:
    aged, listed, fresh = (
        dataclasses.replace(job(1), aged=True),
        dataclasses.replace(job(2, listed_ms=NOW), aged=True),
        job(3),
    )
    assert [j.job_id for j in believed([aged, listed, fresh], polled=True)] == [2, 3]
    assert [j.job_id for j in believed([aged, listed, fresh], polled=False)] == [1, 2, 3]  # nothing else can tell
    s = spec()
    decided = plan(queued=believed([aged, listed, fresh], polled=True), queued_total=3, runners=[], spec=s, now_ms=NOW)
    assert [c.job_id for c in decided.create] == [2, 3]
    counts = waiting(s, decided, [], created=2, in_flight=0, refused=False, draining=False)
    assert {r: n for r, n in counts.items() if n} == {"runnerStarting": 2, "unconfirmed": 1}
