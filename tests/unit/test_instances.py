"""The default Gitea instance is the admin's choice: a group of any other unnamed Gitea is refused, whichever
group is oldest, whichever replica decides."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from reconciler.decide.instances import View, instance_of, one_instance
from reconciler.kube.objects import GroupObject
from reconciler.settings import Settings
from tests.groups import spec
from webhook_scaler.gitea import instance_url as instance

A, B, C = "https://a.example", "https://b.example", "https://c.example"


def view(name: str, url: str, *, created_ms: int = 0, deleting: bool = False) -> View[GroupObject]:
    group = GroupObject("ci", name, f"uid-{name}", 1, {}, {}, deleting=deleting, created_ms=created_ms)
    return group, spec(gitea={"url": url}), ""


def served(views: list[View[GroupObject]], default: str, named: dict[str, str] | None = None) -> dict[str, bool]:
    return {g.name: s is not None for g, s, _ in one_instance(views, default=default, named=named or {})}


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


def test_the_admins_default_instance_is_served_in_any_spelling_and_another_gitea_refused_saying_what_to_set() -> None:
    views = [view("other", B, created_ms=1000), view("ours", A, created_ms=2000), view("same", "https://A.example/")]
    for order in (views, views[::-1]):
        decided = {g.name: (s is not None, p) for g, s, p in one_instance(order, default=A, named={})}
        assert decided["ours"] == (True, "") and decided["same"] == (True, "")
        ok, problem = decided["other"]
        assert not ok
        assert problem.startswith(f"spec.gitea.url {B} is not a Gitea instance this install serves: its default")
        assert f"instance is {A} (GRS_GITEA_URL, the chart's gitea.url)" in problem
        assert "giteaInstances (GRS_GITEA_INSTANCES, name=URL)" in problem


@pytest.mark.parametrize("oldest", ["present", "gone", "invalid"])
def test_the_oldest_group_going_or_turning_invalid_refuses_no_other_group(oldest: str) -> None:
    """Issue 34: the oldest group was the default instance's; when it went, the next oldest (a tenant's,
    naming their own Gitea) made every other group a second instance."""
    old = view("old", A, created_ms=500)
    views = [view("tenant", C, created_ms=1000), view("team", A, created_ms=2000), view("team-too", A, created_ms=3000)]
    if oldest == "present":
        views.append(old)
    elif oldest == "invalid":
        views.append((old[0], None, "spec.labels: broken"))
    decided = served(views, A)
    assert decided["team"] and decided["team-too"] and not decided["tenant"]
    assert decided.get("old", oldest != "invalid") == (oldest != "invalid")


def test_a_tenants_group_cannot_make_its_gitea_the_default_not_even_the_only_group_with_none_set() -> None:
    tenant = view("tenant", C, created_ms=1)  # the oldest, and the first by namespace and name
    assert served([tenant, view("team", A, created_ms=2)], A) == {"tenant": False, "team": True}
    ((_, own, problem),) = one_instance([tenant], default="", named={})
    assert own is None
    assert problem.startswith(f"spec.gitea.url {C}: this install has no default Gitea instance; set GRS_GITEA_URL")
    assert "(the chart's gitea.url)" in problem


def test_a_deleting_group_is_never_refused_and_invalid_groups_pass_through() -> None:
    bad = GroupObject("ci", "bad", "uid-bad", 1, {}, {})
    assert served([view("gone", C, deleting=True), view("live", C)], A) == {"gone": True, "live": False}
    assert one_instance([(bad, None, "broken")], default="", named={}) == [(bad, None, "broken")]


def test_a_named_instance_is_served_beside_the_default_one_and_a_third_unnamed_one_is_refused() -> None:
    named = {"second": "https://B.example:443/"}
    views = [view("default", A, created_ms=1000), view("named", B, created_ms=500), view("third", C)]
    decided = {g.name: (s is not None, p) for g, s, p in one_instance(views, default=A, named=named)}
    assert decided["default"] == (True, "") and decided["named"] == (True, "")
    assert not decided["third"][0] and "giteaInstances (GRS_GITEA_INSTANCES, name=URL)" in decided["third"][1]
    assert [instance_of(u, named) for u in (B, A)] == ["second", ""]
    assert served(views, "", named) == {"default": False, "named": True, "third": False}


@pytest.mark.parametrize(
    ("settings", "default"),
    [
        pytest.param({"gitea_url": A, "gitea_urls": f"{B},{C}"}, A, id="set-wins"),
        pytest.param({"gitea_urls": A}, A, id="the-one-allowed-url"),
        pytest.param({"gitea_urls": f"{A},{B}", "gitea_instances": f"second={B}/"}, A, id="the-one-unnamed-allowed"),
        pytest.param({"gitea_urls": f"{A},{B}"}, "", id="two-unnamed-allowed: none"),
        pytest.param({"gitea_urls": B, "gitea_instances": f"second={B}"}, "", id="only-a-named-one: none"),
        pytest.param({}, "", id="nothing-set: none"),
    ],
)
def test_the_default_instance_is_set_or_the_one_unnamed_allowed_url(settings: dict[str, str], default: str) -> None:
    assert Settings(**settings).default_gitea == default


def test_the_default_instance_may_not_be_a_named_one() -> None:
    with pytest.raises(ValidationError, match="also the instance second of GRS_GITEA_INSTANCES"):
        Settings(gitea_url="https://B.example/", gitea_instances=f"second={B}")
