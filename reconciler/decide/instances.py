"""Pure: one Gitea instance per install.

Job ids are numbered per Gitea instance, and Redis keys them by id alone: two instances in one install
would overwrite each other's jobs, and a poll of one would mark the other's queued jobs gone. So an
install serves the instance of its oldest valid RunnerGroup (by creation, then namespace and name: every
replica picks the same), and a group of any other instance is refused with a message saying what to do
instead. A group being deleted is never refused (its drain still talks to its Gitea). Instances are
compared by scheme, host, port and path (case-insensitive host, default ports spelt out): two URLs of one
Gitea that differ (an internal Service name and a public host) count as two. Must not do I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar
from urllib.parse import urlsplit

from reconciler.model.spec import RunnerGroupSpec


class Group(Protocol):
    """What this module reads of a RunnerGroup (a `GroupObject` of the Kubernetes side)."""

    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def created_ms(self) -> int: ...
    @property
    def deleting(self) -> bool: ...


G = TypeVar("G", bound=Group)
View = tuple[G, RunnerGroupSpec | None, str]  # a group, its valid spec or None, what is wrong
_PORTS = {"http": 80, "https": 443}


def instance(url: str) -> str:
    """The Gitea instance a URL names: `scheme://host:port/path`, lower-case host, no trailing slash."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or _PORTS.get(scheme, 0)
    return f"{scheme}://{(parts.hostname or '').lower()}:{port}{parts.path.rstrip('/')}"


def one_instance(views: Sequence[View[G]]) -> list[View[G]]:
    """`views` with each valid group of a second Gitea instance turned invalid, and why."""
    valid: list[tuple[G, RunnerGroupSpec]] = [(g, s) for g, s, _ in views if s is not None]
    if not valid:
        return list(views)
    first, spec = min(valid, key=lambda v: (v[0].created_ms, v[0].namespace, v[0].name))
    served = instance(spec.gitea.url)
    out: list[View[G]] = []
    for group, own, problem in views:
        if own is not None and not group.deleting and instance(own.gitea.url) != served:
            out.append((group, None, _second(own.gitea.url, spec.gitea.url, first)))
        else:
            out.append((group, own, problem))
    return out


def _second(url: str, served: str, first: Group) -> str:
    return (
        f"spec.gitea.url {url} is a second Gitea instance: this install serves {served} (RunnerGroup "
        f"{first.namespace}/{first.name}, the oldest), and job ids of two instances collide in its Redis. "
        "Serve the other instance from an install of its own (its own release and Redis), and list each "
        "install's one instance in the chart's giteaURLs (GRS_GITEA_URLS); a Gitea reached by two URLs "
        "must be named by one"
    )
