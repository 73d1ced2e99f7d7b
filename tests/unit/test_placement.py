"""The admin's placement of runner Pods (GRS_RUNNER_PLACEMENT): read once at start, refused when it is not
one, and a change of it makes the runners made before it outdated (idle ones are replaced)."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from pydantic import ValidationError

from reconciler.decide.phases import Phase
from reconciler.kube.manifests import GroupRef, build_job
from reconciler.kube.objects import GroupObject, job_from
from reconciler.kube.placement import Nodes, Placement
from reconciler.loop.passes.group_pass import GroupPass
from reconciler.settings import Settings
from tests.groups import spec
from webhook_scaler.store.seats.model import Activity

GROUP = GroupObject("team-a", "builders", "uid-1", 1, {}, {})
TAINT = {"key": "dedicated", "operator": "Equal", "value": "team-a", "effect": "NoExecute"}


@pytest.mark.parametrize(
    ("text", "said"),
    [
        pytest.param("{nodeSelector: {}}", "GRS_RUNNER_PLACEMENT is not JSON", id="not-json"),
        pytest.param('{"nodeSelector": {"a": "b"}}', "GRS_RUNNER_PLACEMENT has unknown keys nodeSelector", id="flat"),
        pytest.param('{"default": []}', "GRS_RUNNER_PLACEMENT default must be an object", id="default-list"),
        pytest.param(
            '{"namespaces": {"ci": {"nodeSelector": {"pool": 1}}}}',
            "GRS_RUNNER_PLACEMENT namespaces.ci.nodeSelector maps node labels to values, both strings",
            id="selector-number",
        ),
        pytest.param(
            '{"default": {"tolerations": {"key": "a"}}}',
            "GRS_RUNNER_PLACEMENT default.tolerations must be a list of tolerations",
            id="tolerations-object",
        ),
        pytest.param(
            '{"default": {"tolerations": [{"key": "a", "operator": "In"}]}}',
            "GRS_RUNNER_PLACEMENT default.tolerations[0].operator must be one of Equal, Exists",
            id="operator",
        ),
        pytest.param(
            '{"default": {"tolerations": [{"key": "a", "effect": "NoSchedul"}]}}',
            "default.tolerations[0].effect must be one of NoSchedule, PreferNoSchedule, NoExecute",
            id="effect",
        ),
        pytest.param(
            '{"default": {"tolerations": [{"key": "a", "tolerationSecond": 5}]}}',
            "default.tolerations[0] has unknown keys tolerationSecond",
            id="typo",
        ),
    ],
)
def test_a_placement_that_is_not_one_refuses_to_start_saying_where(text: str, said: str) -> None:
    with pytest.raises(ValidationError, match=said.replace("[", r"\[").replace("]", r"\]")):
        Settings(runner_placement=text)


def test_a_namespace_entry_sets_each_field_it_names_instead_of_the_defaults() -> None:
    placement = Placement.parse(
        json.dumps(
            {
                "default": {"nodeSelector": {"pool": "ci"}, "tolerations": [TAINT]},
                "namespaces": {"team-a": {"nodeSelector": {"pool": "team-a"}}, "open": {"tolerations": []}},
            }
        )
    )
    assert placement.of("team-a") == Nodes(node_selector={"pool": "team-a"}, tolerations=(TAINT,))
    assert placement.of("open") == Nodes(node_selector={"pool": "ci"}, tolerations=())
    assert placement.of("elsewhere") == Nodes(node_selector={"pool": "ci"}, tolerations=(TAINT,))
    assert not Placement.parse("").of("ci") and Settings().placement == Placement()


def test_runners_made_before_the_admin_changed_the_placement_are_outdated() -> None:
    """The template hash the pass compares a runner Job's with covers its namespace's placement, so a
    warm runner on a node the admin no longer gives its namespace is replaced (`plan`: outdated idle)."""
    s = spec()
    before = build_job(GroupRef("team-a", "builders", "uid-1"), s, name="builders-warm-ab12", job_id=None)
    before["metadata"]["uid"] = "job-uid"
    before["metadata"]["creationTimestamp"] = "2027-01-15T08:00:00Z"
    job = job_from(before)

    def outdated(settings: Settings) -> bool:
        group_pass = GroupPass(
            settings,
            kube=cast(Any, None),
            coordination=cast(Any, None),
            rows=cast(Any, NeverBusy()),
            metrics=cast(Any, None),
            wake=lambda _state, _at: None,
            reports=cast(Any, None),
            registrations=cast(Any, None),
        )
        group_pass.jobs_by_group = {("team-a", "builders"): [job]}
        (runner,) = group_pass.runners(GROUP, Activity(set(), {}), s)
        assert runner.phase is Phase.PENDING
        return runner.outdated

    assert not outdated(Settings())
    moved = {"namespaces": {"team-a": {"nodeSelector": {"pool": "team-a"}, "tolerations": [TAINT]}}}
    assert outdated(Settings(runner_placement=json.dumps(moved)))
    elsewhere = {"namespaces": {"team-b": {"nodeSelector": {"pool": "team-b"}}}}
    assert not outdated(Settings(runner_placement=json.dumps(elsewhere))), "another namespace's placement"


class NeverBusy:
    def busy(self, namespace: str, name: str) -> bool:
        return False
