"""The `workflow_job` webhooks the reconciler installs in Gitea (`GRS_WEBHOOK_MANAGE`).

Owns Gitea's webhook endpoints for a repository (`/repos/{owner}/{repo}/hooks`), an org (`/orgs/{org}/hooks`),
the API token's user (`/user/hooks`) and the instance (`/admin/hooks`, as a system webhook: Gitea fires
only those, `config.is_system_webhook`, for every repository; a "default" one is only copied into new
repositories): listing the ones that deliver to a URL, creating, setting and deleting one. Gitea 1.24+
accepts the `workflow_job` event through the API. Gitea never answers a webhook's secret back, so a
webhook is set (`edit`) rather than compared. The calls go through `GiteaClient`'s request (its session,
timeout, metrics and error split). Must not touch Redis or Kubernetes; never logs or raises a token or secret.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from reconciler.gitea.api import GiteaClient, GiteaError, PollScope

EVENTS = ["workflow_job"]
_PAGE = 50


@dataclass(frozen=True, slots=True)
class Hook:
    """A webhook as Gitea lists it: its id, where it delivers, and whether it does."""

    id: int
    url: str
    active: bool
    events: tuple[str, ...]


def path(scope: PollScope) -> str:
    """The scope's webhooks endpoint."""
    if scope.kind == "repo":
        owner, _, name = scope.target.partition("/")
        return f"/repos/{quote(owner)}/{quote(name)}/hooks"
    if scope.kind == "org":
        return f"/orgs/{quote(scope.target)}/hooks"
    return "/user/hooks" if scope.kind == "user" else "/admin/hooks"


def _config(scope: PollScope, url: str, secret: str) -> dict[str, str]:
    config = {"url": url, "content_type": "json", "http_method": "post", "secret": secret}
    if scope.kind == "global":
        config["is_system_webhook"] = "true"
    return config


async def delivering_to(gitea: GiteaClient, scope: PollScope, url: str) -> list[Hook]:
    """The scope's webhooks that deliver to `url` (its first pages), oldest first; GiteaError if Gitea
    refuses (the token does not administer the scope's webhooks) or does not answer."""
    found: list[Hook] = []
    params = [("type", "system")] if scope.kind == "global" else []
    for page in range(1, 21):
        query = [*params, ("page", str(page)), ("limit", str(_PAGE))]
        body, _ = await gitea._call("GET", scope, path(scope), query, f"{scope.kind}_hooks", ok=(200,))
        rows: list[Any] = body if isinstance(body, list) else []
        found += [h for h in map(_hook, rows) if h is not None and h.url == url]
        if len(rows) < _PAGE:
            break
    return sorted(found, key=lambda h: h.id)


def _hook(row: Any) -> Hook | None:
    if not isinstance(row, dict) or not isinstance(row.get("id"), int):
        return None
    config, events = row.get("config"), row.get("events")
    url = str(config.get("url", "")) if isinstance(config, dict) else ""
    return Hook(row["id"], url, row.get("active") is True, tuple(map(str, events)) if isinstance(events, list) else ())


async def create(gitea: GiteaClient, scope: PollScope, *, url: str, secret: str) -> int:
    """Install an active `workflow_job` webhook delivering to `url`, signed with `secret`; its id."""
    body = {"type": "gitea", "active": True, "events": EVENTS, "config": _config(scope, url, secret)}
    made, _ = await gitea._call("POST", scope, path(scope), [], f"{scope.kind}_hook_create", ok=(201,), body=body)
    if not isinstance(made, dict) or not isinstance(made.get("id"), int):
        raise GiteaError(f"POST {path(scope)}: no webhook id in the answer")
    return int(made["id"])


async def edit(gitea: GiteaClient, scope: PollScope, hook_id: int, *, url: str, secret: str) -> None:
    """Set an installed webhook as `create` makes one (active, `workflow_job`, this URL and secret)."""
    body = {"active": True, "events": EVENTS, "config": _config(scope, url, secret)}
    await gitea._call("PATCH", scope, f"{path(scope)}/{hook_id}", [], f"{scope.kind}_hook_edit", ok=(200,), body=body)


async def delete(gitea: GiteaClient, scope: PollScope, hook_id: int) -> bool:
    """Delete a webhook: True if it was there, False on 404; GiteaError otherwise."""
    try:
        await gitea._call("DELETE", scope, f"{path(scope)}/{hook_id}", [], f"{scope.kind}_hook_delete", ok=(204,))
    except GiteaError as exc:
        if exc.status == 404:
            return False
        raise
    return True
