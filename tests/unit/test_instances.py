"""One Gitea instance per install: the groups of a second one are refused, whichever replica decides."""

from __future__ import annotations

import pytest

from reconciler.decide.instances import View, instance_of, one_instance
from reconciler.kube.objects import GroupObject
from tests.groups import spec
from webhook_scaler.gitea import instance_url as instance


def view(name: str, url: str, *, created_ms: int = 0, deleting: bool = False) -> View[GroupObject]:
    group = GroupObject("ci", name, f"uid-{name}", 1, {}, {}, deleting=deleting, created_ms=created_ms)
    return group, spec(gitea={"url": url}), ""


@pytest.mark.parametrize(
    ("a", "b"),
    [
        pytest.param("https://Gitea.example.com", "https://gitea.example.com:443/", id="host-case-and-port"),
        pytest.param("http://gitea:3000/git/", "http://gitea:3000/git", id="trailing-slash"),
    ],
)
def test_spellings_of_one_instance_are_one(a: str, b: str) -> None:
    assert instance(a) == instance(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        pytest.param("http://gitea:3000", "https://gitea:3000", id="scheme"),
        pytest.param("http://gitea:3000", "http://gitea:3001", id="port"),
        pytest.param("http://gitea:3000/a", "http://gitea:3000/b", id="path"),
    ],
)
def test_other_instances_differ(a: str, b: str) -> None:
    assert instance(a) != instance(b)


def test_the_oldest_groups_instance_is_served_and_the_others_refused_in_any_order() -> None:
    views = [
        view("young", "https://b.example", created_ms=2000),
        view("old", "https://a.example", created_ms=1000),
        view("same", "https://A.example/", created_ms=3000),
    ]
    for order in (views, views[::-1]):
        decided = {g.name: (s is not None, p) for g, s, p in one_instance(order)}
        assert decided["old"] == (True, "") and decided["same"] == (True, "")
        ok, problem = decided["young"]
        assert not ok
        assert problem.startswith("spec.gitea.url https://b.example is a second Gitea instance: this install")
        assert "serves https://a.example (RunnerGroup ci/old, the oldest)" in problem


def test_a_tie_goes_to_the_first_by_namespace_and_name_and_a_deleting_group_is_never_refused() -> None:
    views = [
        view("b", "https://b.example", created_ms=1000),
        view("a", "https://a.example", created_ms=1000),
        view("gone", "https://c.example", created_ms=500, deleting=True),
    ]
    decided = {g.name: s is not None for g, s, _ in one_instance(views)}
    # The deleting group is the oldest and keeps its spec (its drain needs it), and it is the one served.
    assert decided == {"b": False, "a": False, "gone": True}
    live = {g.name: s is not None for g, s, _ in one_instance(views[:2])}
    assert live == {"b": False, "a": True}


def test_invalid_groups_pass_through_and_none_valid_refuses_nothing() -> None:
    group = GroupObject("ci", "bad", "uid-bad", 1, {}, {})
    assert one_instance([(group, None, "broken")]) == [(group, None, "broken")]


def test_a_named_instance_is_served_beside_the_default_one_and_a_third_unnamed_one_is_refused() -> None:
    named = {"second": "https://B.example:443/"}
    views = [
        view("old", "https://a.example", created_ms=1000),
        view("oldest", "https://b.example", created_ms=500),  # named: not the default instance's
        view("third", "https://c.example", created_ms=2000),
    ]
    decided = {g.name: (s is not None, p) for g, s, p in one_instance(views, named)}
    assert decided["old"] == (True, "") and decided["oldest"] == (True, "")
    assert not decided["third"][0] and "giteaInstances (GRS_GITEA_INSTANCES, name=URL)" in decided["third"][1]
    assert [instance_of(u, named) for u in ("https://b.example", "https://a.example")] == ["second", ""]
