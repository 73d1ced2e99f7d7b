"""The controller's runner registration (gitea/register.py) against the fake Gitea's `Register` RPC,
which answers as Gitea 1.26's handler does (routers/api/actions/runner/runner.go)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from reconciler.gitea.api import GiteaError
from reconciler.gitea.register import Registrar, Registration, RegistrationRefused, _registration
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


def test_a_gitea_that_does_not_make_the_runner_ephemeral_is_refused() -> None:
    """Gitea < 1.24 ignores `ephemeral`: its runner would stay as an idle row after its one job."""
    answer = b'{"runner": {"id": "3", "uuid": "u", "token": "t", "name": "n"}}'
    with pytest.raises(RegistrationRefused, match="did not make it ephemeral"):
        _registration(answer, name="n", url="http://g")
    assert _registration(answer.replace(b'"n"}', b'"n", "ephemeral": true}'), name="n", url="http://g").id == 3
