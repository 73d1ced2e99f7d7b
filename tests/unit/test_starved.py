"""`Starved`: the group's oldest queued job past the queue-time objective while jobs wait for its cap."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from reconciler.decide.status import desired_status, starved
from tests.groups import spec

AT_CAP = {"runnerStarting": 2, "maxActiveRunners": 5}


@pytest.mark.parametrize(
    ("waiting", "oldest", "status", "reason"),
    [
        pytest.param(AT_CAP, 45.0, "True", "AtMaxActiveRunners", id="past-it-at-the-cap"),
        pytest.param(AT_CAP, 30.0, "False", "WithinObjective", id="at-the-objective-itself"),
        pytest.param({"runnerStarting": 2}, 45.0, "False", "NotAtCap", id="past-it-but-runners-coming"),
        pytest.param({"backoff": 3, "maxActiveRunners": 0}, 900.0, "False", "NotAtCap", id="held-back-not-capped"),
        pytest.param({}, 0.0, "False", "WithinObjective", id="nothing-queued"),
    ],
)
def test_starved_only_past_the_objective_with_jobs_waiting_for_the_cap(
    waiting: dict[str, int], oldest: float, status: str, reason: str
) -> None:
    condition = starved(spec(maxActiveRunners=4), waiting, oldest_wait_s=oldest, objective_s=30)
    assert (condition.type, condition.status, condition.reason) == ("Starved", status, reason)
    if status == "True":
        assert "waited 45 s" in condition.message and "(30 s)" in condition.message
        assert "5 job(s) wait for the group's maxActiveRunners (4)" in condition.message


def test_a_starved_group_stays_ready_and_shows_the_condition() -> None:
    condition = starved(spec(), AT_CAP, oldest_wait_s=90, objective_s=30)
    status = desired_status(
        generation=1, previous={}, spec=spec(), counts=None, now=datetime.now(UTC), waiting=AT_CAP, invalid="",
        gitea=None, last_poll=None, failed=(), starved=condition,
    )  # fmt: skip
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Starved"]["status"] == "True"
    assert conditions["Ready"]["reason"] != "AtMaxActiveRunners", "a starved group is at work, not broken"
    without = desired_status(
        generation=1, previous={}, spec=spec(), counts=None, now=datetime.now(UTC), waiting=AT_CAP, invalid="",
        gitea=None, last_poll=None, failed=(),
    )  # fmt: skip
    assert "Starved" not in {c["type"] for c in without["conditions"]}, "no objective set: no condition"
