"""labels.py: Gitea's subset rule, name:scheme, defaults and overrides."""

from __future__ import annotations

import pytest

from reconciler.decide.assign import GroupView, assign
from reconciler.model.labels import DEFAULT_LABELS, effective_labels, label_name, names
from tests.groups import spec
from webhook_scaler.store.jobs.model import QueuedJob


@pytest.mark.parametrize(
    ("runner", "expected"),
    [
        pytest.param(DEFAULT_LABELS, {"ubuntu-latest", "ubuntu-24.04", "ubuntu-22.04"}, id="defaults-by-name"),
        pytest.param(["app:infra"], {"app"}, id="colon-splits-runner-label"),
        pytest.param(["gpu:host"], {"gpu"}, id="host-scheme"),
        pytest.param(["pool:docker://img:tag"], {"pool"}, id="image-colons-stay-out"),
        pytest.param(["Linux", "linux"], {"Linux", "linux"}, id="case-kept"),
        pytest.param(["x", "x:host"], {"x"}, id="duplicates"),
        pytest.param([" k8s :host"], {"k8s"}, id="name-stripped"),
        pytest.param([], set(), id="none"),
    ],
)
def test_names_are_what_act_runner_registers(runner: list[str], expected: set[str]) -> None:
    # The reconciler matches a job when its runs-on labels are a subset of these (plan.assign).
    assert names(runner) == expected


@pytest.mark.parametrize(
    ("job", "runner", "expected"),
    [
        pytest.param(["ubuntu-latest"], DEFAULT_LABELS, True, id="default-label"),
        pytest.param(["ubuntu-latest:docker://node:16"], DEFAULT_LABELS, False, id="job-label-is-compared-whole"),
        pytest.param(["linux", "k8s"], ["self-hosted", "linux", "k8s"], True, id="subset"),
        pytest.param(["linux", "gpu"], ["linux", "k8s"], False, id="not-subset"),
        pytest.param([], ["anything"], True, id="empty-runs-on-matches-all"),
        pytest.param([], [], True, id="empty-everything"),
        pytest.param(["Linux"], ["linux"], False, id="case-sensitive"),
        pytest.param(["self-hosted"], ["linux"], False, id="self-hosted-not-special"),
        pytest.param(["app:infra"], ["app:infra"], False, id="colon-splits-runner-label"),
        pytest.param(["app"], ["app:infra"], True, id="app-name-of-app:infra"),
        pytest.param(["x", "x"], ["x"], True, id="duplicates"),
    ],
)
def test_a_group_takes_a_job_whose_labels_are_a_subset_of_its_names(
    job: list[str], runner: list[str], expected: bool
) -> None:
    # Gitea's rule as the reconciler applies it: plan.assign over the names a group's runners register.
    group = GroupView("ci", "g", spec(scope="global"), names(effective_labels(runner, defaults=())))
    queued = QueuedJob(1, tuple(job), "acme", "acme/w", "build", 1, 0, 0, None)
    assert assign([queued], [group])[("ci", "g")] == ([queued] if expected else [])


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
