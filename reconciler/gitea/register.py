"""Registering each runner with Gitea from the controller, so that no registration token reaches a node.

Gitea's runner `Register` RPC (connect over HTTP with JSON, `{url}/api/actions/runner.v1.RunnerService/
Register`, as act_runner's `register` calls it) takes the registration token and the runner's name and
label names, and answers the new runner's id, uuid and own token. That credential is all a runner Pod
gets (`manifests.runner_file`, in a Secret its Job owns); the registration token stays here.

Gitea answers a bad token with an error whose message says so (connect code `unknown`, HTTP 500: the
handler returns plain errors), so refusals are told from failures by those messages and by the 4xx
codes a proxy or a later Gitea may use: `RegistrationRefused` (retrying is no use until the token
changes) apart from `GiteaError` (unreachable, 5xx: retried). Beside the RPC, a Registrar reaches the
REST endpoints of registration (`registration_tokens`): a scope's registration token, and a new
runner's row asked for in one scope, then deleted where it should not be. Must not touch Redis or
Kubernetes, and never logs or raises a token.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import aiohttp

from reconciler.gitea import registration_tokens
from reconciler.gitea.api import GiteaClient, GiteaError, PollScope
from webhook_scaler.config import DISTRIBUTION, version

PATH = "/api/actions/runner.v1.RunnerService/Register"
# How long a Register may take by default (`GRS_REGISTER_TIMEOUT`): it writes to Gitea's database, which a
# burst of runners keeps busy (12.8 s median measured, docs/benchmarks.md); the controller renews the seat
# of a runner whose Register was slow (`seating`), so its create's deadline does not bound this.
TIMEOUT_S = 30.0
# Gitea's own words for a registration it refuses (routers/api/actions/runner/runner.go).
_REFUSALS = ("missing runner token", "registration token", "owner of the token", "repository of the token")
_REFUSED_CODES = {"invalid_argument", "unauthenticated", "permission_denied", "not_found"}


class RegistrationRefused(GiteaError):
    """Gitea refused the registration token (or the request): a new try needs a new token."""


class NotEphemeral(RegistrationRefused):
    """Gitea registered the runner but not as ephemeral (before 1.24): no token makes it do so."""


@dataclass(frozen=True, slots=True)
class Registration:
    """A runner Gitea registered: its row's id, its uuid and name, and its own token."""

    id: int
    uuid: str
    name: str
    token: str = field(repr=False)


class Registrar:
    """Registers runners over one aiohttp session (the reconciler's way out to Gitea); `gitea`: the REST
    client of registration's other calls (default: one over the same session)."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        version: str,
        timeout: float = TIMEOUT_S,
        on_request: Callable[[str, str], None] | None = None,
        gitea: GiteaClient | None = None,
    ) -> None:
        self.session = session
        self.version = version
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self._on_request = on_request or (lambda endpoint, outcome: None)
        self.gitea = gitea or GiteaClient(session, on_request=self._on_request)

    async def registration_token(self, scope: PollScope) -> str:
        """The scope's registration token, fetched with its API token (`registration_tokens.fetch`)."""
        return await registration_tokens.fetch(self.gitea, scope)

    async def holds(self, scope: PollScope, runner_id: int) -> bool:
        """Whether the scope holds the runner's row (`registration_tokens.holds`)."""
        return await registration_tokens.holds(self.gitea, scope, runner_id)

    async def orgs(self, scope: PollScope) -> list[str]:
        """The orgs of the scope's API token's user (`registration_tokens.orgs`)."""
        return await registration_tokens.orgs(self.gitea, scope)

    async def unregister(self, scope: PollScope, runner_id: int) -> bool:
        """Delete the runner's row through the scope; False if it holds none (`registration_tokens.remove`)."""
        return await registration_tokens.remove(self.gitea, scope, runner_id)

    async def register(self, url: str, token: str, *, name: str, labels: Sequence[str]) -> Registration:
        """Register one ephemeral runner named `name` with label names `labels` at the Gitea `url`."""
        body = {"name": name, "token": token, "version": self.version, "labels": list(labels), "ephemeral": True}
        headers = {"Content-Type": "application/json", "Connect-Protocol-Version": "1"}
        try:
            async with self.session.post(
                url.rstrip("/") + PATH, data=json.dumps(body), headers=headers, timeout=self.timeout
            ) as resp:
                answer = await resp.read()
                status = resp.status
        except (TimeoutError, aiohttp.ClientError) as exc:
            self._on_request("register", "error")
            raise GiteaError(f"registering runner {name} at {url}: {type(exc).__name__}") from None
        self._on_request("register", "ok" if status == 200 else str(status))
        if status != 200:
            raise _refusal(answer, status, name=name, url=url)
        return _registration(answer, name=name, url=url)


def _refusal(answer: bytes, status: int, *, name: str, url: str) -> GiteaError:
    """The error for a non-200 answer: a refusal when Gitea says the token is at fault."""
    try:
        error = json.loads(answer)
        code, message = str(error.get("code") or ""), str(error.get("message") or "")[:300]
    except (ValueError, AttributeError):
        code, message = "", ""
    said = f"registering runner {name} at {url}: HTTP {status}" + (f" {code}: {message}" if code or message else "")
    if code in _REFUSED_CODES or any(r in message for r in _REFUSALS):
        return RegistrationRefused(said, status=status)
    return GiteaError(said, status=status)


def _registration(answer: bytes, *, name: str, url: str) -> Registration:
    """The runner in a 200 answer; connect's JSON spells int64 as a string."""
    try:
        runner = json.loads(answer)["runner"]
        registered = Registration(id=int(runner["id"]), uuid=str(runner["uuid"]), name=str(runner["name"]),
                                  token=str(runner["token"]))  # fmt: skip
    except (ValueError, KeyError, TypeError):
        raise GiteaError(f"registering runner {name} at {url}: an answer without a runner") from None
    if not runner.get("ephemeral"):  # Gitea < 1.24 keeps a runner that never takes a job as an idle row
        raise NotEphemeral(f"registering runner {name} at {url}: Gitea did not make it ephemeral (1.24+ does)")
    return registered


def registrar_of(gitea: GiteaClient, *, timeout: float = TIMEOUT_S) -> Registrar:
    """A Registrar over the Gitea client's session (its CA and proxy) and request metrics, whose Register
    may take `timeout` seconds (`GRS_REGISTER_TIMEOUT`)."""
    return Registrar(gitea.session, version=f"{DISTRIBUTION} {version()}", timeout=timeout, on_request=gitea.on_request,
                     gitea=gitea)  # fmt: skip
