"""The controller's proof that a group's API token administers its scope (`reconciler.loop.rounds.proofs.GiteaProver`),
asked over HTTP of a fake Gitea of several tenants whose answers are checked against Gitea's own spec."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from reconciler.gitea.api import GiteaClient, GiteaError, PollScope
from reconciler.loop.rounds.proofs import GiteaProver
from tests.fake_tenants import Tenant, TenantGitea

Kind = Literal["global", "org", "user", "repo"]
MakeServer = Callable[[web.Application], Awaitable[TestServer]]
TENANTS = {
    "acme-owner": Tenant("alice", frozenset({("org", "acme")})),
    "repo-owner": Tenant("bob", frozenset({("repo", "acme/widgets")})),
    "other-owner": Tenant("carol", frozenset({("org", "other")})),
    "site-admin": Tenant("root", frozenset({("global", "")})),
}


@pytest.fixture
async def gitea(aiohttp_server: MakeServer) -> tuple[TenantGitea, str]:
    fake = TenantGitea(dict(TENANTS))
    server = await aiohttp_server(fake.app())
    return fake, str(server.make_url("")).rstrip("/")


async def prove(url: str, kind: Kind, target: str, token: str) -> str | int | None:
    """ "" when proven, Gitea's refusal when it said the token is another user's, else the HTTP status."""
    async with aiohttp.ClientSession() as session:
        try:
            return await GiteaProver(GiteaClient(session)).prove(PollScope(url, kind, target, token))
        except GiteaError as exc:
            return exc.status


@pytest.mark.parametrize(
    ("kind", "target", "token", "answer"),
    [
        pytest.param("org", "acme", "acme-owner", "", id="org-owner"),
        pytest.param("repo", "acme/widgets", "acme-owner", "", id="a-repo-of-its-org"),
        pytest.param("repo", "acme/widgets", "repo-owner", "", id="repo-owner"),
        pytest.param("org", "acme", "repo-owner", 403, id="a-repo-owner-is-not-the-orgs"),
        pytest.param("repo", "acme/widgets", "other-owner", 403, id="another-tenants-repo"),
        pytest.param("org", "acme", "other-owner", 403, id="another-tenants-org"),
        pytest.param("global", "", "acme-owner", 403, id="global-needs-a-site-admin"),
        pytest.param("global", "", "site-admin", "", id="site-admin"),
        pytest.param("org", "acme", "site-admin", "", id="a-site-admin-administers-every-org"),
        pytest.param("user", "alice", "acme-owner", "", id="a-users-own-token"),
        pytest.param("user", "ALICE", "acme-owner", "", id="logins-compare-case-insensitively"),
        pytest.param("org", "acme", "revoked", 401, id="revoked"),
    ],
)
async def test_a_token_proves_only_the_scopes_it_administers(
    gitea: tuple[TenantGitea, str], kind: Kind, target: str, token: str, answer: str | int
) -> None:
    _, url = gitea
    assert await prove(url, kind, target, token) == answer


async def test_a_user_scope_is_proven_only_by_that_users_own_token(gitea: tuple[TenantGitea, str]) -> None:
    # /user/actions/runners lists the token's own user's runners: it answers 200 to anyone's token.
    fake, url = gitea
    said = await prove(url, "user", "alice", "site-admin")
    assert isinstance(said, str) and "user root's, not alice's" in said
    assert fake.requests["user_runners"] == 0  # refused before the runners are asked about
