"""A group's registration token (`loop/registrations.py`, `loop/registration_scopes.py`) against the fake
Gitea, which registers each runner in its token's scope and shows it only there: without
`registrationToken` the token is the group's scope's own, fetched with the API token, kept a minute and
fetched again when Gitea refuses it; a token the Secret gives is checked once to register in the group's
scope, and one of another scope starts nothing and leaves no row."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from reconciler.decide.status import REGISTRATION_REFUSED, SCOPE_MISMATCH
from reconciler.gitea.api import GiteaClient
from reconciler.gitea.register import Registrar, Registration, registrar_of
from reconciler.kube.api import Kube, PermanentError, TransientError
from reconciler.loop.passes.registrations import REFUSED, TOKEN_TTL_S, Registrations
from reconciler.model.spec import RunnerGroupSpec
from tests.fake_gitea import REGISTRATION_TOKEN, FakeGitea, FakeRegistrar
from tests.groups import spec

MakeServer = Callable[[web.Application], Awaitable[TestServer]]
API_TOKEN = "api-token"
NS = "ci"


class Secrets:
    """The API server as registration reads it: Secret keys by (namespace, name, key)."""

    def __init__(self, values: dict[tuple[str, str, str], str]) -> None:
        self.values = values
        self.reads: Counter[tuple[str, str, str]] = Counter()

    async def secret_value(self, namespace: str, name: str, key: str) -> str:
        self.reads[(namespace, name, key)] += 1
        if (namespace, name, key) not in self.values:
            raise PermanentError(f"Secret {namespace}/{name} not found")
        return self.values[(namespace, name, key)]


class Clock:
    """A monotonic clock that moves only when the test says."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Rig:
    fake: FakeGitea
    url: str
    registrations: Registrations
    secrets: Secrets
    clock: Clock

    def spec(self, **changes: Any) -> RunnerGroupSpec:
        return spec(gitea={"url": self.url}, **changes)

    async def register(self, group: RunnerGroupSpec, runner: str) -> dict[str, Any]:
        """Register `runner`; the row Gitea made for it."""
        await self.registrations.register(NS, group, runner)
        (row,) = [r for r in self.fake.runners.values() if r["name"] == runner]
        return row


@pytest.fixture
async def rig(aiohttp_server: MakeServer) -> AsyncIterator[Rig]:
    fake = FakeGitea(token=API_TOKEN)
    url = str((await aiohttp_server(fake.app())).make_url("")).rstrip("/")
    secrets = Secrets({(NS, "gitea", "api"): API_TOKEN, (NS, "gitea", "reg"): REGISTRATION_TOKEN})
    clock = Clock()
    async with aiohttp.ClientSession() as session:
        registrar = registrar_of(GiteaClient(session))
        yield Rig(fake, url, Registrations(cast(Kube, secrets), registrar, clock=clock), secrets, clock)


USER = {"scope": "user", "user": "acme", "org": None}
REPO = {"scope": "repo", "repo": "acme/widgets", "org": None}
GLOBAL = {"scope": "global", "org": None}


@pytest.mark.parametrize(
    ("changes", "scope"),
    [
        pytest.param(USER, ("user", "acme"), id="user"),
        pytest.param(REPO, ("repo", "acme/widgets"), id="repo"),
        pytest.param({}, ("org", "acme"), id="org"),
        pytest.param(GLOBAL, ("global", ""), id="global"),
    ],
)
async def test_without_a_registration_token_runners_register_with_the_scopes_own_fetched_once_a_minute(
    rig: Rig, changes: dict[str, Any], scope: tuple[str, str]
) -> None:
    """No `registrationToken`: the API token fetches the group's scope's registration token, and the runner
    registers there. The token is kept: the next runner costs no fetch; a minute later it is fetched again."""
    group = rig.spec(registrationToken=None, **changes)
    endpoint = f"{scope[0]}_registration_token"
    assert (await rig.register(group, "ci-1-0.aaaa"))["_scope"] == scope
    assert (await rig.register(group, "ci-2-0.bbbb"))["_scope"] == scope
    assert rig.fake.requests[endpoint] == 1, "one fetch for two runners"
    rig.clock.now += TOKEN_TTL_S
    await rig.register(group, "ci-3-0.cccc")
    assert rig.fake.requests[endpoint] == 2
    assert rig.fake.requests[scope[0] + "_runner"] == 0, "a token the scope gave needs no check"


async def test_a_kept_token_gitea_refuses_is_fetched_again_and_tried_once_more(rig: Rig) -> None:
    """The scope's token was reset in Gitea (its web UI) while the controller kept the old one: the
    Register it refuses drops it, the new one is fetched, and the runner registers with it."""
    group = rig.spec(registrationToken=None, **USER)
    await rig.register(group, "ci-1-0.aaaa")
    (old,) = [t for t, s in rig.fake.registration_tokens.items() if s == ("user", "acme")]
    del rig.fake.registration_tokens[old]
    rig.fake.registration_tokens["a-new-token"] = ("user", "acme")
    assert (await rig.register(group, "ci-2-0.bbbb"))["_scope"] == ("user", "acme")
    assert rig.fake.requests["user_registration_token"] == 2 and rig.fake.requests["register"] == 3
    # A token just fetched that Gitea refuses (reset again at once) is a refusal, not fetched a third time.
    rig.fake.after["user_registration_token"] = rig.fake.registration_tokens.clear
    rig.clock.now += TOKEN_TTL_S
    with pytest.raises(TransientError) as refused:
        await rig.register(group, "ci-3-0.cccc")
    assert refused.value.refused == REFUSED and str(refused.value).startswith(REGISTRATION_REFUSED)
    assert "registration token of user acme it gave the API token" in str(refused.value)
    assert rig.fake.requests["user_registration_token"] == 3 and rig.fake.requests["register"] == 4


async def test_an_api_token_that_may_not_fetch_the_registration_token_says_which_scope_it_needs(rig: Rig) -> None:
    """An API token with `read:` only (403): no runner is registered, and the refusal names the Secret
    and the token scope it lacks, never a token."""
    rig.fake.refused.add("org_registration_token")
    with pytest.raises(TransientError) as refused:
        await rig.register(rig.spec(registrationToken=None), "ci-1-0.aaaa")
    said = str(refused.value)
    assert refused.value.refused == REFUSED and said.startswith(REGISTRATION_REFUSED), said
    assert f"authToken (Secret {NS}/gitea, key api)" in said and "org acme" in said, said
    assert "HTTP 403" in said and "it needs write:organization" in said, said
    assert API_TOKEN not in said and not rig.fake.runners and rig.fake.requests["register"] == 0


@pytest.mark.parametrize(
    ("changes", "landed"),
    [
        pytest.param(USER, "in org acme", id="user-group-given-the-orgs-token"),
        pytest.param(REPO, "in org acme", id="repo-group-given-its-owners-token"),
        pytest.param(GLOBAL, "in org acme", id="global-group-given-an-orgs-token"),
    ],
)
async def test_a_given_token_of_another_scope_starts_nothing_leaves_no_row_and_is_checked_once(
    rig: Rig, changes: dict[str, Any], landed: str
) -> None:
    """The group's Secret gives the org's registration token to a group of another scope: the runner it
    registered is not in the group's scope, so its row is deleted where it landed and the create is
    refused, naming both scopes. The verdict is kept: the next runners cost no Register at all."""
    group = rig.spec(**changes)
    where = "the instance" if group.scope == "global" else f"{group.scope} {group.target}"
    for runner in ("ci-1-0.aaaa", "ci-2-0.bbbb", "ci-3-0.cccc"):
        with pytest.raises(TransientError) as refused:
            await rig.registrations.register(NS, group, runner)
        said = str(refused.value)
        assert refused.value.refused == REFUSED and said.startswith(SCOPE_MISMATCH), said
        assert f"registrationToken (Secret {NS}/gitea, key reg) is not of the group's scope ({where})" in said
        assert f"runner ci-1-0.aaaa registered {landed}; its row was deleted through" in said, said
        assert REGISTRATION_TOKEN not in said and API_TOKEN not in said
    assert not rig.fake.runners and rig.fake.deleted == [1], "the one row made went"
    assert rig.fake.requests["register"] == 1, "the token was checked once, not once per runner"


async def test_a_new_token_in_the_secret_is_checked_again_and_one_of_the_groups_scope_starts_runners(
    rig: Rig,
) -> None:
    """The verdict is the token's: once the Secret holds the user's own registration token (read again
    after a minute), it is checked once, and runners start with it."""
    group = rig.spec(**USER)
    with pytest.raises(TransientError):
        await rig.register(group, "ci-1-0.aaaa")
    rig.fake.registration_tokens["the-users-token"] = ("user", "acme")
    rig.secrets.values[(NS, "gitea", "reg")] = "the-users-token"
    rig.clock.now += TOKEN_TTL_S
    for runner in ("ci-2-0.bbbb", "ci-3-0.cccc"):
        assert (await rig.register(group, runner))["_scope"] == ("user", "acme")
    assert rig.fake.requests["user_runner"] == 2, "one check of each token"


async def test_a_row_the_api_token_cannot_reach_is_left_and_the_refusal_says_so(rig: Rig) -> None:
    """A user group's API token that sees no org and is no site admin: the runner registered with the org's
    token cannot be found nor deleted; the refusal says where its row is left, and why."""
    rig.fake.orgs = []
    rig.fake.refused.add("global_runner_delete")
    with pytest.raises(TransientError) as refused:
        await rig.register(rig.spec(**USER), "ci-1-0.aaaa")
    said = str(refused.value)
    assert "runner ci-1-0.aaaa registered outside it; its row (id 1) is left in Gitea" in said, said
    assert "the instance: DELETE /admin/actions/runners/1: HTTP 403" in said, said
    assert list(rig.fake.runners) == [1]


class Held(FakeRegistrar):
    """A Register that waits for `release`: the first runner of a token in flight."""

    def __init__(self) -> None:
        super().__init__(tokens={REGISTRATION_TOKEN})
        self.release = asyncio.Event()

    async def register(self, url: str, token: str, *, name: str, labels: Sequence[str]) -> Registration:
        await self.release.wait()
        return await super().register(url, token, name=name, labels=labels)


async def test_runners_created_at_once_wait_for_the_first_ones_verdict() -> None:
    """Three creates of a pass at once, with a token not checked yet: one registers, the others wait for
    its verdict (here: a match), then register; one check in all, not three."""
    registrar = Held()
    checks: list[int] = []

    async def holds(scope: Any, runner_id: int) -> bool:
        checks.append(runner_id)
        return True

    registrar.holds = holds  # type: ignore[method-assign]
    secrets = Secrets({(NS, "gitea", "api"): API_TOKEN, (NS, "gitea", "reg"): REGISTRATION_TOKEN})
    registrations = Registrations(cast(Kube, secrets), cast(Registrar, registrar))
    group = spec(**USER)
    tasks = [asyncio.create_task(registrations.register(NS, group, f"ci-{i}-0.aaaa")) for i in range(3)]
    for _ in range(20):  # no I/O here: every task runs until it waits, on the Register or on the verdict
        await asyncio.sleep(0)
    assert not any(t.done() for t in tasks)
    registrar.release.set()
    await asyncio.gather(*tasks)
    assert checks == [1] and len(registrar.registered) == 3
