"""A scope's runner registration token, a runner's row asked for by id in one scope, and where else to ask.

Owns two of Gitea's runner endpoints (1.24+), for a repository, an org, the API token's user, or the
instance (`/admin`):
- `POST {scope}/actions/runners/registration-token`: the scope's registration token (the one method
  Gitea 1.26 kept; `GET` is gone there). Gitea answers the latest token of the scope, making one only
  if there is none; it does not rotate it. The answer is `{"token": "…"}` in the body (the swagger
  documents it as a header, wrongly). It needs `write:` on the scope's token category (`write:repository`,
  `write:organization`, `write:user`, `write:admin`) and, up to 1.25, owner access (a site admin's for
  `/admin`).
- `GET` and `DELETE {scope}/actions/runners/{id}`: Gitea answers a row only in the runner's own scope
  (404 in any other: `EditableInContext`); the `/admin` endpoints reach every runner, whatever its scope.
- `GET /user/orgs`: the orgs of the API token's user (`read:organization`), where a runner may have
  landed.
The calls go through `GiteaClient`'s request (its session, timeout, metrics and error split). Must not
touch Redis or Kubernetes, and never logs or raises a token.
"""

from __future__ import annotations

from reconciler.gitea.api import GiteaClient, GiteaError, PollScope


async def fetch(gitea: GiteaClient, scope: PollScope) -> str:
    """The scope's runner registration token, fetched with the scope's API token; GiteaError (with the
    HTTP status) if Gitea refuses or does not answer."""
    path = f"{gitea._runners_path(scope)}/registration-token"
    body, _ = await gitea._call("POST", scope, path, [], f"{scope.kind}_registration_token", ok=(200,))
    token = body.get("token") if isinstance(body, dict) else None
    if not isinstance(token, str) or not token:
        raise GiteaError(f"POST {path}: no token in the answer")
    return token


async def holds(gitea: GiteaClient, scope: PollScope, runner_id: int) -> bool:
    """Whether the scope holds the runner's row (an `/admin` scope holds every runner): True on 200,
    False on 404; GiteaError otherwise."""
    path = f"{gitea._runners_path(scope)}/{runner_id}"
    body, _ = await gitea._call("GET", scope, path, [], f"{scope.kind}_runner", ok=(200, 404))
    return body is not None


async def remove(gitea: GiteaClient, scope: PollScope, runner_id: int) -> bool:
    """Delete the runner's row through the scope: True if it was there, False on 404 (not in this
    scope, or gone); GiteaError otherwise."""
    path = f"{gitea._runners_path(scope)}/{runner_id}"
    try:
        await gitea._call("DELETE", scope, path, [], f"{scope.kind}_runner_delete", ok=(204,))
    except GiteaError as exc:
        if exc.status == 404:
            return False
        raise
    return True


async def orgs(gitea: GiteaClient, scope: PollScope) -> list[str]:
    """The names of the API token's user's orgs (the first 50); GiteaError if Gitea refuses or does not answer."""
    body, _ = await gitea._call("GET", scope, "/user/orgs", [("page", "1"), ("limit", "50")], "user_orgs", ok=(200,))
    return [o["username"] for o in body or [] if isinstance(o, dict) and isinstance(o.get("username"), str)]
