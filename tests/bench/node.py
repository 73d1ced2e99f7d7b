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

import contextlib
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from statistics import median
from typing import Any, Literal

from reconciler.model.names import job_of_runner
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


def measure(
    stack: NodeStack,
    *,
    mode: Mode,
    rounds: int,
    jobs: int,
    shape: Callable[[str, str], dict[str, Any]] | None = None,
) -> Pickup:
    """Push `rounds` workflows of `jobs` parallel jobs, one after the other, and time each pickup.
    `shape(namespace, label)` prepares the namespace and returns more of the group's spec (a runner
    mode: its image, `containerMode`, labels); default: host mode on the runner image."""
    ns, label = stack.namespace(f"bench-{mode}"), f"b{uuid.uuid4().hex[:6]}"
    warm = jobs if mode == "warm" else 0
    more = shape(ns, label) if shape is not None else {}
    stack.group(ns, label, minIdleRunners=warm, maxActiveRunners=2 * jobs, **more)
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


def _note(
    listing: list[dict[str, Any]],
    *,
    now: float,
    listed: float,
    queued: dict[int, float],
    picked: dict[int, float],
) -> None:
    """Record when each job of a listing was first seen queued and first seen picked (a job already
    picked when first listed counts as queued since the run was listed)."""
    for job in listing:
        if job["status"] in ("queued", "waiting"):
            queued.setdefault(job["id"], now)
        else:
            queued.setdefault(job["id"], listed)
            picked.setdefault(job["id"], now)


def _follow(stack: NodeStack, repo: str, run_id: int) -> tuple[dict[int, float], dict[int, float]]:
    """Read the run's jobs every 100 ms until it completes: when each was first listed queued and picked."""
    listed = time.time()  # the jobs exist from the moment the run is listed
    queued: dict[int, float] = {}
    picked: dict[int, float] = {}
    deadline = listed + 300
    while time.time() < deadline:
        now = time.time()
        jobs = stack.jobs(repo, run_id)
        _note(jobs, now=now, listed=listed, queued=queued, picked=picked)
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


# -- a burst: many jobs at once ---------------------------------------------------------------------

# The path of one runner in a burst, each stage named by who does the work and ending when the watch
# (or, for the last, Gitea's API) first showed it.
STAGES = (
    ("reconciler: queued -> runner Job", "queued", "job"),
    ("Job controller: -> Pod", "job", "pod"),
    ("scheduler: -> bound", "pod", "scheduled"),
    ("kubelet + containerd: -> prepare container started", "scheduled", "init"),
    ("prepare (the credential the controller registered, copied): -> exited", "init", "registered"),
    ("kubelet + containerd: -> runner container running", "registered", "running"),
    ("act_runner: -> job picked", "running", "picked"),
)
PAGE = 50  # Gitea caps `limit` at 50


@dataclass
class Burst:
    """One burst of `jobs` jobs queued at once, and where its time went."""

    jobs: int
    all_picked: float = 0.0  # the first job queued -> the last picked, s
    api: list[float] = field(default_factory=list)  # per job: first listed queued -> first listed picked
    gitea: list[float] = field(default_factory=list)  # per job: Gitea's created_at -> started_at, to the second
    stages: dict[str, list[float]] = field(default_factory=dict)  # stage -> per runner, s
    reached: dict[str, float] = field(default_factory=dict)  # step -> when the last runner reached it, s after queued
    max_running: int = 0  # the most runner Pods running at once (phase Running, not yet terminated)
    max_pods: int = 0  # the most runner Pods on the node at once (bound and not terminated)
    cpu: dict[str, float] = field(default_factory=dict)  # process -> cores used on average over the burst
    busy: float = 0.0  # the machine's cores busy on average over the burst (user + system + irq)
    cores: int = 0
    pod_mb: float = 0.0  # RSS per runner Pod (its cgroup's), when the Pods had the most
    shim_mb: float = 0.0  # RSS per runner Pod's containerd shim (outside the Pod's cgroup)
    slowest: str = ""  # the stage with the longest median


class HostSampler:
    """Every `every` s: the machine's busy CPU time, and each process's CPU time and RSS, from /proc; the
    runner Pods' memory from their cgroup. Processes are named by their comm (without a version
    suffix); those that are neither this process's descendants nor Pods' (under a containerd shim) are
    counted together as "not this benchmark", kernel threads as "kernel". A process that lived between
    two samples is missed: its time shows as unaccounted."""

    def __init__(self, names: dict[int, str], every: float = 1.0) -> None:
        self.names = names  # pid -> a name for processes whose comm does not say what they are
        self.every = every
        self.ticks: dict[int, tuple[str, int]] = {}  # pid -> (its start time, its CPU ticks at the last sample)
        self.used: dict[str, int] = {}  # name -> CPU ticks since the start, of every process so called
        # At the most memory in the Pods' cgroup: (act_runner processes, that RSS in MB, the shims' RSS in MB)
        self.peak: tuple[int, float, float] = (0, 0.0, 0.0)
        self._stop = threading.Event()
        self._hz = os.sysconf("SC_CLK_TCK")
        self._page = os.sysconf("SC_PAGE_SIZE")
        self._cpu0 = self._cpu()
        self.started = time.monotonic()
        self.result: tuple[dict[str, float], float] = ({}, 0.0)
        self._scan(first=True)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def _cpu() -> tuple[int, int]:
        """(busy, total) jiffies of all cores."""
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        idle = fields[3] + fields[4]  # idle + iowait
        return sum(fields[:8]) - idle, sum(fields[:8])

    @staticmethod
    def _pods_rss_mb() -> float:
        """The RSS of everything in the kubelet's Pod cgroups (cgroup v1, the cgroupfs driver)."""
        try:
            with open("/sys/fs/cgroup/memory/kubepods/memory.stat") as f:
                stat = dict(line.split() for line in f)
        except OSError:
            return 0.0
        return int(stat.get("total_rss", 0)) / 2**20

    def _scan(self, *, first: bool = False) -> None:
        procs: dict[int, tuple[int, str, str, int, int]] = {}  # pid -> (ppid, comm, start, ticks, rss pages)
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    raw = f.read()
            except OSError:
                continue
            comm, rest = raw[raw.index("(") + 1 : raw.rindex(")")], raw[raw.rindex(")") + 2 :].split()
            procs[int(entry.name)] = (int(rest[1]), comm, rest[19], int(rest[11]) + int(rest[12]), int(rest[21]))
        me = os.getpid()
        shims_rss = 0
        for pid, (_, comm, start, ticks, rss) in procs.items():
            name = self.names.get(pid) or _name(comm)
            if name == "containerd-shim":
                shims_rss += rss
            elif pid != me and name not in self.names.values():
                name = _owner(pid, procs, me) or name
            known = self.ticks.get(pid)
            if known is not None and known[0] == start:
                self.used[name] = self.used.get(name, 0) + ticks - known[1]
            elif not first:  # born since the last sample: all of its time is new
                self.used[name] = self.used.get(name, 0) + ticks
            self.ticks[pid] = (start, ticks)
        runners = sum(1 for _, comm, _, _, _ in procs.values() if comm == "act_runner")
        pods_mb = self._pods_rss_mb()
        if not first and runners and pods_mb >= self.peak[1]:
            self.peak = (runners, pods_mb, shims_rss * self._page / 2**20)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self._scan()

    def stop(self) -> tuple[dict[str, float], float]:
        """Stop (once); return each process name's cores used on average, and the machine's busy cores."""
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join(timeout=10)
            self._scan()
            seconds = time.monotonic() - self.started
            busy, total = self._cpu()
            cores = (busy - self._cpu0[0]) / max(1, total - self._cpu0[1]) * (os.cpu_count() or 1)
            self.result = {name: ticks / self._hz / seconds for name, ticks in self.used.items()}, cores
        return self.result


def _name(comm: str) -> str:
    """A process's name without the version our peers' binaries carry (`kube-apiserver-v1.36.3-r2`,
    cut to 15 characters by the kernel)."""
    return re.sub(r"-(v?\d[\w.-]*)?$", "", comm)


def _owner(pid: int, procs: dict[int, tuple[int, str, str, int, int]], me: int) -> str | None:
    """None for a process of this benchmark (a descendant of this process, or of a Pod's shim); else
    "kernel" for kernel threads, "not this benchmark" for the rest."""
    seen = 0
    while pid in procs and seen < 64:
        ppid, comm, *_ = procs[pid]
        if pid == me or comm == "containerd-shim":
            return None
        if pid == 2 or ppid == 2:
            return "kernel"
        pid, seen = ppid, seen + 1
    return "not this benchmark"


def all_jobs(stack: NodeStack, repo: str, run_id: int) -> list[dict[str, Any]]:
    """Every job of a run, page by page (a short page is the last)."""
    out: list[dict[str, Any]] = []
    for page in range(1, 1000):
        got = stack.gitea.api("GET", f"/repos/{repo}/actions/runs/{run_id}/jobs?page={page}&limit={PAGE}")["jobs"]
        out += got or []
        if len(got or []) < PAGE:
            break
    return out


def burst(stack: NodeStack, *, jobs: int, timeout: float = 900) -> Burst:
    """Push one workflow of `jobs` parallel jobs to a group allowed `jobs` runners, and follow it until
    every job was picked and the run completed: when each job was picked (Gitea's API, read as fast as
    it answers), each runner's path through the node (a watch), and the CPU and memory it took."""
    ns, label = stack.namespace("bench-burst"), f"b{uuid.uuid4().hex[:6]}"
    stack.group(ns, label, maxActiveRunners=jobs)
    repo = stack.repo()
    procs = {"gitea": stack.gitea.proc}
    for service in (stack.reconciler, stack.receiver):
        if service is not None:
            procs[service.name] = service.proc
    names = {proc.pid: name for name, proc in procs.items() if proc is not None}  # Python's comm says "python"
    names[os.getpid()] = "bench"  # this process: the reads of Gitea's API, the watch, the sampler
    watch = RunnerWatch(stack.node, ns)
    sampler = HostSampler(names)
    out = Burst(jobs=jobs, cores=os.cpu_count() or 1)
    try:
        run_id = stack.push(repo, workflow(*(f"j{i}" for i in range(jobs)), label=label))
        queued, picked, by_runner = _follow_all(stack, repo, run_id, jobs=jobs, timeout=timeout)
        out.cpu, out.busy = sampler.stop()
        pods, pods_mb, shims_mb = sampler.peak
        if pods:
            out.pod_mb, out.shim_mb = pods_mb / pods, shims_mb / pods
        try:  # before the node stops: not measured, but the run's Pods end on their own
            stack.wait_run(repo, run_id, timeout=timeout)
        except (OSError, RuntimeError, AssertionError) as err:
            print(f"  the run did not complete: {err!r}", flush=True)
    finally:
        sampler.stop()
        watch.stop()
    if not picked:
        return out
    with contextlib.suppress(OSError, RuntimeError):  # Gitea's own clock, once it answers again
        listing = all_jobs(stack, repo, run_id)
        out.gitea = [_stamp(j["started_at"]) - _stamp(j["created_at"]) for j in listing if j.get("started_at")]
    start = min(queued.values())
    out.api = [picked[j] - queued[j] for j in picked]
    out.all_picked = max(picked.values()) - start
    runner_queued = {name: queued[job] for name, job in watch.for_job.items() if job in queued}
    steps: dict[str, dict[str, float]] = {
        "queued": runner_queued,
        "job": {n: ms / 1000 for n, ms in watch.added_ms.items()},
        "pod": {n: ms / 1000 for n, ms in watch.pod_added_ms.items()},
        "scheduled": {n: ms / 1000 for n, ms in watch.scheduled_ms.items()},
        "init": {n: ms / 1000 for n, ms in watch.init_started_ms.items()},
        "registered": {n: ms / 1000 for n, ms in watch.registered_ms.items()},
        "running": {n: ms / 1000 for n, ms in watch.running_ms.items()},
        "picked": {n: picked[job] for n, job in by_runner.items()},
    }
    for stage, a, b in STAGES:
        out.stages[stage] = [steps[b][n] - steps[a][n] for n in steps[b] if n in steps[a]]
    for step, when in steps.items():
        if when:
            out.reached[step] = max(when.values()) - start
    out.slowest = max(out.stages, key=lambda s: median(out.stages[s]) if out.stages[s] else 0.0)
    out.max_running = _most_at_once(watch.running_ms, watch.done_ms)
    out.max_pods = _most_at_once(watch.scheduled_ms, watch.done_ms)
    return out


def _follow_all(
    stack: NodeStack, repo: str, run_id: int, *, jobs: int, timeout: float
) -> tuple[dict[int, float], dict[int, float], dict[str, int]]:
    """Read all of a run's jobs, again and again, until every one of `jobs` was picked: when each was
    first listed queued and first listed picked, and which runner Job picked it."""
    listed = time.time()
    queued: dict[int, float] = {}
    picked: dict[int, float] = {}
    by_runner: dict[str, int] = {}
    deadline = listed + timeout
    while time.time() < deadline:
        now = time.time()
        try:
            listing = all_jobs(stack, repo, run_id)
        except (OSError, RuntimeError) as err:  # a busy Gitea may time out a read (30 s) or answer 5xx
            print(f"  reading the run's jobs: {err!r}", flush=True)
            continue
        _note(listing, now=now, listed=listed, queued=queued, picked=picked)
        for job in listing:
            if job["status"] not in ("queued", "waiting") and job.get("runner_name"):
                by_runner.setdefault(job_of_runner(job["runner_name"]), job["id"])
        if len(picked) >= jobs:
            return queued, picked, by_runner
        time.sleep(0.2)
    print(f"  only {len(picked)} of {jobs} jobs listed picked within {timeout} s", flush=True)
    return queued, picked, by_runner


def _most_at_once(start: dict[str, int], end: dict[str, int]) -> int:
    """The most intervals [start, end) open at once (an interval with no end is open until the last)."""
    edges = sorted([(t, 1) for t in start.values()] + [(end[n], -1) for n in start if n in end])
    most = alive = 0
    for _, step in edges:
        alive += step
        most = max(most, alive)
    return most
