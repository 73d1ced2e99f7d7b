"""Gitea as several tenants see it: each API token is one user's, and administers only its own scopes.

`TenantGitea` is the fake Gitea (`tests.fake_gitea`) with one token per tenant: the runners of a scope
are listed only to a token that administers it (Gitea 1.25 asks for an owner of the repository or
org, or a site admin: 403 otherwise), `/user/...` is always the token's own user, and `GET /user`
names that user (its body checked against Gitea's spec). `FakeProver` proves every scope for the
tokens it knows, for tests whose Gitea is not served.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from aiohttp import web

from reconciler.gitea.api import GiteaError, PollScope
from tests.fake_gitea import FakeGitea, user_row


@dataclass(frozen=True, slots=True)
class Tenant:
    """One API token's user, and the scopes it administers: ("org", "acme"), ("repo", "acme/widgets"),
    ("global", "") for a site admin (every scope)."""

    login: str
    administers: frozenset[tuple[str, str]] = frozenset()


class TenantGitea(FakeGitea):
    """The fake Gitea, with an API token per tenant (`tenants`: token -> Tenant); `revoke` a token to make
    Gitea answer it 401 from then on."""

    def __init__(self, tenants: Mapping[str, Tenant]) -> None:
        super().__init__(token=next(iter(tenants)))
        self.tenants = dict(tenants)

    def revoke(self, token: str) -> None:
        """Forget the token, as Gitea does a deleted access token."""
        del self.tenants[token]

    def app(self) -> web.Application:
        """The fake Gitea's application, with `GET /user`."""
        app = super().app()
        app.router.add_get("/api/v1/user", self._user)
        return app

    def _tenant(self, request: web.Request) -> Tenant | None:
        header = request.headers.get("Authorization", "")
        return self.tenants.get(header.removeprefix("token ").removeprefix("Bearer "))

    def _scope_of(self, request: web.Request, kind: str) -> tuple[str, str]:  # type: ignore[override]
        if kind == "user":
            tenant = self._tenant(request)
            return "user", tenant.login if tenant else ""
        return FakeGitea._scope_of(request, kind)

    def _auth(self, request: web.Request, endpoint: str) -> web.Response | None:
        self.requests[endpoint] += 1
        tenant = self._tenant(request)
        if tenant is None:
            return web.json_response({"message": "token is required"}, status=401)
        kind = endpoint.split("_", 1)[0]
        if kind in ("repo", "org", "global") and not self._administers(tenant, request, kind):
            return web.json_response({"message": "user should be the owner of the repo or the org"}, status=403)
        return None

    def _administers(self, tenant: Tenant, request: web.Request, kind: str) -> bool:
        if ("global", "") in tenant.administers:
            return True
        scope = self._scope_of(request, kind)
        owner = ("org", scope[1].split("/", 1)[0])
        return scope in tenant.administers or (kind == "repo" and owner in tenant.administers)

    async def _user(self, request: web.Request) -> web.Response:
        self.requests["user"] += 1
        tenant = self._tenant(request)
        if tenant is None:
            return web.json_response({"message": "token is required"}, status=401)
        body = user_row(tenant.login)
        self._valid(self.validator.response, "/user", body)
        return self._answer("user", body)


class FakeProver:
    """Proves every scope for the API tokens it knows (`tokens`) and refuses any other (401), as a Gitea
    where those tokens are a site admin's would: for tests whose Gitea (gitea.invalid) is not served."""

    def __init__(self, *, tokens: Iterable[str]) -> None:
        self.tokens = set(tokens)

    async def prove(self, scope: PollScope) -> str:
        """See `reconciler.loop.rounds.proofs.Prover`."""
        if scope.token not in self.tokens:
            raise GiteaError("GET /admin/actions/runners: HTTP 401", status=401)
        return ""
