"""attribution.py through build_job: a runner Job and its Pod say which Gitea job they were started for."""

from __future__ import annotations

import dataclasses

from reconciler.decide.plan import Create, _wanting
from reconciler.kube.manifests import GroupRef, build_job
from tests.groups import spec
from webhook_scaler.store.jobs.model import QueuedJob

REF = GroupRef(namespace="ci", name="builders", uid="0000-1111")
JOB = QueuedJob(
    job_id=4711, labels=("k8s",), owner="acme", repo="acme/widgets", name="build (linux)", run_id=93, attempt=1,
    queued_ms=1_000, claimed_by=None,
)  # fmt: skip


def test_a_runner_for_a_job_carries_its_owner_repository_run_and_attempt_on_job_and_pod() -> None:
    job = build_job(
        REF, spec(gitea={"url": "https://gitea.example.com/"}), name="builders-4711-2", job_id=4711, about=JOB
    )
    pod_labels = job["spec"]["template"]["metadata"]["labels"]
    told = {
        "gitea.bpg.pw/owner": "acme",
        "gitea.bpg.pw/repository": "widgets",
        "gitea.bpg.pw/run-id": "93",
        "gitea.bpg.pw/attempt": "2",
    }
    assert told.items() <= job["metadata"]["labels"].items() and told.items() <= pod_labels.items()
    annotations = job["metadata"]["annotations"]
    assert annotations["gitea.bpg.pw/repository"] == "acme/widgets"
    assert annotations["gitea.bpg.pw/job-name"] == "build (linux)"
    assert (
        annotations["gitea.bpg.pw/job-url"] == "https://gitea.example.com/api/v1/repos/acme/widgets/actions/jobs/4711"
    )
    assert annotations["gitea.bpg.pw/job-id"] == "4711"


def test_a_value_no_label_may_hold_is_an_annotation_only_and_the_groups_own_labels_win() -> None:
    odd = dataclasses.replace(JOB, repo="acme./" + "w" * 70, run_id=0)
    job = build_job(REF, spec(), name="builders-4711-2", job_id=4711, about=odd)
    labels = job["metadata"]["labels"]
    assert "gitea.bpg.pw/owner" not in labels and "gitea.bpg.pw/repository" not in labels
    assert "gitea.bpg.pw/run-id" not in labels, "0: the record did not say"
    assert job["metadata"]["annotations"]["gitea.bpg.pw/repository"] == odd.repo
    assert labels["gitea.bpg.pw/runnergroup-name"] == "builders"


def test_a_warm_runner_says_nothing_of_a_job_and_the_plan_hands_each_create_its_job() -> None:
    warm = build_job(REF, spec(), name="builders-w-abc", job_id=None)
    assert not [k for k in warm["metadata"]["labels"] if k.endswith(("/owner", "/repository", "/run-id"))]
    assert not [k for k in warm["metadata"]["annotations"] if k.endswith(("/job-url", "/job-name"))]
    (create,) = _wanting([JOB], [], set(), frozenset())[0]
    assert create == Create(4711, 1_000, attempt=JOB.generation) and create.about is JOB
