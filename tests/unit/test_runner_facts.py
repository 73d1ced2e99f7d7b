"""Gitea's word on a runner counts for that runner's Job, never for an earlier one of the same name.

A runner Job's name comes back once the Job before it is gone (the n-th runner of a job, a group
recreated); Redis keeps what Gitea said about runners by name for a day. A runner's own name in Gitea
never comes back (the Job's name and a tag, see `reconciler.model.names`). For runner Jobs of an earlier
release, named in Gitea like the Job, a fact recorded before the Job was created is about another
runner."""

from __future__ import annotations

from typing import Any, cast

import pytest

from reconciler.decide.phases import Phase
from reconciler.kube.objects import GroupObject, JobObject, PodObject
from reconciler.loop.passes.group_pass import FACT_SKEW_MS, GroupPass
from reconciler.settings import Settings
from webhook_scaler.store.seats.model import Activity

GROUP = GroupObject("ci", "builders", "uid-1", 1, {}, {})
CREATED_MS = 1_800_000_000_000


class NeverBusy:
    def busy(self, namespace: str, name: str) -> bool:
        return False


def make(*, now_ms: int = CREATED_MS) -> GroupPass:
    return GroupPass(
        Settings(poll_interval=30),
        kube=cast(Any, None),
        coordination=cast(Any, None),
        rows=cast(Any, NeverBusy()),
        metrics=cast(Any, None),
        wake=lambda _state, _at: None,
        reports=cast(Any, None),
        registrations=cast(Any, None),
        clock=lambda: now_ms / 1000,
    )


def phase(activity: Activity, *, runner_name: str = "") -> Phase:
    group_pass = make()
    job = JobObject("ci", "builders-7-0", "builders", 7, CREATED_MS, "", "", runner_name=runner_name)
    group_pass.jobs_by_group = {("ci", "builders"): [job]}
    pod = PodObject("ci", "builders-7-0-x", "builders-7-0", "Running", CREATED_MS, CREATED_MS + 3000)
    group_pass.pods_by_job = {("ci", "builders-7-0"): [pod]}
    (runner,) = group_pass.runners(GROUP, activity, None)
    return runner.phase


@pytest.mark.parametrize(
    ("at_ms", "busy", "done"),
    [
        pytest.param(CREATED_MS - 3600_000, Phase.IDLE, Phase.IDLE, id="an hour before the Job: another runner's"),
        pytest.param(CREATED_MS - FACT_SKEW_MS - 1, Phase.IDLE, Phase.IDLE, id="just past the clocks' skew"),
        pytest.param(CREATED_MS - FACT_SKEW_MS, Phase.BUSY, Phase.FINISHING, id="within the clocks' skew"),
        pytest.param(CREATED_MS + 5000, Phase.BUSY, Phase.FINISHING, id="after the Job: this runner's"),
    ],
)
def test_a_fact_counts_only_if_it_is_not_older_than_the_job(at_ms: int, busy: Phase, done: Phase) -> None:
    name = "builders-7-0"
    assert phase(Activity({name}, {}, busy_ms={name: at_ms})) is busy
    assert phase(Activity(set(), {name: at_ms})) is done


def test_a_runner_is_known_by_its_own_name_in_gitea_not_its_jobs() -> None:
    """The Job's name is given again; its runner's is not: Gitea's word about the bare Job name (an
    earlier runner of the name, even one recorded after this Job was created) is not about this one."""
    earlier, own, at = "builders-7-0", "builders-7-0.1f2e3d4c", CREATED_MS + 5000
    assert phase(Activity({earlier}, {}, busy_ms={earlier: at}), runner_name=own) is Phase.IDLE
    assert phase(Activity(set(), {earlier: at}), runner_name=own) is Phase.IDLE
    assert phase(Activity({own}, {}, busy_ms={own: at}), runner_name=own) is Phase.BUSY
    assert phase(Activity(set(), {own: at}), runner_name=own) is Phase.FINISHING


def test_with_no_fact_a_running_runner_is_idle() -> None:
    assert phase(Activity(set(), {})) is Phase.IDLE


def finished(finished_ms: int, kind: str, activity: Activity, *, now_ms: int) -> tuple[Phase, bool]:
    """A runner Job that finished at `finished_ms`, seen at `now_ms`: its phase, and whether it was heard of."""
    group_pass = make(now_ms=now_ms)
    job = JobObject("ci", "builders-7-0", "builders", 7, CREATED_MS, kind, "", finished_ms=finished_ms)
    group_pass.jobs_by_group = {("ci", "builders"): [job]}
    asked = group_pass._asked([job])
    (runner,) = group_pass.runners(GROUP, activity, None, asked=asked)
    return runner.phase, runner.heard


def test_a_runner_finished_within_two_polls_is_asked_about_an_older_one_is_taken_as_heard_of() -> None:
    """Gitea's word is read for runner Jobs that finished within two polls (+10 s), so one that ran a job
    nobody told of holds back a runner for it (`plan._ran_unheard`), and one that died during its job is
    reported lost. An older one is not asked about: by then a poll has told, so it holds back nothing."""
    done_at = CREATED_MS + 60_000
    silent = Activity(set(), {})
    assert finished(done_at, "Complete", silent, now_ms=done_at + 69_000) == (Phase.SUCCEEDED, False)
    assert finished(done_at, "Complete", silent, now_ms=done_at + 71_000) == (Phase.SUCCEEDED, True)
    told = Activity({"builders-7-0"}, {}, busy_ms={"builders-7-0": CREATED_MS + 1000})
    assert finished(done_at, "Failed", told, now_ms=done_at + 69_000) == (Phase.FAILED, True)
    assert finished(done_at, "Failed", told, now_ms=done_at + 71_000) == (Phase.FAILED, False)
