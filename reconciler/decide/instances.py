"""Pure: which Gitea instance each RunnerGroup serves, and the groups of an instance with no keys of its own.

Job ids are numbered per Gitea instance, so the jobs of each have Redis keys of their own
(`webhook_scaler.store.keys`): the default instance's, and one set per instance the admin names
(`GRS_GITEA_INSTANCES`, the chart's `giteaInstances`). A group serves the named instance its
`gitea.url` is, else the default one. The default instance is the admin's choice (`GRS_GITEA_URL`,
the chart's `gitea.url`; `Settings.default_gitea`), never a group's: no group, by its age or its
URL, decides which Gitea's jobs the default keys hold. A group of any other Gitea, or of any unnamed
one while no default is set, is refused with a message saying what to set. A group being deleted is
never refused (its drain still talks to its Gitea). Instances are compared by scheme, host, port and
path (case-insensitive host, default ports spelt out): two URLs of one Gitea that differ (an internal
Service name and a public host) count as two. Must not do I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, TypeVar

from reconciler.model.spec import RunnerGroupSpec
from webhook_scaler.gitea import instance_url as instance


class Group(Protocol):
    """What this module reads of a RunnerGroup (a `GroupObject` of the Kubernetes side)."""

    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def deleting(self) -> bool: ...


G = TypeVar("G", bound=Group)
View = tuple[G, RunnerGroupSpec | None, str]  # a group, its valid spec or None, what is wrong

_NAME_IT = (
    "To serve this Gitea too, name it in the chart's giteaInstances (GRS_GITEA_INSTANCES, name=URL) and sign "
    "its webhooks with secret lines `[name] SECRET`; a Gitea reached by two URLs must be named by one"
)


def instance_of(url: str, named: Mapping[str, str]) -> str:
    """Which of the `named` instances (name -> URL) `url` is; "" for the default one."""
    if not named:
        return ""
    key = instance(url)
    return next((name for name, other in named.items() if instance(other) == key), "")


def one_instance(views: Sequence[View[G]], *, default: str, named: Mapping[str, str]) -> list[View[G]]:
    """`views` with each valid group of a Gitea that is neither the `default` instance's URL ("" for
    none) nor a `named` one (name -> URL) turned invalid, and why."""
    served = instance(default) if default else None
    out: list[View[G]] = []
    for group, own, problem in views:
        if own is None or group.deleting or instance_of(own.gitea.url, named) or instance(own.gitea.url) == served:
            out.append((group, own, problem))
        else:
            out.append((group, None, _refused(own.gitea.url, default)))
    return out


def _refused(url: str, default: str) -> str:
    if not default:
        return (
            f"spec.gitea.url {url}: this install has no default Gitea instance; set GRS_GITEA_URL (the chart's "
            f"gitea.url) to the URL of the Gitea whose webhooks the unnamed secret lines sign. {_NAME_IT}"
        )
    return (
        f"spec.gitea.url {url} is not a Gitea instance this install serves: its default instance is {default} "
        f"(GRS_GITEA_URL, the chart's gitea.url), and job ids of two instances collide. {_NAME_IT}"
    )
