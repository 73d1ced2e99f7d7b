"""labels.py: Gitea's subset rule, name:scheme, defaults and overrides."""

from __future__ import annotations

import pytest

from reconciler.labels import DEFAULT_LABELS, effective_labels, label_name, matches, names


@pytest.mark.parametrize(
    ("job", "runner", "expected"),
    [
        pytest.param(["ubuntu-latest"], DEFAULT_LABELS, True, id="default-label"),
        pytest.param(["ubuntu-22.04"], DEFAULT_LABELS, True, id="name-of-name-scheme"),
        pytest.param(["ubuntu-latest:docker://node:16"], DEFAULT_LABELS, False, id="job-label-is-compared-whole"),
        pytest.param(["linux", "k8s"], ["self-hosted", "linux", "k8s"], True, id="subset"),
        pytest.param(["linux", "gpu"], ["linux", "k8s"], False, id="not-subset"),
        pytest.param([], ["anything"], True, id="empty-runs-on-matches-all"),
        pytest.param([], [], True, id="empty-everything"),
        pytest.param(["Linux"], ["linux"], False, id="case-sensitive"),
        pytest.param(["self-hosted"], ["linux"], False, id="self-hosted-not-special"),
        pytest.param(["app:infra"], ["app:infra"], False, id="colon-splits-runner-label"),
        pytest.param(["app"], ["app:infra"], True, id="app-name-of-app:infra"),
        pytest.param(["gpu"], ["gpu:host"], True, id="host-scheme"),
        pytest.param(["x", "x"], ["x"], True, id="duplicates"),
    ],
)
def test_matching(job: list[str], runner: list[str], expected: bool) -> None:
    assert matches(job, names(runner)) is expected


def test_effective_labels_add_current_defaults() -> None:
    eff = effective_labels(["k8s", "linux:host"])
    assert eff[:2] == ("k8s", "linux:host")
    assert {label_name(e) for e in eff} == {"k8s", "linux", "ubuntu-latest", "ubuntu-24.04", "ubuntu-22.04"}
    assert not any("node:16" in e for e in eff)


def test_group_label_overrides_default_of_same_name() -> None:
    eff = effective_labels(["ubuntu-latest:host"])
    assert eff.count("ubuntu-latest:host") == 1
    assert not any(e.startswith("ubuntu-latest:docker") for e in eff)


def test_defaults_can_be_replaced_or_dropped() -> None:
    assert effective_labels(["a"], defaults=[]) == ("a",)
    assert effective_labels(["a"], defaults=["b:host", "a:docker://x"]) == ("a", "b:host")


def test_blank_and_repeated_labels_are_dropped() -> None:
    assert effective_labels(["a", " ", "a"], defaults=()) == ("a",)
