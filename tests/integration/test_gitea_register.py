"""The controller's runner registration (gitea/register.py) against the fake Gitea's `Register` RPC,
which answers as Gitea 1.26's handler does (routers/api/actions/runner/runner.go)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from reconciler.gitea.api import GiteaClient, GiteaError, PollScope
from reconciler.gitea.register import Registrar, Registration, RegistrationRefused, _registration, registrar_of
from reconciler.settings import Settings
from tests.fake_gitea import REGISTRATION_TOKEN, FakeGitea
from tests.redis_server import free_port

MakeServer = Callable[[web.Application], Awaitable[TestServer]]


@pytest.fixture
async def gitea(aiohttp_server: MakeServer) -> tuple[FakeGitea, str]:
    fake = FakeGitea(token="api-token")
    server = await aiohttp_server(fake.app())
    return fake, str(server.make_url("")).rstrip("/")


async def register(url: str, token: str = REGISTRATION_TOKEN, name: str = "builders-7-ab12.0123abcd") -> Registration:
    calls: list[tuple[str, str]] = []
    async with aiohttp.ClientSession() as session:
        registrar = Registrar(session, version="gitea-runner-scaler 1", on_request=lambda e, o: calls.append((e, o)))
        try:
            return await registrar.register(url + "/", token, name=name, labels=["k8s", "linux"])
        finally:
            assert calls and calls[-1][0] == "register"


async def test_a_runner_is_registered_ephemeral_with_its_label_names(gitea: tuple[FakeGitea, str]) -> None:
    fake, url = gitea
    done = await register(url)
    (row,) = fake.runners.values()
    assert (done.id, done.name) == (row["id"], "builders-7-ab12.0123abcd")
    assert len(done.uuid) == 36 and len(done.token) == 40
    assert row["ephemeral"] is True and row["status"] == "offline" and row["_scope"] == ("org", "acme")
    assert [label["name"] for label in row["labels"]] == ["k8s", "linux"]
    assert done.token not in repr(done)


async def test_a_token_gitea_does_not_know_is_a_refusal_that_never_shows_the_token(
    gitea: tuple[FakeGitea, str],
) -> None:
    fake, url = gitea
    with pytest.raises(RegistrationRefused) as refused:
        await register(url, token="stale-registration-token")
    assert "runner registration token not found" in str(refused.value)
    assert "stale-registration-token" not in str(refused.value) and not fake.runners


async def test_an_unavailable_gitea_is_a_failure_to_retry_not_a_refusal(gitea: tuple[FakeGitea, str]) -> None:
    fake, url = gitea
    fake.fail_with = 503
    with pytest.raises(GiteaError) as failed:
        await register(url)
    assert not isinstance(failed.value, RegistrationRefused) and failed.value.status == 503
    with pytest.raises(GiteaError) as unreachable:
        await register(f"http://127.0.0.1:{free_port()}")
    assert not isinstance(unreachable.value, RegistrationRefused) and "ClientConnectorError" in str(unreachable.value)


async def test_a_register_gitea_answers_too_late_is_a_failure_to_retry_and_the_default_waits_for_a_burst(
    gitea: tuple[FakeGitea, str],
) -> None:
    """A Gitea kept busy by a burst of registrations answers after the Registrar's timeout: a failure
    to retry (that runner's create fails, see `registrations`), not a refusal. The controller waits
    30 s by default (GRS_REGISTER_TIMEOUT), not the 10 s of its other Gitea calls: a Register writes to
    Gitea's database and took 12.8 s (median) in a burst of 200 runners."""
    fake, url = gitea
    fake.register_held = asyncio.Event()
    async with aiohttp.ClientSession() as session:
        with pytest.raises(GiteaError) as late:
            await Registrar(session, version="v", timeout=0.2).register(url, REGISTRATION_TOKEN, name="n", labels=[])
        fake.register_held.set()
        default = registrar_of(GiteaClient(session, timeout=Settings().gitea_timeout))
    assert not isinstance(late.value, RegistrationRefused) and "TimeoutError" in str(late.value)
    assert default.timeout.total == Settings().register_timeout == 30.0


def test_a_gitea_that_does_not_make_the_runner_ephemeral_is_refused() -> None:
    """Gitea < 1.24 ignores `ephemeral`: its runner would stay as an idle row after its one job."""
    answer = b'{"runner": {"id": "3", "uuid": "u", "token": "t", "name": "n"}}'
    with pytest.raises(RegistrationRefused, match="did not make it ephemeral"):
        _registration(answer, name="n", url="http://g")
    assert _registration(answer.replace(b'"n"}', b'"n", "ephemeral": true}'), name="n", url="http://g").id == 3


SCOPES = [
    pytest.param(PollScope("", "repo", "acme/widgets", "api-token"), ("repo", "acme/widgets"), id="repo"),
    pytest.param(PollScope("", "org", "acme", "api-token"), ("org", "acme"), id="org"),
    pytest.param(PollScope("", "user", "acme", "api-token"), ("user", "acme"), id="user"),
    pytest.param(PollScope("", "global", "", "api-token"), ("global", ""), id="global"),
]


@pytest.mark.parametrize(("scope", "kept"), SCOPES)
async def test_a_scopes_registration_token_is_fetched_with_its_api_token_and_its_runners_land_there(
    gitea: tuple[FakeGitea, str], scope: PollScope, kept: tuple[str, str]
) -> None:
    """`POST {scope}/actions/runners/registration-token` (the admin one for the instance) answers the
    scope's token in the body; a runner registered with it is shown by its scope's `GET …/runners/{id}`."""
    fake, url = gitea
    scope = dataclasses.replace(scope, url=url)
    async with aiohttp.ClientSession() as session:
        registrar = registrar_of(GiteaClient(session))
        token = await registrar.registration_token(scope)
        assert token == await registrar.registration_token(scope), "the call does not rotate it"
        done = await registrar.register(url, token, name="builders-7-ab12.0123abcd", labels=["k8s"])
        assert fake.runners[done.id]["_scope"] == kept and fake.registration_tokens[token] == kept
        assert await registrar.holds(scope, done.id)
        assert await registrar.orgs(scope) == ["acme"]
        assert await registrar.unregister(scope, done.id) and not fake.runners
        assert not await registrar.holds(scope, done.id) and not await registrar.unregister(scope, done.id)
    assert fake.requests[f"{scope.kind}_registration_token"] == 2


async def test_a_runner_of_another_scope_is_not_held_there_and_a_token_without_write_is_refused(
    gitea: tuple[FakeGitea, str],
) -> None:
    """Gitea shows a runner only in its own scope (the admin endpoints show every one); a token that may
    not fetch a scope's registration token gets a GiteaError with the status, never a token."""
    fake, url = gitea
    org, user = PollScope(url, "org", "acme", "api-token"), PollScope(url, "user", "acme", "api-token")
    done = await register(url)  # the org's token
    async with aiohttp.ClientSession() as session:
        registrar = registrar_of(GiteaClient(session))
        assert await registrar.holds(org, done.id) and not await registrar.holds(user, done.id)
        assert await registrar.holds(dataclasses.replace(org, kind="global", target=""), done.id)
        assert not await registrar.unregister(user, done.id) and fake.runners
        fake.refused.add("user_registration_token")
        with pytest.raises(GiteaError) as refused:
            await registrar.registration_token(user)
    assert refused.value.status == 403 and "registration-token" in str(refused.value)
    assert not [t for t in fake.registration_tokens if t in str(refused.value)]
