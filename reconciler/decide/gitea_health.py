"""Pure: what a failed poll of a group's scope tells its users, as its `GiteaReachable` condition.

A poll fails for reasons a user fixes in different places: the API token (refused: 401, 403), the
Gitea (older than 1.25, which has no jobs API and answers its paths 404; or Forgejo, whose version names
the Gitea it matches), the scope (an org, user or repository Gitea does not have, or the token cannot
see), or Gitea itself being unreachable. Each gets a reason and a message that says which. Must not do I/O.
"""

from __future__ import annotations

import re

from reconciler.decide.status import Condition

MINIMUM = (1, 25)  # the jobs API the poll reads (`/actions/jobs`)
_FORGEJO = re.compile(r"\+gitea-(\d+)\.(\d+)")
_GITEA = re.compile(r"^v?(\d+)\.(\d+)")


def gitea_version(text: str) -> tuple[int, int] | None:
    """(major, minor) of the Gitea a version string stands for; None if it names none."""
    match = _FORGEJO.search(text) or _GITEA.match(text)
    return (int(match[1]), int(match[2])) if match else None


def poll_failed(*, status: int | None, error: str, where: str, version: str | None) -> Condition:
    """The condition after a poll of `where` (e.g. "org acme") failed with `error` (HTTP `status`, or
    None without an answer); `version`: Gitea's, if it was asked (after a 404)."""
    if status in (401, 403):
        return Condition(
            "GiteaReachable",
            "False",
            "TokenRefused",
            f"Gitea refused the group's API token for {where} ({error}): the token is wrong or revoked, or lacks the"
            " scopes the group needs (docs/runnergroups.md#tokens)",
        )
    found = gitea_version(version) if version else None
    if version is not None and found is not None and found < MINIMUM:
        forgejo = " (Forgejo is not supported)" if _FORGEJO.search(version) else ""
        return Condition(
            "GiteaReachable",
            "False",
            "GiteaTooOld",
            f"needs Gitea {MINIMUM[0]}.{MINIMUM[1]} or newer; this one is {version}{forgejo}: older ones have no jobs"
            " API to poll, and answer it 404",
        )
    if status == 404:
        return Condition(
            "GiteaReachable",
            "False",
            "ScopeNotFound",
            f"Gitea has no {where} that the group's API token can see ({error}): check spec.org, spec.user or"
            " spec.repo, and the token's owner",
        )
    return Condition("GiteaReachable", "False", "PollFailed", error)
