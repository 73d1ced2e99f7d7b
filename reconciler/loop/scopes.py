"""Where a group's runners live in Gitea: the (Gitea, scope, API token) a group polls and deletes rows
in, the wider scopes its runners may have registered in instead, and which groups a runner's name can
belong to. Must not call Gitea; Kubernetes only through `Kube.secret_value`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from reconciler.gitea.api import PollScope
from reconciler.kube.api import Kube, PermanentError, TransientError
from reconciler.kube.objects import GroupObject
from reconciler.model.names import RUNNER_SUFFIX, job_name, job_of_runner, of_group
from reconciler.model.spec import RunnerGroupSpec


async def scope_of(
    kube: Kube,
    spec: RunnerGroupSpec,
    namespace: str,
    *,
    cache: dict[tuple[str, str, str], str | Exception] | None = None,
) -> PollScope:
    """The group's (Gitea URL, scope, API token); raises PermanentError or TransientError if the token
    cannot be read. `cache` spares a second read of one Secret key in one cycle."""
    ref = spec.auth_token.secret_ref
    where = (namespace, ref.name, ref.key)
    cache = {} if cache is None else cache
    if where not in cache:
        try:
            cache[where] = await kube.secret_value(*where)
        except (PermanentError, TransientError) as exc:
            cache[where] = exc
    token = cache[where]
    if isinstance(token, Exception):
        raise token
    return PollScope(spec.gitea.url, spec.scope, "" if spec.scope == "global" else spec.target, token)


def registered_spec(spec: RunnerGroupSpec, registered: str) -> RunnerGroupSpec | None:
    """The group's spec as it was where a runner registered (`RunnerGroupSpec.registered_at`), if that is not
    where the group's runners register now: its Gitea URL and scope, with the group's API token now."""
    parts = registered.split(" ")
    if len(parts) != 3 or registered == spec.registered_at or parts[1] not in ("global", "org", "user", "repo"):
        return None
    url, scope, target = parts
    update: dict[str, object] = {"gitea": spec.gitea.model_copy(update={"url": url}), "scope": scope}
    if scope != "global":
        update[scope] = target
    return spec.model_copy(update=update)


def owners(name: str, groups: Iterable[GroupObject]) -> list[GroupObject]:
    """The groups whose runner Jobs may be called `name`."""
    match = RUNNER_SUFFIX.search(name)
    if match is None:
        return []
    return [g for g in groups if job_name(g.name, match.group(1)) == name]


def owners_of_runner(runner: str, groups: Iterable[GroupObject]) -> list[GroupObject]:
    """The groups whose runner is called `runner` in Gitea: its Job's name is theirs, and so is its group key."""
    return [g for g in owners(job_of_runner(runner), groups) if of_group(runner, g.namespace, g.name)]


def wider(scope: PollScope) -> list[PollScope]:
    """The scopes beyond the group's own that may hold its runners' rows: a repository's owner (an
    org), then the instance."""
    out = [replace(scope, kind="org", target=scope.target.split("/", 1)[0])] if scope.kind == "repo" else []
    return out if scope.kind == "global" else [*out, replace(scope, kind="global", target="")]
