"""What users feel, on a real node: from a job becoming `queued` in Gitea to a runner picking it.

Workflows of `jobs` parallel jobs are pushed `rounds` times to a real Gitea; real act_runner Pods
started by our reconciler take them. Three ways: cold (scale from zero), warm (`minIdleRunners`),
and polling only (no webhook). Times come from Gitea's API, read every 100 ms while a run goes (when
each job is first listed queued, and first listed picked), and from Gitea's own `created_at` and
`started_at` (to the second); the path is split into its parts with the arrival times of a watch on
the runner Jobs and Pods. Gitea's webhook deliveries are timed against the same API reads: they are
what a webhook-driven scaler waits for.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from tests.e2e.node_stack import NodeStack, wait_for, workflow
from tests.e2e.watch import RunnerWatch

Mode = Literal["cold", "warm", "poll"]


@dataclass
class Pickup:
    """Per job: seconds from queued to picked, by Gitea's clock and (with webhooks) by our receiver's."""

    gitea: list[float] = field(default_factory=list)  # Gitea's created_at -> started_at, to the second
    api: list[float] = field(default_factory=list)  # first listed queued -> first listed picked
    delivery: list[float] = field(default_factory=list)  # first listed queued -> queued webhook received
    # the cold path's parts, per job: queued -> runner Job created -> its Pod running -> picked
    to_job: list[float] = field(default_factory=list)
    to_pod: list[float] = field(default_factory=list)
    to_pick: list[float] = field(default_factory=list)
    max_alive: int = 0


def _stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _deliveries(stack: NodeStack) -> dict[tuple[int, str], float]:
    """When the receiver first recorded each (job id, state), in seconds since the epoch."""
    seen: dict[tuple[int, str], float] = {}
    for line in stack.our_log("receiver").splitlines():
        if '"webhook recorded"' in line:
            d = json.loads(line)
            seen.setdefault((int(d["job_id"]), d["action"]), _stamp(d["time"]))
    return seen


def measure(stack: NodeStack, *, mode: Mode, rounds: int, jobs: int) -> Pickup:
    """Push `rounds` workflows of `jobs` parallel jobs, one after the other, and time each pickup."""
    ns, label = stack.namespace(f"bench-{mode}"), f"b{uuid.uuid4().hex[:6]}"
    warm = jobs if mode == "warm" else 0
    stack.group(ns, label, minIdleRunners=warm, maxActiveRunners=2 * jobs)
    repo = stack.repo(webhook=mode != "poll")
    watch = RunnerWatch(stack.node, ns)
    out = Pickup()
    try:
        for n in range(rounds):
            if warm:
                wait_for(
                    lambda: sum(1 for r in stack.runners_with(label) if not r["busy"]) >= warm,
                    timeout=120,
                    what=f"{warm} warm runners registered",
                )
            text = workflow(*(f"j{i}" for i in range(jobs)), label=label) + f"# round {n}\n"
            run_id = stack.push(repo, text)
            queued, picked = _follow(stack, repo, run_id)
            _collect(stack, repo, run_id, watch, out, queued=queued, picked=picked)
        out.max_alive = watch.max_alive
    finally:
        watch.stop()
    return out


def _follow(stack: NodeStack, repo: str, run_id: int) -> tuple[dict[int, float], dict[int, float]]:
    """Read the run's jobs every 100 ms until it completes: when each was first listed queued and picked."""
    listed = time.time()  # the jobs exist from the moment the run is listed
    queued: dict[int, float] = {}
    picked: dict[int, float] = {}
    deadline = listed + 300
    while time.time() < deadline:
        now = time.time()
        jobs = stack.jobs(repo, run_id)
        for job in jobs:
            if job["status"] in ("queued", "waiting"):
                queued.setdefault(job["id"], now)
            else:
                queued.setdefault(job["id"], listed)
                picked.setdefault(job["id"], now)
        if jobs and all(j["status"] == "completed" for j in jobs):
            return queued, picked
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} of {repo} did not complete within 300 s")


def _collect(
    stack: NodeStack,
    repo: str,
    run_id: int,
    watch: RunnerWatch,
    out: Pickup,
    *,
    queued: dict[int, float],
    picked: dict[int, float],
) -> None:
    deliveries = _deliveries(stack)
    by_job = {job_id: name for name, job_id in watch.for_job.items()}
    for job in stack.jobs(repo, run_id):
        jid = job["id"]
        out.gitea.append(_stamp(job["started_at"]) - _stamp(job["created_at"]))
        out.api.append(picked[jid] - queued[jid])
        if (jid, "queued") in deliveries:
            out.delivery.append(deliveries[(jid, "queued")] - queued[jid])
        runner = by_job.get(jid)
        if runner and runner in watch.added_ms and runner in watch.running_ms:
            created, running = watch.added_ms[runner] / 1000, watch.running_ms[runner] / 1000
            out.to_job.append(created - queued[jid])
            out.to_pod.append(running - created)
            out.to_pick.append(picked[jid] - running)
