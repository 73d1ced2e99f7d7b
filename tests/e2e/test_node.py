"""End to end on a real node: pushed workflows run on act_runner Pods that our reconciler started.

Every scenario asserts what a user sees: Gitea's run and job conclusions, the runner Pods and Jobs,
the RunnerGroup's status, and Gitea's list of runners afterwards. Each test has its own namespace,
RunnerGroup, runner label and repository, reads only its own group's metrics and what our processes
logged while it ran, and its namespaces are deleted after it (warm runners and Pods of its own would
go on running beside the next test): the order they run in does not matter.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from reconciler.model.names import job_of_runner
from tests.bench.node import measure
from tests.e2e.harness import ADMIN
from tests.e2e.node_stack import ORG, SECRET, TOKENS, Gate, NodeStack, wait_for, workflow
from tests.e2e.watch import RunnerWatch, finished
from tests.kube_cluster import api_request, api_text, runner_of
from tests.node.cluster import image

pytestmark = [pytest.mark.node, pytest.mark.usefixtures("cleared")]


JOB_NAME = "batch.kubernetes.io/job-name"


def new_label() -> str:
    return f"l{uuid.uuid4().hex[:6]}"


def test_a_pushed_workflow_goes_green_with_one_runner_pod_per_job(stack: NodeStack) -> None:
    ns, label = stack.namespace("green"), new_label()
    stack.group(ns, label)
    repo = stack.repo()
    run_id = stack.push(repo, workflow("a", "b", "c", label=label, needs="after"))

    run = stack.wait_run(repo, run_id)

    jobs = stack.jobs(repo, run_id)
    assert run["conclusion"] == "success", jobs
    assert sorted((j["name"], j["conclusion"]) for j in jobs) == [
        ("a", "success"),
        ("after", "success"),
        ("b", "success"),
        ("c", "success"),
    ]
    assert len({j["runner_id"] for j in jobs}) == 4, "each job ran on a runner of its own"
    wait_for(
        lambda: not stack.active_runners(ns),
        timeout=60,
        what="every runner Job finished",
        explain=lambda: stack.describe_runners(ns),
    )
    pods = stack.pods(ns)
    assert sorted(p["status"]["phase"] for p in pods) == ["Succeeded"] * 4
    wait_for(lambda: not stack.runners_with(label), timeout=30, what="Gitea lists no runner of the group")
    # Our processes log at DEBUG here: still no token or secret in what they wrote.
    logs = stack.our_log("reconciler") + stack.our_log("receiver")
    for secret in (stack.registration_token, stack.gitea.token, SECRET):
        assert secret not in logs


def test_max_one_runner_serves_three_queued_jobs_one_at_a_time(stack: NodeStack) -> None:
    ns, label = stack.namespace("solo"), new_label()
    watch = RunnerWatch(stack.node, ns)
    try:
        stack.group(ns, label, maxActiveRunners=1)
        repo = stack.repo()
        run_id = stack.push(repo, workflow("x", "y", "z", label=label))
        run = stack.wait_run(repo, run_id, timeout=180)
        wait_for(lambda: not watch.alive, timeout=60, what="every runner finished")
    finally:
        watch.stop()
    assert run["conclusion"] == "success", stack.jobs(repo, run_id)
    assert [j["conclusion"] for j in stack.jobs(repo, run_id)] == ["success"] * 3
    assert len(watch.seen) == 3, watch.seen
    assert watch.max_alive == 1, f"at most 1 runner at once, watched {watch.max_alive}"
    assert watch.gaps == 0, "the watch saw every change"


def test_a_failing_job_fails_the_run_and_the_group_serves_the_next(stack: NodeStack) -> None:
    ns, label = stack.namespace("fail"), new_label()
    stack.group(ns, label)
    repo = stack.repo()
    failed = stack.wait_run(repo, stack.push(repo, workflow("broken", label=label, step="exit 3")))
    assert failed["conclusion"] == "failure"
    assert [j["conclusion"] for j in stack.jobs(repo, failed["id"])] == ["failure"]
    conds = {c["type"]: c for c in stack.group_status(ns)["conditions"]}
    assert conds["Ready"]["status"] == "True" and conds["RunnersHealthy"]["status"] == "True", conds

    fixed = stack.wait_run(repo, stack.push(repo, workflow("fixed", label=label)))
    assert fixed["conclusion"] == "success"
    # act_runner exits 0 after a job whatever its result: both runner Jobs completed
    wait_for(lambda: not stack.active_runners(ns), timeout=60, what="every runner Job finished")
    jobs = stack.runner_jobs(ns)
    assert len(jobs) == 2 and all(finished(j) and j["status"].get("succeeded") == 1 for j in jobs), jobs


def test_polling_alone_serves_a_repository_without_webhook(stack: NodeStack) -> None:
    ns, label = stack.namespace("poll"), new_label()
    stack.group(ns, label)
    repo, logged = stack.repo(webhook=False), len(stack.our_log("reconciler"))
    run_id = stack.push(repo, workflow("a", "b", label=label, needs="c"))
    run = stack.wait_run(repo, run_id, timeout=180)
    assert run["conclusion"] == "success", stack.jobs(repo, run_id)
    ids = {j["id"] for j in stack.jobs(repo, run_id)}
    assert not ids & stack.delivered_job_ids(), "no webhook reported these jobs"
    assert "poll healed redis" in stack.our_log("reconciler")[logged:]


def test_a_warm_runner_serves_the_next_job_and_the_pool_is_refilled(stack: NodeStack) -> None:
    ns, label = stack.namespace("warm"), new_label()
    stack.group(ns, label, minIdleRunners=1)
    warm = wait_for(lambda: stack.runners_with(label), timeout=60, what="a warm runner registered in Gitea")
    assert len(warm) == 1 and not warm[0]["busy"]
    repo = stack.repo()
    run_id = stack.push(repo, workflow("quick", label=label))
    run = stack.wait_run(repo, run_id)
    assert run["conclusion"] == "success"
    # When the job is queued the controller starts its replacement at once (demand = queued jobs +
    # minIdleRunners); Gitea gives the job to whichever runner asks first, the warm one or the new one.
    (job,) = stack.jobs(repo, run_id)
    idle = wait_for(
        lambda: [r for r in stack.runners_with(label) if r["id"] != job["runner_id"] and not r["busy"]],
        timeout=60,
        what="a warm runner again",
    )
    assert idle
    # Gitea's `completed` webhook comes late, so for a moment the finished job can still look queued and
    # one more warm runner may start; a surplus idle runner goes after GRS_IDLE_GRACE (10 s here): the pool
    # converges to exactly one warm runner.
    wait_for(lambda: len(stack.active_runners(ns)) == 1, timeout=120, what="exactly one runner left")
    wait_for(lambda: stack.group_status(ns).get("idleRunners") == 1, timeout=30, what="status: one idle runner")


def test_a_surplus_idle_runner_goes_with_its_row_in_gitea(stack: NodeStack) -> None:
    ns, label = stack.namespace("surplus"), new_label()
    stack.group(ns, label, minIdleRunners=1)
    (warm,) = wait_for(lambda: stack.runners_with(label), timeout=60, what="a warm runner registered in Gitea")
    path = f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups/runners"
    # A merge patch, not a GET and PUT: the controller writes the status in between.
    patch = {"spec": {"minIdleRunners": 0}}
    assert api_request(stack.node, "PATCH", path, patch, content_type="application/merge-patch+json")[0] == 200
    wait_for(lambda: not stack.active_runners(ns), timeout=60, what="the surplus runner deleted")
    # Its row went first, so when its Job is gone the row is gone too (the sweep runs too rarely to have
    # done it: it only takes rows offline for a minute).
    assert not stack.runners_with(label), "Gitea still lists the deleted runner"
    assert stack.metric("grs_gitea_runners_removed_total", reason="surplus_idle", group=f"{ns}/runners") == 1
    assert stack.metric("grs_runners_disabled_total", group=f"{ns}/runners") == 1, "Gitea's PATCH disabled it first"
    assert job_of_runner(warm["name"]) not in {j["metadata"]["name"] for j in stack.runner_jobs(ns)}


LONG = """name: long
on: [push]
jobs:
  long:
    runs-on: {label}
    steps:
      - run: {step}
"""  # a job held on a gate (NodeStack.gate) until the test opens it


def test_a_runner_redis_forgot_keeps_its_job_when_no_webhook_or_poll_can_tell(stack: NodeStack) -> None:
    ns, label = stack.namespace("forgot"), new_label()
    forgotten_and_kept(stack, ns, label, stack.repo(), what="the reconciler asked Gitea and kept the runner")


def forgotten_and_kept(stack: NodeStack, ns: str, label: str, pushed: str, *, what: str, **group: Any) -> None:
    """A group's one runner takes a job held on a gate; Redis then loses everything (a restart without
    persistence), the `in_progress` that marked the runner busy too. Past the idle grace the runner looks
    idle and surplus; Gitea says it is busy: the reconciler asks and keeps it, and the job goes green on
    the one runner. Only webhooks (and Gitea's runner list) are left: nothing wakes the reconciler after
    the flush but its resync timer, set short here. `pushed`: the repository the job runs in; `group`: the
    RunnerGroup's spec beyond its label."""
    assert stack.redis is not None
    repo = pushed
    with RunnerWatch(stack.node, ns) as watch:  # over the whole run: what "never" claims is read from it
        stack.group(ns, label, **group)
        with stack.reconfigured(GRS_POLL_ENABLED="false", GRS_RESYNC_INTERVAL="5"):
            gate = stack.gate()
            run_id = stack.push(repo, LONG.format(label=label, step=gate.step), path=".gitea/workflows/long.yml")
            stack.wait_job_running(repo, run_id)
            (job,) = stack.jobs(repo, run_id)
            if group.get("scope") == "repo":
                rows = stack.gitea.api("GET", f"/repos/{repo}/actions/runners")["runners"] or []
                assert [r["id"] for r in rows] == [job["runner_id"]], "a runner of the repository itself"
            wait_for(
                lambda: stack.recorded(job["id"], "in_progress"), timeout=30, what="the in_progress webhook recorded"
            )
            with redis.Redis.from_url(stack.redis.url) as client:
                client.flushall()
            wait_for(lambda: stack.metric("grs_runners_kept_busy_total", group=f"{ns}/runners") >= 1, timeout=60,
                     what=what)  # fmt: skip
            gate.open()
            run = stack.wait_run(repo, run_id, timeout=120)
            assert run["conclusion"] == "success", stack.jobs(repo, run_id)
            assert stack.metric("grs_runners_created_total", group=f"{ns}/runners") == 1, "nothing ran twice"
        wait_for(lambda: not stack.active_runners(ns), timeout=60, what="the runner Job finished")
    ran_to_its_end(stack, ns, watch)
    wait_for(lambda: not stack.runners_with(label), timeout=30, what="Gitea lists no runner of the group")


def ran_to_its_end(stack: NodeStack, ns: str, watch: RunnerWatch) -> None:
    """The group's one runner ran to its end: the watch saw one runner Job over the whole run, never deleted
    before it finished, with one Pod that never restarted; the Job succeeded."""
    (name,) = watch.of_groups().values()
    assert name not in watch.deleted_alive, f"runner {name} was deleted mid-job"
    (pod,) = watch.pods_of[name]
    assert watch.restarts[pod] == 0, f"runner {name}'s container restarted"
    assert [j["status"].get("succeeded") for j in stack.runner_jobs(ns)] == [1], "the runner Job succeeded"
    assert watch.gaps == 0, "the watch saw every change"


def test_a_repo_groups_runner_keeps_its_job_when_redis_forgets(stack: NodeStack) -> None:
    """The group serves one repository with its API token alone: its runners register in the repository
    itself (the registration token fetched for it). Redis forgets the runner is busy; the controller finds
    its row in the repository, asks Gitea and keeps it. (Runners of a repository group that registered
    in its org, with an org token, are refused since issue 35: RegistrationScopeMismatch.)"""
    ns, label, repo = stack.namespace("repotoken"), new_label(), stack.repo()
    forgotten_and_kept(
        stack, ns, label, repo, scope="repo", repo=repo, registrationToken=None,
        what="the reconciler found the row in the repository, asked Gitea and kept the runner",
    )  # fmt: skip


@dataclass(frozen=True)
class LongJob:
    """A job held on a gate, running on one runner of a group that keeps a warm one beside it."""

    ns: str
    label: str
    repo: str
    run_id: int
    busy: str  # the runner Job running it
    warm: str  # the warm runner Job
    gate: Gate  # the job's: it runs until this opens


def long_job_beside_a_warm_runner(stack: NodeStack, name: str) -> LongJob:
    ns, label = stack.namespace(name), new_label()
    stack.group(ns, label, minIdleRunners=1)
    repo, gate = stack.repo(), stack.gate()
    run_id = stack.push(repo, LONG.format(label=label, step=gate.step), path=".gitea/workflows/long.yml")
    stack.wait_job_running(repo, run_id)
    wait_for(lambda: len(stack.runners_with(label)) == 2, timeout=60, what="the busy runner and a warm one")
    (job,) = stack.jobs(repo, run_id)
    (busy,) = [job_of_runner(r["name"]) for r in stack.runners_with(label) if r["id"] == job["runner_id"]]
    (warm,) = [job_of_runner(r["name"]) for r in stack.runners_with(label) if r["id"] != job["runner_id"]]
    return LongJob(ns, label, repo, run_id, busy, warm, gate)


def test_a_group_deleted_during_a_job_lets_it_finish_then_goes_with_every_runner_row(stack: NodeStack) -> None:
    long = long_job_beside_a_warm_runner(stack, "drain")
    ns, label, repo, run_id, busy = long.ns, long.label, long.repo, long.run_id, long.busy
    path = f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups/runners"
    assert api_request(stack.node, "DELETE", path)[0] == 200
    wait_for(lambda: len(stack.runners_with(label)) == 1, timeout=60, what="the warm runner gone with its row")
    assert api_request(stack.node, "GET", path)[0] == 200, "the busy runner holds the group"
    long.gate.open()
    run = stack.wait_run(repo, run_id, timeout=120)
    assert run["conclusion"] == "success", stack.jobs(repo, run_id)
    wait_for(lambda: api_request(stack.node, "GET", path)[0] == 404, timeout=90, what="the group gone, drained")
    assert not stack.runners_with(label), "Gitea lists no runner of the group"
    deleted = [line for line in stack.our_log("reconciler").splitlines() if '"runner deleted"' in line]
    assert not [line for line in deleted if busy in line], "the busy runner ran to its end"
    assert any('"drain"' in line for line in deleted), "the warm one was deleted, drained"


def test_a_group_deleted_with_its_token_secret_goes_and_gitea_keeps_no_row(stack: NodeStack) -> None:
    """GitOps deletes a RunnerGroup and its token Secret at once while the group has a warm runner. The
    Secret cannot be read any more; the controller drains the group with the API token it last read: the
    warm runner is disabled and deleted with its row, and the group goes, well within GRS_DRAIN_TIMEOUT."""
    ns, label = stack.namespace("gitops"), new_label()
    stack.group(ns, label, minIdleRunners=1)
    (warm,) = wait_for(lambda: stack.runners_with(label), timeout=60, what="a warm runner registered in Gitea")
    path = f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups/runners"
    assert api_request(stack.node, "DELETE", f"/api/v1/namespaces/{ns}/secrets/{TOKENS}")[0] == 200
    assert api_request(stack.node, "DELETE", path)[0] == 200
    wait_for(lambda: api_request(stack.node, "GET", path)[0] == 404, timeout=60, what="the group gone, drained")
    assert not stack.runners_with(label), "Gitea lists no runner of the group"
    _, events = api_request(stack.node, "GET", f"/api/v1/namespaces/{ns}/events")
    assert not [e for e in events["items"] if e["reason"] in ("DrainAbandoned", "DrainTimedOut")], events
    rows = [
        json.loads(line)
        for line in stack.our_log("reconciler").splitlines()
        if '"runner row deleted in gitea"' in line and warm["name"] in line
    ]
    assert [(r["reason"], r["id"]) for r in rows] == [("drain", warm["id"])], "the drain deleted its row"


def test_scale_down_while_jobs_keep_arriving_never_costs_a_job(stack: NodeStack) -> None:
    """Jobs keep arriving, one to three at a time, while the group's warm pool goes from three runners to
    none and back, and a surplus idle runner goes after 2 s: each scale-down races with Gitea handing out
    the next job. Every job succeeds, no runner that took a job is deleted, and once the group is deleted
    Gitea lists none of its runners."""
    ns, label = stack.namespace("soak"), new_label()
    rng = random.Random(ns)
    path = f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups/runners"
    with stack.reconfigured(GRS_IDLE_GRACE="2"):
        logged = len(stack.our_log("reconciler"))
        stack.group(ns, label, minIdleRunners=3, maxActiveRunners=5)
        repo = stack.repo()
        runs = []
        for cycle in range(8):
            pool = {"spec": {"minIdleRunners": 3 if cycle % 2 else 0}}
            assert api_request(stack.node, "PATCH", path, pool, content_type="application/merge-patch+json")[0] == 200
            names = [f"c{cycle}j{i}" for i in range(rng.randint(1, 3))]
            runs.append(stack.push(repo, workflow(*names, label=label, step="sleep 2")))
            time.sleep(rng.uniform(3.0, 6.0))  # the pace jobs arrive at (the load, not a wait for an event)
        finished_runs = [stack.wait_run(repo, run_id, timeout=300) for run_id in runs]
        log = stack.our_log("reconciler")[logged:]
    jobs = [j for run_id in runs for j in stack.jobs(repo, run_id)]
    assert [r["conclusion"] for r in finished_runs] == ["success"] * len(runs), jobs
    ran = {job_of_runner(j["runner_name"]) for j in jobs}  # the runner Jobs that ran a job
    deleted = [line for line in log.splitlines() if '"runner deleted"' in line]
    assert [line for line in deleted if '"surplus_idle"' in line], "idle runners were scaled down meanwhile"
    assert not [line for line in deleted if any(f'"{name}"' in line for name in ran)], "no runner that ran a job"
    assert api_request(stack.node, "DELETE", path)[0] == 200
    wait_for(lambda: api_request(stack.node, "GET", path)[0] == 404, timeout=90, what="the group gone, drained")
    assert not stack.runners_with(label), "Gitea lists no runner of the group"


def _evict(stack: NodeStack, ns: str, pod: str) -> int:
    """What `kubectl drain` and the cluster autoscaler do to each Pod of a node: the Eviction API."""
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": ns}}
    return api_request(stack.node, "POST", f"/api/v1/namespaces/{ns}/pods/{pod}/eviction", body)[0]


def test_a_node_drain_waits_for_the_busy_runner_whose_job_goes_green(stack: NodeStack) -> None:
    """The node is drained during a job: the busy runner's Pod is not evicted (its budget, computed by the
    real disruption controller, allows none), the warm runner's is, and the job succeeds."""
    long = long_job_beside_a_warm_runner(stack, "evict")
    ns, repo, run_id, busy, warm = long.ns, long.repo, long.run_id, long.busy, long.warm
    path = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{busy}"

    def counted() -> bool:
        code, pdb = api_request(stack.node, "GET", path)
        return code == 200 and pdb.get("status", {}).get("currentHealthy") == 1

    wait_for(
        counted,
        timeout=60,
        what="the busy runner's budget, its Pod counted by the disruption controller",
    )

    def pod_of(runner: str) -> str:
        (pod,) = [p["metadata"]["name"] for p in stack.pods(ns) if p["metadata"]["labels"].get(JOB_NAME) == runner]
        return str(pod)

    assert _evict(stack, ns, pod_of(busy)) == 429, "the busy runner stays"
    assert _evict(stack, ns, pod_of(warm)) == 201, "the warm runner may go"
    long.gate.open()
    run = stack.wait_run(repo, run_id, timeout=120)
    assert run["conclusion"] == "success", stack.jobs(repo, run_id)
    wait_for(
        lambda: [j["status"].get("succeeded") for j in stack.runner_jobs(ns) if j["metadata"]["name"] == busy] == [1],
        timeout=60,
        what="the busy runner ran to its end",
    )


def test_a_spec_change_replaces_the_warm_runner_and_the_busy_one_finishes_on_the_old_spec(stack: NodeStack) -> None:
    long = long_job_beside_a_warm_runner(stack, "respec")
    ns, repo, run_id, busy, warm = long.ns, long.repo, long.run_id, long.busy, long.warm
    path = f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups/runners"
    patch = {"spec": {"ttlSecondsAfterFinished": 300}}  # a field the runner Jobs are made from
    assert api_request(stack.node, "PATCH", path, patch, content_type="application/merge-patch+json")[0] == 200
    fresh = wait_for(
        lambda: (
            [n for n in stack.active_runners(ns) if n not in (busy, warm)]
            if warm not in stack.active_runners(ns)
            else []
        ),
        timeout=60,
        what="the warm runner replaced by one of the new spec",
    )
    (made,) = [j for j in stack.runner_jobs(ns) if j["metadata"]["name"] == fresh[0]]
    assert made["spec"]["ttlSecondsAfterFinished"] == 300
    long.gate.open()
    run = stack.wait_run(repo, run_id, timeout=120)
    assert run["conclusion"] == "success", stack.jobs(repo, run_id)
    deleted = [line for line in stack.our_log("reconciler").splitlines() if '"runner deleted"' in line]
    assert not [line for line in deleted if busy in line], "the busy runner ran to its end on the old spec"
    assert [line for line in deleted if warm in line and '"outdated"' in line], "the warm one went as outdated"


def test_the_sweep_removes_the_row_of_a_runner_deleted_behind_our_back(stack: NodeStack) -> None:
    ns, label = stack.namespace("ghost"), new_label()
    stack.group(ns, label, minIdleRunners=1)
    (warm,) = wait_for(lambda: stack.runners_with(label), timeout=60, what="a warm runner registered in Gitea")
    # Someone deletes the runner's Job (or its node dies): its row stays in Gitea, offline after a minute.
    status, _ = api_request(
        stack.node,
        "DELETE",
        f"/apis/batch/v1/namespaces/{ns}/jobs/{job_of_runner(warm['name'])}?propagationPolicy=Background",
    )
    assert status == 200
    wait_for(
        lambda: warm["id"] not in {r["id"] for r in stack.runners_with(label)},
        timeout=150,
        what="the sweep deleted the offline row",
        every=2,
    )
    swept = [
        json.loads(line)
        for line in stack.our_log("reconciler").splitlines()
        if '"runner row deleted in gitea"' in line and warm["name"] in line
    ]
    assert [(r["reason"], r["id"]) for r in swept] == [("ghost", warm["id"])], "the sweep deleted it, once"
    assert stack.metric("grs_gitea_runners_removed_total", reason="ghost", group=f"{ns}/runners") >= 1


CANCELLABLE = """name: long
on: [push]
concurrency:
  group: long
  cancel-in-progress: true
jobs:
  long:
    runs-on: {label}
    steps:
      - run: sleep {seconds}
"""


def test_a_run_cancelled_while_its_job_runs_frees_the_runner(stack: NodeStack) -> None:
    ns, label = stack.namespace("cancel"), new_label()
    stack.group(ns, label, maxActiveRunners=1)
    repo = stack.repo()
    first = stack.push(repo, CANCELLABLE.format(label=label, seconds=600), path=".gitea/workflows/long.yml")
    stack.wait_job_running(repo, first)
    (busy,) = stack.active_runners(ns)
    # A new push in the same concurrency group cancels the running run (Gitea's cancel-in-progress).
    second = stack.push(repo, CANCELLABLE.format(label=label, seconds=1), path=".gitea/workflows/long.yml")

    assert stack.wait_run(repo, first, timeout=60)["conclusion"] == "cancelled"
    assert stack.wait_run(repo, second, timeout=120)["conclusion"] == "success", "capacity came back"
    wait_for(lambda: not stack.active_runners(ns), timeout=60, what="every runner Job finished")
    # Gitea removed the cancelled job's runner at once, and the runner never heard of the cancel:
    # the controller deleted its Job once the job was over, and no runner Pod is left running.
    assert busy not in {j["metadata"]["name"] for j in stack.runner_jobs(ns)}
    wait_for(
        lambda: not [p for p in stack.pods(ns) if p["status"]["phase"] in ("Pending", "Running")],
        timeout=60,
        what="no runner Pod left running",
    )
    wait_for(lambda: not stack.runners_with(label), timeout=30, what="Gitea lists no runner of the group")


def test_a_wrong_registration_token_starts_no_runner_says_so_within_seconds_and_recovers_when_fixed(
    stack: NodeStack,
) -> None:
    """The controller registers each runner before its Job: a token Gitea refuses makes no runner Job (no
    Pod fails, none churns), the group says why within seconds, and once the Secret holds the right
    token the job runs."""
    wrong = "0" * 40
    ns, label = stack.namespace("badtoken", registration_token=wrong), new_label()
    stack.group(ns, label)
    repo = stack.repo()
    run_id = stack.push(repo, workflow("patient", label=label))

    condition = stack.condition_false(ns, "RunnersAdmitted", timeout=30)
    assert condition["reason"] == "RegistrationRefused", condition
    assert "runner registration token not found" in condition["message"], condition
    assert wrong not in condition["message"] and TOKENS in condition["message"]
    assert not stack.runner_jobs(ns) and not stack.pods(ns), "nothing was started"
    assert not stack.runners_with(label), "and nothing registered in Gitea"
    assert stack.metric("grs_gitea_requests_total", endpoint="register", outcome="500") >= 1
    assert [j["status"] for j in stack.jobs(repo, run_id)] == ["queued"], "the Gitea job waits"

    stack.set_tokens(ns, registration_token=stack.registration_token)
    assert stack.wait_run(repo, run_id, timeout=120)["conclusion"] == "success"
    wait_for(
        lambda: stack.condition(ns, "RunnersAdmitted").get("status") == "True",
        timeout=30,
        what="RunnersAdmitted True again",
    )


def only_api_token(stack: NodeStack, ns: str) -> None:
    """The namespace's Secret holds the API token alone: no registration token anywhere in it."""
    secret = {"metadata": {"name": TOKENS}, "stringData": {"api-token": stack.gitea.token}}
    status, body = api_request(stack.node, "PUT", f"/api/v1/namespaces/{ns}/secrets/{TOKENS}", secret)
    assert status == 200, body


def user_repo(stack: NodeStack) -> str:
    """A new repository of the API token's user (the Gitea's admin), with a `workflow_job` webhook."""
    name = f"u{uuid.uuid4().hex[:6]}"
    stack.gitea.api("POST", "/user/repos", {"name": name, "auto_init": True, "default_branch": "main"})
    config = {"url": stack.receiver_url, "content_type": "json", "secret": stack.webhook_secret}
    hook = {"type": "gitea", "active": True, "events": ["workflow_job"], "config": config}
    stack.gitea.api("POST", f"/repos/{ADMIN}/{name}/hooks", hook)
    return f"{ADMIN}/{name}"


def user_runners_with(stack: NodeStack, label: str) -> list[dict[str, Any]]:
    """The API token's user's runners that carry a label, as Gitea lists them."""
    runners = stack.gitea.api("GET", "/user/actions/runners?limit=50")["runners"] or []
    return [r for r in runners if label in {lb["name"] for lb in r.get("labels") or []}]


def _conditions(stack: NodeStack, ns: str, name: str) -> dict[str, dict[str, Any]]:
    """The group's conditions by type, from one read of its status."""
    return {c["type"]: c for c in stack.group_status(ns, name).get("conditions") or []}


def test_a_group_with_no_registration_token_at_all_runs_an_org_job_green_and_leaves_no_row(stack: NodeStack) -> None:
    """One token: the group names no `registrationToken`, and its namespace holds none. The reconciler
    fetches the org's registration token with the group's API token and registers the runner itself;
    the job goes green, Gitea keeps no row of the runner, and the token is nowhere in our logs."""
    ns, label = stack.namespace("onetoken"), new_label()
    only_api_token(stack, ns)
    stack.group(ns, label, registrationToken=None)
    repo = stack.repo()
    run_id = stack.push(repo, workflow("solo", label=label))

    run = stack.wait_run(repo, run_id)

    assert run["conclusion"] == "success", stack.jobs(repo, run_id)
    wait_for(lambda: not stack.active_runners(ns), timeout=60, what="the runner Job finished")
    wait_for(lambda: not stack.runners_with(label), timeout=30, what="Gitea lists no runner of the group")
    assert stack.condition(ns, "RunnersAdmitted")["status"] == "True"
    org_token = stack.gitea.api("POST", f"/orgs/{ORG}/actions/runners/registration-token")["token"]
    assert org_token == stack.registration_token, "fetching it rotated nothing"
    assert org_token not in stack.our_log("reconciler")


def test_a_user_scope_group_with_only_its_api_token_runs_a_job_of_that_users_repo_green(stack: NodeStack) -> None:
    """A group of the user the API token is of, with that token alone: its runners register with the
    user's own registration token (fetched from `/user/actions/runners/registration-token`), so Gitea
    hands them the user's jobs: the job goes green, and the user keeps no runner row of the group."""
    ns, label = stack.namespace("userscope"), new_label()
    only_api_token(stack, ns)
    stack.group(ns, label, scope="user", user=ADMIN, org=None, registrationToken=None)
    repo = user_repo(stack)
    run_id = stack.push(repo, workflow("mine", label=label))

    run = stack.wait_run(repo, run_id)

    assert run["conclusion"] == "success", stack.jobs(repo, run_id)
    wait_for(lambda: not stack.active_runners(ns), timeout=60, what="the runner Job finished")
    wait_for(lambda: not user_runners_with(stack, label), timeout=30, what="the user keeps no runner of the group")
    assert not stack.runners_with(label), "no org runner was made"


def test_a_user_group_handed_an_org_token_keeps_no_runner_idle_and_names_both_scopes(stack: NodeStack) -> None:
    """A user group whose Secret holds the org's registration token (as our examples once had it): its
    runner registered as an org runner, which Gitea never hands the user's job. Within seconds the
    group says so, naming both scopes; that runner's row is gone and no other is registered with the
    token, so no runner sits idle and no Pod starts. Without the `registrationToken` the job goes green."""
    ns, label = stack.namespace("mismatch"), new_label()
    name = f"user-{label}"
    stack.group(ns, label, name=name, scope="user", user=ADMIN, org=None)
    repo = user_repo(stack)
    run_id = stack.push(repo, workflow("waits", label=label))

    conditions = wait_for(
        lambda: (c := _conditions(stack, ns, name)).get("RunnersAdmitted", {}).get("status") == "False" and c,
        timeout=30,
        what="RunnersAdmitted False",
    )

    admitted, ready = conditions["RunnersAdmitted"], conditions["Ready"]
    assert admitted["reason"] == ready["reason"] == "RegistrationScopeMismatch", conditions
    assert f"the group's scope (user {ADMIN})" in admitted["message"], admitted
    assert f"registered in org {ORG}; its row was deleted through org {ORG}" in admitted["message"], admitted
    assert stack.registration_token not in admitted["message"] and TOKENS in admitted["message"]
    assert not stack.runner_jobs(ns) and not stack.pods(ns), "nothing was started"
    assert not stack.runners_with(label) and not user_runners_with(stack, label), "no runner row is left"
    assert [j["status"] for j in stack.jobs(repo, run_id)] == ["queued"], "the Gitea job waits"
    outside = [ln for ln in stack.our_log("reconciler").splitlines() if "outside its group's scope" in ln]
    assert len([ln for ln in outside if f'"{name}-' in ln]) == 1, "one runner registered with it, not one a pass"

    path = f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups/{name}"
    patch = {"spec": {"registrationToken": None}}
    assert api_request(stack.node, "PATCH", path, patch, content_type="application/merge-patch+json")[0] == 200
    assert stack.wait_run(repo, run_id)["conclusion"] == "success", stack.jobs(repo, run_id)
    wait_for(
        lambda: stack.condition(ns, "RunnersAdmitted", name=name).get("status") == "True",
        timeout=30,
        what="RunnersAdmitted True again",
    )


# Everything a job step can read, printed: its environment, every process's command line and
# environment, and every long token-like string in every file it can read (the filesystems of the
# runner container, its volumes included). `printf` markers show that each part ran.
SNOOP = """name: snoop
on: [push]
jobs:
  snoop:
    runs-on: {label}
    steps:
      - run: |
          echo "== env"; env
          echo "== processes"
          for p in /proc/[0-9]*; do
            {{ tr '\\0' ' ' < "$p/cmdline"; echo; tr '\\0' '\\n' < "$p/environ"; }} 2>/dev/null || true
          done
          echo "== files"
          files() {{
            find / \\( -path /proc -o -path /sys -o -path /dev \\) -prune -o -type f -readable "$@" 2>/dev/null
          }}
          files -size -4M -print0 | xargs -0 grep -ahoE '[A-Za-z0-9]{{32,}}' 2>/dev/null | sort -u
          echo "== files read: $(files -print | wc -l)"
"""


def test_a_runner_pod_the_namespaces_pod_security_refuses_is_reported_within_seconds(stack: NodeStack) -> None:
    """The Docker mode's sidecar is privileged; a namespace at Pod Security `baseline` (what the quick
    start once labelled) refuses the runner's Pod. The group says why within seconds, with the API
    server's message, instead of a Pending runner reaped at its `pendingTimeout` (10 minutes)."""
    ns, label = stack.namespace("strict"), new_label()
    patch = {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "baseline"}}}
    path = f"/api/v1/namespaces/{ns}"
    assert api_request(stack.node, "PATCH", path, patch, content_type="application/merge-patch+json")[0] == 200
    stack.group(ns, label, containerMode="dind")
    repo = stack.repo()
    stack.push(repo, workflow("refused", label=label))
    (job,) = wait_for(lambda: stack.runner_jobs(ns), timeout=60, what="a runner Job for the queued job")

    # (the pendingTimeout is 10 minutes: a condition within this wait is the controller reading the refusal)
    condition = stack.condition_false(ns, "RunnersAdmitted", timeout=30)
    assert condition["reason"] == "PodRefused", condition
    assert 'violates PodSecurity "baseline:latest"' in condition["message"], condition["message"]
    assert job["metadata"]["name"] in condition["message"]
    assert not stack.pods(ns), "no runner Pod was admitted"
    # Deleting the group drains it: the refused runner never registered, so it goes at once.
    path = f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups/runners"
    assert api_request(stack.node, "DELETE", path)[0] == 200
    wait_for(lambda: api_request(stack.node, "GET", path)[0] == 404, timeout=60, what="the group drained")
    assert not stack.active_runners(ns)


def test_a_job_step_can_read_no_registration_token(stack: NodeStack) -> None:
    ns, label = stack.namespace("snoop"), new_label()
    stack.group(ns, label)
    repo = stack.repo()
    run_id = stack.push(repo, SNOOP.format(label=f"{label}"))
    assert stack.wait_run(repo, run_id)["conclusion"] == "success"
    log = stack.only_log(repo, run_id)
    (runner,) = [runner_of(j) for j in stack.runner_jobs(ns)]
    # The step did look: its environment, the processes, and the files with their long strings.
    assert f"GITEA_RUNNER_NAME={runner}" in log and "== processes" in log, log[-2000:]
    assert "act_runner daemon" in log, "the runner's own process was listed"
    files_read = int(log.rsplit("== files read: ", 1)[1].split()[0])  # the output, not the script Gitea shows
    assert files_read > 1000, files_read
    assert stack.registration_token not in log, "a job step could read the registration token"
    assert "GITEA_RUNNER_REGISTRATION_TOKEN" not in log.split("== files", 1)[0]


def test_services_route_and_their_names_resolve_inside_pods(stack: NodeStack) -> None:
    node, ns = stack.node, stack.namespace("svc")
    # The server: Python's in our own image; the client: bash's /dev/tcp in the runner image (glibc's
    # resolver, the Pod's resolv.conf, cluster DNS, then kube-proxy's Service rules).
    server = image("scaler")[0]
    serve = ["python3", "-m", "http.server", "8080", "--directory", "/opt/grs"]
    web = {
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "web", "image": server, "command": serve}]},
    }
    assert api_request(node, "POST", f"/api/v1/namespaces/{ns}/pods", web)[0] == 201
    service = {
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }
    assert api_request(node, "POST", f"/api/v1/namespaces/{ns}/services", service)[0] == 201
    fetch = (
        "for i in $(seq 50); do exec 3<>/dev/tcp/web.$NS.svc.cluster.local/80 && break; sleep 0.2; done; "
        "printf 'GET / HTTP/1.0\\r\\n\\r\\n' >&3; cat <&3"
    )
    client = {
        "metadata": {"name": "client"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "client",
                    "image": stack.runner_image,
                    "command": ["bash", "-c", fetch],
                    "env": [{"name": "NS", "value": ns}],
                }
            ],
        },
    }
    assert api_request(node, "POST", f"/api/v1/namespaces/{ns}/pods", client)[0] == 201
    phase = wait_for(
        lambda: (
            (p := api_request(node, "GET", f"/api/v1/namespaces/{ns}/pods/client")[1]["status"].get("phase"))
            in ("Succeeded", "Failed")
            and p
        ),
        timeout=60,
        what="the client Pod finished",
    )
    log = api_text(node, f"/api/v1/namespaces/{ns}/pods/client/log")
    assert phase == "Succeeded" and "200 OK" in log and "Directory listing for /" in log, log


def test_the_pickup_benchmark_times_every_job(stack: NodeStack) -> None:
    got = measure(stack, mode="cold", rounds=1, jobs=2)  # what `tox -e bench -- --only node` runs, small
    assert len(got.gitea) == 2 and len(got.api) == 2 and len(got.to_pick) == 2, got
    assert all(v >= 0 for v in got.gitea + got.api + got.to_pod)
    assert 1 <= got.max_alive <= 4
