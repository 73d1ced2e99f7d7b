"""Pure label matching, as Gitea matches a job to a runner (shared/gitea/PROTOCOL.md §3).

A job's `runs-on` labels are bare names. A runner's labels are `name[:scheme[:arg]]`; act_runner sends
Gitea only the name part. A job matches when its label set is a subset of the runner's names: exact,
case-sensitive, and an empty `runs-on` matches every runner. Must not do I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

# act_runner's defaults from v0.2.13 on (internal/app/cmd/register.go); no stale node:16 images.
DEFAULT_LABELS: tuple[str, ...] = (
    "ubuntu-latest:docker://docker.gitea.com/runner-images:ubuntu-latest",
    "ubuntu-24.04:docker://docker.gitea.com/runner-images:ubuntu-24.04",
    "ubuntu-22.04:docker://docker.gitea.com/runner-images:ubuntu-22.04",
)


def label_name(label: str) -> str:
    """The part of a runner label that Gitea sees: `ubuntu-latest:docker://x` -> `ubuntu-latest`."""
    return label.split(":", 1)[0].strip()


def effective_labels(labels: Sequence[str], defaults: Sequence[str] | None = None) -> tuple[str, ...]:
    """The group's labels plus the defaults whose names the group does not set itself, in order.

    `defaults=None` means act_runner's current defaults; pass `()` for none at all.
    """
    chosen = DEFAULT_LABELS if defaults is None else tuple(defaults)
    own = [label.strip() for label in labels if label.strip()]
    names = {label_name(label) for label in own}
    out = list(dict.fromkeys(own))
    for label in chosen:
        if label_name(label) not in names:
            names.add(label_name(label))
            out.append(label)
    return tuple(out)


def names(runner_labels: Iterable[str]) -> frozenset[str]:
    """The label names a runner registers with."""
    return frozenset(label_name(label) for label in runner_labels)
