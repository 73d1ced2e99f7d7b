"""The controller's proofs (`reconciler.loop.rounds.proofs`): which groups a round gives jobs to, asked of a fake
Gitea (`Prover`) with the group's token read from a fake Secret store, on a clock the test moves."""

from __future__ import annotations

from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from reconciler.decide.ownership import REFUSED_HOLD, WINDOW
from reconciler.decide.status import REGISTRATION_REFUSED
from reconciler.gitea.api import GiteaError, PollScope
from reconciler.kube.api import Kube, PermanentError
from reconciler.kube.objects import GroupObject
from reconciler.loop.rounds.proofs import Ownership
from reconciler.loop.state import GroupState
from reconciler.metrics import Metrics
from reconciler.model.spec import RunnerGroupSpec
from reconciler.settings import Settings
from tests.groups import spec

T0 = 1_000_000.0
POLL = 30.0
REPO = {"scope": "repo", "repo": "acme/widgets"}


class Secrets:
    """`Kube.secret_value` over a dict: (namespace, name, key) -> value."""

    def __init__(self, values: dict[tuple[str, str, str], str]) -> None:
        self.values = values

    async def secret_value(self, namespace: str, name: str, key: str) -> str:
        try:
            return self.values[(namespace, name, key)]
        except KeyError:
            raise PermanentError(f"Secret {namespace}/{name} not found") from None


class Gitea:
    """A prover: `owners` maps a token to the scopes ((kind, target)) it administers; `down` answers 502."""

    def __init__(self, owners: dict[str, set[tuple[str, str]]]) -> None:
        self.owners = owners
        self.down = False
        self.asked: list[PollScope] = []

    async def prove(self, scope: PollScope) -> str:
        self.asked.append(scope)
        if self.down:
            raise GiteaError("GET /repos/acme/widgets/actions/runners: HTTP 502", status=502)
        if scope.token not in self.owners:
            raise GiteaError("GET /repos/acme/widgets/actions/runners: HTTP 401", status=401)
        if (scope.kind, scope.target) not in self.owners[scope.token]:
            raise GiteaError("GET /repos/acme/widgets/actions/runners: HTTP 403", status=403)
        return ""


class World:
    """An `Ownership` with its groups, their states and a clock."""

    def __init__(self, gitea: Gitea, tokens: dict[str, str]) -> None:
        self.now = T0
        self.gitea = gitea
        self.secrets = Secrets({(ns, "gitea", "api"): token for ns, token in tokens.items()})
        self.groups: dict[str, tuple[GroupObject, RunnerGroupSpec | None]] = {}
        self.states: dict[tuple[str, str], GroupState] = {}
        self.woken = 0
        self.ownership = Ownership(
            Settings(poll_interval=POLL),
            kube=cast(Kube, self.secrets),
            prover=gitea,
            metrics=Metrics.create(CollectorRegistry()),
            views=self.views,
            wake=self.wake,
            clock=lambda: self.now,
        )

    def wake(self) -> None:
        self.woken += 1

    def add(self, namespace: str, **changes: Any) -> GroupObject:
        group = GroupObject(namespace, "ci", uid=namespace, generation=1, spec={}, status={})
        self.groups[namespace] = (group, spec(**(REPO | changes)))
        return group

    def views(self) -> list[tuple[GroupObject, RunnerGroupSpec | None, str]]:
        return [(g, s, "") for g, s in self.groups.values()]

    def state_of(self, group: GroupObject) -> GroupState:
        return self.states.setdefault((group.namespace, group.name), GroupState())

    def round(self) -> tuple[set[str], set[str]]:
        """A round's standing: the namespaces of the groups left out, and of those demoted."""
        standing = self.ownership.standing(self.views(), self.state_of)
        return {k[0] for k in standing.unproven}, {k[0] for k in standing.demoted}

    def proven(self, namespace: str) -> tuple[str, str, str]:
        c = self.states[(namespace, "ci")].proven
        assert c is not None
        return c.status, c.reason, c.message

    async def prove(self) -> None:
        await self.ownership.prove_once(self.views())


async def test_a_new_group_takes_no_job_until_its_token_proved_its_scope() -> None:
    world = World(Gitea({"owner": {("repo", "acme/widgets")}}), {"ns-a": "owner"})
    world.add("ns-a")
    assert world.round() == ({"ns-a"}, set())
    assert world.proven("ns-a")[:2] == ("False", "NotProven")
    assert world.ownership.asked.is_set()  # the prover is told at once
    await world.prove()
    assert world.woken == 1
    assert world.round() == (set(), set())
    condition = world.states[("ns-a", "ci")].proven
    assert condition is not None and condition.reason == "Proven"
    world.now += 1
    world.round()
    assert world.states[("ns-a", "ci")].proven is condition  # unchanged: kept, so a pass may skip


async def test_of_two_namespaces_naming_one_repo_only_the_one_whose_token_administers_it_takes_its_jobs() -> None:
    gitea = Gitea({"owner": {("repo", "acme/widgets")}, "thief": {("org", "thief")}})
    world = World(gitea, {"ns-a": "thief", "ns-b": "owner"})
    world.add("ns-a")
    world.add("ns-b")
    await world.prove()
    assert world.round() == ({"ns-a"}, set())
    status, reason, message = world.proven("ns-a")
    assert (status, reason) == ("False", "TokenCannotAdminister")
    assert "HTTP 403" in message and "repo acme/widgets" in message
    assert "thief" not in message  # the token never appears, nor anything of it


async def test_a_revoked_token_is_found_out_at_the_next_ask_and_a_late_gitea_keeps_a_proof_its_window() -> None:
    gitea = Gitea({"owner": {("repo", "acme/widgets")}})
    world = World(gitea, {"ns-a": "owner"})
    world.add("ns-a")
    await world.prove()
    gitea.down = True
    world.now += POLL
    await world.prove()
    assert world.round() == (set(), set())  # Gitea not answering proves nothing against the token
    world.now = T0 + WINDOW
    await world.prove()
    assert world.round() == ({"ns-a"}, set())
    assert world.proven("ns-a")[:2] == ("False", "NotProven") and "HTTP 502" in world.proven("ns-a")[2]
    gitea.down = False
    world.now += POLL
    await world.prove()
    assert world.round() == (set(), set())
    del gitea.owners["owner"]  # revoked
    world.now += POLL - 1
    await world.prove()
    assert world.round() == (set(), set())  # not asked yet: asked every GRS_POLL_INTERVAL
    world.now += 1
    await world.prove()
    assert world.round() == ({"ns-a"}, set())
    assert world.proven("ns-a")[1] == "TokenCannotAdminister" and "HTTP 401" in world.proven("ns-a")[2]


async def test_groups_of_one_token_and_scope_are_asked_about_once_and_a_changed_scope_is_asked_at_once() -> None:
    gitea = Gitea({"owner": {("repo", "acme/widgets"), ("org", "acme")}})
    world = World(gitea, {"ns-a": "owner", "ns-b": "owner"})
    world.add("ns-a")
    world.add("ns-b")
    await world.prove()
    assert len(gitea.asked) == 1
    world.ownership.asked.clear()
    world.add("ns-a", scope="org", org="acme", repo=None)
    assert world.round() == ({"ns-a"}, set())  # changed: nothing until its new scope is proven
    assert world.ownership.asked.is_set()
    await world.prove()
    assert world.round() == (set(), set())
    assert [s.kind for s in gitea.asked] == ["repo", "org"]


async def test_a_token_that_cannot_be_read_proves_nothing_and_says_why() -> None:
    world = World(Gitea({}), {})
    world.add("ns-a")
    await world.prove()
    assert world.round() == ({"ns-a"}, set())
    status, reason, message = world.proven("ns-a")
    assert (status, reason) == ("False", "NotProven") and "Secret ns-a/gitea not found" in message


@pytest.mark.parametrize(
    ("refusal", "demoted"),
    [
        pytest.param(f"{REGISTRATION_REFUSED}Gitea refused the registrationToken", True, id="registration-refused"),
        pytest.param("the API server refused: exceeded quota", False, id="a-quota-is-not-gitea-refusing"),
        pytest.param("", False, id="admitted"),
    ],
)
async def test_a_group_whose_registrations_gitea_refuses_is_demoted_for_a_while_then_tries_again(
    refusal: str, demoted: bool
) -> None:
    world = World(Gitea({"owner": {("repo", "acme/widgets")}}), {"ns-a": "owner"})
    group = world.add("ns-a")
    await world.prove()
    world.state_of(group).create_refused = refusal
    assert world.round() == (set(), {"ns-a"} if demoted else set())
    world.now += REFUSED_HOLD - 1
    await world.prove()  # still proven: demoted for its registrations alone
    assert world.round() == (set(), {"ns-a"} if demoted else set())
    world.now += 1
    assert world.round() == (set(), set())
    assert world.state_of(group).create_refused == ("" if demoted else refusal)  # its next pass says again
