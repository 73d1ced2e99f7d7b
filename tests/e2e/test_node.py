"""End to end on a real node: pushed workflows run on act_runner Pods that our reconciler started.

Every scenario asserts what a user sees: Gitea's run and job conclusions, the runner Pods and Jobs,
the RunnerGroup's status, and Gitea's list of runners afterwards. Each test has its own namespace,
RunnerGroup, runner label and repository, so the order they run in does not matter.
"""

from __future__ import annotations

import itertools
import uuid
from datetime import datetime
from typing import Any

import pytest

from bench.node import measure
from tests.e2e.node_stack import SECRET, NodeStack, wait_for, workflow
from tests.e2e.watch import RunnerWatch, finished
from tests.kube_cluster import api_request, api_text
from tests.node.cluster import image

pytestmark = pytest.mark.node


def new_label() -> str:
    return f"l{uuid.uuid4().hex[:6]}"


def active_runners(stack: NodeStack, ns: str) -> list[str]:
    return [j["metadata"]["name"] for j in stack.runner_jobs(ns) if not finished(j)]


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
        lambda: not active_runners(stack, ns),
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
    assert watch.relists == 0, "the watch saw every event"


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
    wait_for(lambda: not active_runners(stack, ns), timeout=60, what="every runner Job finished")
    assert all(finished(j) and j["status"].get("succeeded") == 1 for j in stack.runner_jobs(ns))


def test_polling_alone_serves_a_repository_without_webhook(stack: NodeStack) -> None:
    ns, label = stack.namespace("poll"), new_label()
    stack.group(ns, label)
    repo = stack.repo(webhook=False)
    run_id = stack.push(repo, workflow("a", "b", label=label, needs="c"))
    run = stack.wait_run(repo, run_id, timeout=180)
    assert run["conclusion"] == "success", stack.jobs(repo, run_id)
    ids = {j["id"] for j in stack.jobs(repo, run_id)}
    assert not ids & stack.delivered_job_ids(), "no webhook reported these jobs"
    assert "poll healed redis" in stack.our_log("reconciler")


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
    # one more warm runner may start; a surplus idle runner goes after GRS_IDLE_GRACE (60 s): the pool
    # converges to exactly one warm runner.
    wait_for(lambda: len(active_runners(stack, ns)) == 1, timeout=120, what="exactly one runner left")
    wait_for(lambda: stack.group_status(ns).get("idleRunners") == 1, timeout=30, what="status: one idle runner")


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
    wait_for(
        lambda: [j for j in stack.jobs(repo, first) if j["status"] == "in_progress"],
        timeout=60,
        what="the long job running",
    )
    (busy,) = active_runners(stack, ns)
    # A new push in the same concurrency group cancels the running run (Gitea's cancel-in-progress).
    second = stack.push(repo, CANCELLABLE.format(label=label, seconds=1), path=".gitea/workflows/long.yml")

    assert stack.wait_run(repo, first, timeout=60)["conclusion"] == "cancelled"
    assert stack.wait_run(repo, second, timeout=120)["conclusion"] == "success", "capacity came back"
    wait_for(lambda: not active_runners(stack, ns), timeout=60, what="every runner Job finished")
    # Gitea removed the cancelled job's runner at once, and the runner never heard of the cancel:
    # the controller deleted its Job once the job was over, and no runner Pod is left running.
    assert busy not in {j["metadata"]["name"] for j in stack.runner_jobs(ns)}
    wait_for(
        lambda: not [p for p in stack.pods(ns) if p["status"]["phase"] in ("Pending", "Running")],
        timeout=60,
        what="no runner Pod left running",
    )
    wait_for(lambda: not stack.runners_with(label), timeout=30, what="Gitea lists no runner of the group")


def test_a_wrong_registration_token_fails_fast_backs_off_and_recovers_when_fixed(stack: NodeStack) -> None:
    wrong = "0" * 40
    ns, label = stack.namespace("badtoken", registration_token=wrong), new_label()
    stack.group(ns, label)
    repo = stack.repo()
    run_id = stack.push(repo, workflow("patient", label=label))

    def failed_jobs() -> list[dict[str, Any]]:
        return [j for j in stack.runner_jobs(ns) if j["status"].get("failed")]

    first = wait_for(failed_jobs, timeout=60, what="the first runner failed")[0]
    (pod,) = [p for p in stack.pods(ns) if p["metadata"]["labels"]["job-name"] == first["metadata"]["name"]]
    ended = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert pod["status"]["phase"] == "Failed" and ended["exitCode"] == 1
    assert seconds(ended["finishedAt"]) - seconds(pod["metadata"]["creationTimestamp"]) < 15, "it failed fast"

    def health() -> dict[str, Any] | None:
        conds = {c["type"]: c for c in stack.group_status(ns).get("conditions") or []}
        return conds.get("RunnersHealthy") if conds.get("RunnersHealthy", {}).get("status") == "False" else None

    condition = wait_for(health, timeout=30, what="RunnersHealthy False")
    assert condition["reason"] == "RegistrationFailed", condition
    assert "refused the registration token" in condition["message"] and wrong not in condition["message"]

    # Attempts back off: the next runner starts only after 3 s, then 6 s, after the last failure.
    jobs: list[dict[str, Any]] = wait_for(
        lambda: len(f := failed_jobs()) >= 3 and f, timeout=90, what="three failed runners"
    )
    jobs.sort(key=lambda j: j["metadata"]["creationTimestamp"])
    for k, (before, after) in enumerate(itertools.pairwise(jobs)):
        gap = seconds(after["metadata"]["creationTimestamp"]) - seconds(failed_at(before))
        assert gap >= 3 * 2**k - 1, f"runner {k + 2} started {gap}s after runner {k + 1} failed"
    assert [j["status"] for j in stack.jobs(repo, run_id)] == ["queued"], "the Gitea job waits"

    stack.set_tokens(ns, registration_token=stack.registration_token)
    assert stack.wait_run(repo, run_id, timeout=120)["conclusion"] == "success"
    wait_for(lambda: health() is None, timeout=30, what="RunnersHealthy True again")


def seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def failed_at(job: dict[str, Any]) -> str:
    return str(next(c["lastTransitionTime"] for c in job["status"]["conditions"] if c["type"] == "Failed"))


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
    got = measure(stack, mode="cold", rounds=1, jobs=2)  # what `python -m bench --only node` runs, small
    assert len(got.gitea) == 2 and len(got.api) == 2 and len(got.to_pick) == 2, got
    assert all(v >= 0 for v in got.gitea + got.api + got.to_pod)
    assert 1 <= got.max_alive <= 4
