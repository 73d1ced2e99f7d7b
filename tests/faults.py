"""A rig for fault tests: our real processes (the receiver, reconciler replicas), a real redis-server and
kube-apiserver, a fake Gitea whose jobs simulated runners take, and faults the test injects: replicas
paused, killed and restarted by PID, Redis flushed, webhooks lost. TEST HARNESS ONLY.

Runners are simulated, not run (no kubelet here): a moment after a runner Job appears, its "runner"
(the row the controller registered in the fake Gitea) takes the oldest queued job of its repository,
as Gitea hands out jobs to any matching runner; the job runs for a moment and completes; Gitea removes
the ephemeral runner's row as it finishes the job; then the Job is marked Complete through its status
subresource, as the Job controller would once act_runner exited. A runner that finds no queued job
stays idle: a surplus runner, which the tally counts. Every change is told to the real receiver as
Gitea's webhook, in Gitea's shape (`runner_id` of the runner that took the job; `runner_name` on
`in_progress` only: Gitea looks the name up live, and the `completed` of an ephemeral runner comes
after its row is gone), except the deliveries the rig drops; the reconcilers' poller sees the fake
Gitea. A watch over the runner Jobs observes, never samples, how many of each group were alive at once.
What a simulated runner finds wrong fails the run at once, not once every job is done.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import functools
import inspect
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web

from reconciler.kube.manifests import GROUP_LABEL
from tests.e2e.watch import RunnerWatch
from tests.fake_gitea import REGISTRATION_TOKEN, FakeGitea
from tests.jobs import payload, signed
from tests.kube_cluster import KubeCluster, api_request, complete_job, runner_of
from tests.redis_server import RedisServer, free_port, wait_port

SECRET = "fault-webhook-secret"
TOKEN = "fault-gitea-token"
BIN = Path(sys.executable).parent


@dataclass
class Figures:
    """What one fault run did. `duplicates` counts runner Jobs beyond one per job: Gitea gives a queued job
    to any matching runner, so the runner named for one job may run another; what must hold is one
    runner per job in total, each running one job."""

    name: str
    jobs: int
    runners: int
    max_by_group: dict[str, int]
    cap: int
    duplicates: int
    lost: int
    seconds: float
    seed: str
    faults: list[str] = field(default_factory=list)

    def line(self) -> str:
        peak = max(self.max_by_group.values(), default=0)
        return (
            f"{self.name}: {self.jobs} jobs, {self.runners} runner Jobs, observed max per group {peak} "
            f"(cap {self.cap}, {len(self.max_by_group)} groups), {self.duplicates} duplicates, {self.lost} lost, "
            f"{self.seconds:.0f} s; faults: {'; '.join(self.faults) or 'none'}; seed {self.seed}"
        )


class Process:
    """One of our processes, run as users run it (console script, GRS_* variables), stopped by PID."""

    def __init__(self, program: str, name: str, env: dict[str, str], logdir: Path) -> None:
        self.program, self.name, self.env, self.logdir = program, name, env, logdir
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.starts = 0

    def start(self) -> None:
        """Start it (again), on a new port, and wait until it listens."""
        self.port = free_port()
        self.starts += 1
        with (self.logdir / f"{self.name}.{self.starts}.log").open("wb") as log:
            env = {**os.environ, **self.env, "GRS_LISTEN_HOST": "127.0.0.1", "GRS_LISTEN_PORT": str(self.port)}
            self.proc = subprocess.Popen([str(BIN / self.program)], env=env, stdout=log, stderr=subprocess.STDOUT)
        wait_port(self.port, timeout=30)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None and self.proc.poll() is None, f"{self.name} is not running"
        os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL: no cleanup of any kind, as when a node dies or the OOM killer strikes."""
        self.signal(signal.SIGKILL)
        assert self.proc is not None
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        """Stop it gracefully (resumed first, if paused), or kill it after 20 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)

    async def passes(self) -> int:
        """How many whole reconcile passes it has made (from its /metrics)."""
        async with aiohttp.ClientSession() as s, s.get(f"{self.url}/metrics") as r:
            text = await r.text()
        for line in text.splitlines():
            if line.startswith("grs_reconcile_pass_duration_seconds_count"):
                return int(float(line.split()[1]))
        return 0


class SlowLink:
    """A TCP proxy on loopback (in front of the API server or Redis) that holds every chunk a client
    sends for `delay` seconds: each call of a replica behind it takes that much longer, so a pass is
    in the middle of something long enough for a fault to land there. What the server sends back
    (watch events included) passes at once."""

    def __init__(self, target: tuple[str, int], delay: float) -> None:
        self.target, self.delay = target, delay
        self.server: asyncio.Server | None = None
        self.port = 0
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            for writer in self._writers:
                writer.close()
            await self.server.wait_closed()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self._writers |= {writer, up_writer}
        await asyncio.gather(
            self._pump(reader, up_writer, self.delay), self._pump(up_reader, writer, 0), return_exceptions=True
        )

    @staticmethod
    async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, delay: float) -> None:
        try:
            while chunk := await src.read(65536):
                if delay:
                    await asyncio.sleep(delay)  # the slow link itself
                dst.write(chunk)
                await dst.drain()
        finally:
            dst.close()


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Rig:
    """`groups` RunnerGroups (group gN serves repository acme/fN with at most `cap` runners), each with
    `jobs_per_group` jobs queued over `spread` seconds, webhooks lost with probability `drop`."""

    def __init__(
        self,
        kube: KubeCluster,
        redis: RedisServer,
        workdir: Path,
        *,
        groups: int = 3,
        jobs_per_group: int = 30,
        cap: int = 4,
        drop: float = 0.0,
        spread: float = 4.0,
        api_delay: float = 0.0,
        redis_delay: float = 0.0,
    ) -> None:
        self.kube, self.redis, self.dir = kube, redis, workdir
        self.groups, self.jobs_per_group, self.cap, self.drop, self.spread = groups, jobs_per_group, cap, drop, spread
        self.ns = f"faults-{uuid.uuid4().hex[:6]}"
        self.prefix = f"f{uuid.uuid4().hex[:6]}"
        self.seed = os.environ.get("GRS_FAULT_SEED", self.ns)  # set it to replay a run's random choices
        self.rng = random.Random(self.seed)
        # replicas reach the API server and Redis through a SlowLink this slow
        self.api_delay, self.redis_delay = api_delay, redis_delay
        self.redis_url = redis.url
        self.gitea = FakeGitea(token=TOKEN)
        self.replicas: dict[str, Process] = {}
        self.idle: set[str] = set()  # runners that found no queued job
        self.took: dict[str, int] = {}  # runner -> the job it took
        # job -> the runner Jobs that ran it to its end: the runners' own record, apart from Gitea's job states
        self.ran: dict[int, list[str]] = {}
        self.dropped = 0
        self.faults: list[str] = []
        self.added = asyncio.Event()  # set at every new runner Job
        self._tasks: set[asyncio.Task[None]] = set()
        self.failures: list[str] = []  # what a simulated runner's own checks found (a refused webhook...)
        self.failed = asyncio.Event()  # set at the first of them: the run stops there
        self._stack = contextlib.AsyncExitStack()

    # -- setting up ----------------------------------------------------------------------------------

    async def __aenter__(self) -> Rig:
        self.started = time.monotonic()
        self.loop = asyncio.get_running_loop()
        self.session = await self._stack.enter_async_context(aiohttp.ClientSession())
        runner = web.AppRunner(self.gitea.app())
        await runner.setup()
        self._stack.push_async_callback(runner.cleanup)
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        self.gitea_url = f"http://127.0.0.1:{port}"
        self._namespace()
        self.kubeconfig = self.kube.kubeconfig
        if self.api_delay:
            config = json.loads(self.kube.kubeconfig.read_text())
            port = await self._slow_link(self.kube.server, self.api_delay)
            config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
            self.kubeconfig = self.dir / "kubeconfig-slow"
            self.kubeconfig.write_text(json.dumps(config))
        if self.redis_delay:
            self.redis_url = f"redis://127.0.0.1:{await self._slow_link(self.redis.url, self.redis_delay)}/0"
        env = self.common_env() | {"GRS_WEBHOOK_SECRET": SECRET}
        self.receiver = Process("webhook-scaler", "receiver", env, self.dir)
        self._stack.callback(self.receiver.stop)
        self.receiver.start()
        self.watch = RunnerWatch(self.kube, self.ns, on_added=self._on_added)
        self._stack.callback(self.watch.stop)
        return self

    async def __aexit__(self, *exc: object) -> None:
        for replica in self.replicas.values():
            replica.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._stack.aclose()
        api_request(self.kube, "DELETE", f"/api/v1/namespaces/{self.ns}")

    async def _slow_link(self, to: str, delay: float) -> int:
        url = urlsplit(to)
        link = SlowLink((url.hostname or "127.0.0.1", url.port or 443), delay)
        await link.start()
        self._stack.push_async_callback(link.stop)
        return link.port

    def common_env(self) -> dict[str, str]:
        return {
            "GRS_REDIS_URL": self.redis.url,
            "GRS_REDIS_PREFIX": self.prefix,
            "GRS_LOG_FORMAT": "text",
        }

    def _namespace(self) -> None:
        assert api_request(self.kube, "POST", "/api/v1/namespaces", {"metadata": {"name": self.ns}})[0] == 201
        data = {k: base64.b64encode(v.encode()).decode() for k, v in {"reg": REGISTRATION_TOKEN, "api": TOKEN}.items()}
        secret = {"metadata": {"name": "gitea"}, "data": data}
        assert api_request(self.kube, "POST", f"/api/v1/namespaces/{self.ns}/secrets", secret)[0] == 201
        for i in range(self.groups):
            spec = {
                "scope": "repo",
                "repo": self.repo(i),
                "gitea": {"url": self.gitea_url},
                "labels": [],
                "defaultLabels": [],
                "maxActiveRunners": self.cap,
                "authToken": {"secretRef": {"name": "gitea", "key": "api"}},
            }
            body = {"apiVersion": "gitea.bpg.pw/v1alpha1", "kind": "RunnerGroup", "metadata": {"name": f"g{i}"}}
            path = f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{self.ns}/runnergroups"
            status, answer = api_request(self.kube, "POST", path, body | {"spec": spec})
            assert status == 201, answer

    @staticmethod
    def repo(group: int) -> str:
        return f"acme/f{group}"

    def replica(self, name: str) -> Process:
        """Start a reconciler replica (polling the fake Gitea every 2 s)."""
        env = self.common_env() | {
            "GRS_KUBECONFIG": str(self.kubeconfig),
            "GRS_REDIS_URL": self.redis_url,
            "GRS_WATCH_NAMESPACE": self.ns,
            "GRS_GITEA_URL": self.gitea_url,  # the default instance: the admin's choice
            "GRS_REPLICA_ID": name,
            "GRS_POLL_INTERVAL": "2",
            "GRS_RESYNC_INTERVAL": "2",
        }
        replica = Process("reconciler", name, env, self.dir)
        replica.start()
        self.replicas[name] = replica
        return replica

    # -- Gitea's side ----------------------------------------------------------------------------------

    async def serve(
        self, name: str, fault: Callable[[], Awaitable[object]], *, report: Callable[[str], None], timeout: float = 240
    ) -> None:
        """Run the burst with `fault` injected meanwhile; wait until every job completed (or `timeout`); count,
        report the figures, and check them. A simulated runner's failure ends the run when it happens."""
        work = asyncio.create_task(self._served(fault, timeout=timeout))
        failed = asyncio.create_task(self.failed.wait())
        await asyncio.wait({work, failed}, return_when=asyncio.FIRST_COMPLETED)
        for task in (work, failed):
            task.cancel()
        await asyncio.gather(work, failed, return_exceptions=True)
        assert not self.failures, f"a simulated runner failed: {self.failures}; logs in {self.dir}"
        work.result()  # what went wrong in the burst or the fault
        figures = await self.tally(name)
        report(figures.line())
        self.check(figures)

    async def _served(self, fault: Callable[[], Awaitable[object]], *, timeout: float) -> None:
        burst = asyncio.create_task(self.burst())
        try:
            await fault()
            await burst
        finally:
            burst.cancel()
        await self.all_done(timeout=timeout)

    @staticmethod
    async def no_fault() -> None:
        """No fault beyond the rig's own (e.g. the webhooks it drops)."""

    async def burst(self) -> None:
        """Queue every job, spread over `spread` seconds, each told by a webhook unless it is dropped."""
        total = self.groups * self.jobs_per_group
        for n in range(total):
            job_id, group = 1000 + n, n % self.groups
            self.gitea.add_job(job_id, repo=self.repo(group), labels=[])
            await self._deliver("queued", job_id)
            await asyncio.sleep(self.spread / total)  # the pace jobs arrive at

    async def _deliver(self, status: str, job_id: int) -> None:
        if self.rng.random() < self.drop:
            self.dropped += 1
            return
        job = self.gitea.jobs[job_id]
        body = payload(status, job_id=job_id, attempt=job["run_attempt"], labels=[], repo=self.gitea.repo_of(job))
        for key in ("runner_id", "runner_name"):  # as Gitea has them now (the template's are another runner's)
            if job.get(key):
                body["workflow_job"][key] = job[key]
            else:
                body["workflow_job"].pop(key, None)
        raw, headers = signed(body, secret=SECRET)
        async with self.session.post(f"{self.receiver.url}/webhook", data=raw, headers=headers) as resp:
            assert resp.status < 300, f"the receiver answered {resp.status}: {await resp.text()}"

    # -- the runners ----------------------------------------------------------------------------------

    def _on_added(self, job: dict[str, Any]) -> None:  # in the watch's thread
        self.loop.call_soon_threadsafe(self._spawn, job)

    def _spawn(self, job: dict[str, Any]) -> None:
        self.added.set()
        name = job["metadata"]["name"]
        task = asyncio.create_task(
            self._runner(name, runner_of(job), job["metadata"]["labels"][GROUP_LABEL]), name=name
        )
        self._tasks.add(task)
        task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task[None]) -> None:
        """A simulated runner ended: what went wrong in it fails the test (it is never awaited)."""
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.failures.append(f"{task.get_name()}: {task.exception()!r}")
            self.failed.set()

    async def _runner(self, name: str, runner: str, group: str) -> None:
        """A runner: Job `name`, called `runner` in Gitea."""
        await asyncio.sleep(self.rng.uniform(0.1, 0.6))  # the Pod starts and the runner comes online
        rows = [r for r in self.gitea.runners.values() if r["name"] == runner]
        assert len(rows) == 1, f"Gitea holds {len(rows)} rows named {runner}: the controller registers each runner once"
        row = rows[0]
        row["status"] = "online"
        repo = self.repo(int(group.removeprefix("g")))
        queued = [j for j in self.gitea.jobs.values() if j["status"] == "queued" and self.gitea.repo_of(j) == repo]
        if not queued:
            self.idle.add(name)
            return
        job = min(queued, key=lambda j: j["id"])
        self.took[name] = job["id"]
        row["busy"] = True
        job.update(status="in_progress", run_attempt=1, runner_id=row["id"], runner_name=runner, started_at=_now())
        await self._deliver("in_progress", job["id"])
        await asyncio.sleep(self.rng.uniform(0.3, 1.5))  # the job's steps
        job.update(status="completed", conclusion="success", completed_at=_now())
        # recorded with Gitea's completion, which `all_done` waits for: not after the Job's, which it does not
        self.ran.setdefault(job["id"], []).append(name)
        if row["ephemeral"]:  # Gitea deletes the row in the UpdateTask that finishes the job: no name to look up
            self.gitea.runners.pop(row["id"], None)
            job.pop("runner_name", None)
        await self._deliver("completed", job["id"])
        await asyncio.to_thread(complete_job, self.kube, self.ns, name)  # act_runner exited 0

    # -- waiting and the tally -------------------------------------------------------------------------

    async def runner_jobs_seen(self, count: int) -> None:
        """Until the watch has seen `count` runner Jobs."""
        while len(self.watch.seen) < count:
            self.added.clear()
            if len(self.watch.seen) >= count:
                break
            await asyncio.wait_for(self.added.wait(), timeout=300)

    async def all_done(self, *, timeout: float) -> None:
        """Until every job completed in Gitea, or `timeout` (the tally counts what was lost); then until each
        running replica made two more passes, so a late create would have happened."""
        with contextlib.suppress(AssertionError):
            await until(
                lambda: all(j["status"] == "completed" for j in self.gitea.jobs.values()), timeout=timeout, what=str
            )
        live = [r for r in self.replicas.values() if r.proc is not None and r.proc.poll() is None]
        before = {r.name: await r.passes() for r in live}
        for replica in live:
            check = functools.partial(_passed, replica, before[replica.name] + 2)
            await until(check, timeout=30, what=lambda: "two more passes of each replica")

    def _lost(self) -> list[int]:
        """The jobs no runner ran to its end, by the runners' own record (not Gitea's job states)."""
        return sorted(i for i in self.gitea.jobs if i not in self.ran)

    async def tally(self, name: str) -> Figures:
        """Stop the replicas, let the watch catch up with the API server, and count."""
        for replica in self.replicas.values():
            replica.stop()
        _, listing = api_request(self.kube, "GET", f"/apis/batch/v1/namespaces/{self.ns}/jobs")
        listed = {j["metadata"]["uid"] for j in listing["items"]}
        await until(lambda: listed <= self.watch.seen, timeout=30, what=lambda: "the watch saw every runner Job")
        jobs = len(self.gitea.jobs)
        runners = len(self.watch.seen)  # by uid: one deleted and made again under its name counts twice
        return Figures(
            name=name,
            jobs=jobs,
            runners=runners,
            max_by_group=dict(self.watch.max_by_group),
            cap=self.cap,
            duplicates=runners - jobs,
            lost=len(self._lost()),
            seconds=time.monotonic() - self.started,
            seed=self.seed,
            faults=[*self.faults, f"{self.dropped} webhooks dropped"] if self.drop else self.faults,
        )

    def check(self, figures: Figures) -> None:
        """Every job got exactly one runner, no group ever had more than its cap alive, nothing lost, and
        every simulated runner did what it meant to (its webhooks accepted, its Job completed)."""
        assert not self.failures, self.failures
        assert figures.lost == 0, f"{figures.line()}; no runner ran jobs {self._lost()}; logs in {self.dir}"
        twice = {i: names for i, names in self.ran.items() if len(names) > 1}
        assert not twice, f"jobs run by more than one runner: {twice}"
        assert figures.duplicates == 0, (
            f"{figures.line()}; runner -> job it took: {self.took}; runners that took none: {sorted(self.idle)}; "
            f"logs in {self.dir}"
        )
        assert not self.idle, f"runners that found no job: {sorted(self.idle)}"  # so each ran exactly one
        assert len(figures.max_by_group) == self.groups, figures.max_by_group
        assert max(figures.max_by_group.values()) <= self.cap, figures.line()
        assert self.watch.gaps == 0, "the watch missed changes: a peak between them could have been missed"


async def until(check: Callable[[], Any], *, timeout: float, what: Callable[[], str]) -> None:
    """Poll `check` (a function, or one returning an awaitable) until it is truthy, or fail saying `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"not within {timeout:.0f} s: {what()}")


async def _passed(replica: Process, passes: int) -> bool:
    return await replica.passes() >= passes
