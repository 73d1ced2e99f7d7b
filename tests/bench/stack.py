"""The real peers the benchmarks measure against, on loopback: redis-server, kube-apiserver + etcd, and
our two processes run as users run them (console scripts, GRS_* variables)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import os
import platform
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp

from reconciler.kube.crd import crd
from tests.fake_gitea import REGISTRATION_TOKEN, FakeGitea, served
from tests.jobs import gitea_time
from tests.kube_cluster import KubeCluster, api_request, apply_crd
from tests.redis_server import RedisServer, free_port, stop_process, wait_port

SECRET = "bench-webhook-secret"
NS = "bench"
_TEMPLATE = Path(__file__).resolve().parents[1] / "data" / "gitea" / "webhooks" / "01-queued.json"


class SpecDrift(RuntimeError):
    """A fake Gitea answered outside Gitea's spec during a benchmark: its figures are not Gitea's."""


def checked(fake: FakeGitea) -> None:
    """Raise SpecDrift if `fake` recorded any answer outside Gitea's spec (`FakeGitea.errors`)."""
    if fake.errors:
        said = "\n".join(fake.errors[:5])
        raise SpecDrift(f"the fake Gitea answered outside Gitea's spec {len(fake.errors)} times:\n{said}")


def machine() -> str:
    """One line about the machine the figures come from."""
    cpu = "unknown cpu"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"{os.cpu_count()} cores, {cpu}, Python {platform.python_version()}, {platform.system()}"


class Deliveries:
    """Signed `workflow_job` deliveries of Gitea's shape (4.5 KB each), distinct job and delivery ids."""

    def __init__(self) -> None:
        self.body = json.loads(_TEMPLATE.read_text())

    def make(
        self, job_id: int, *, repo: str = "acme/widgets", labels: tuple[str, ...] = ()
    ) -> tuple[bytes, dict[str, str]]:
        body = self.body
        body["workflow_job"]["id"] = job_id
        owner, name = repo.split("/")
        body["workflow_job"]["url"] = f"https://gitea.example.com/api/v1/repos/{repo}/actions/jobs/{job_id}"
        body["workflow_job"]["labels"] = list(labels)
        # created now, as Gitea would send it (an older job's `queued` is taken for a replay)
        body["workflow_job"]["created_at"] = gitea_time(time.time())
        body["repository"]["full_name"] = repo
        body["repository"]["name"] = name
        body["repository"]["owner"]["login"] = owner
        raw = json.dumps(body, indent=2).encode()
        sig = hmac.new(SECRET.encode(), raw, hashlib.sha256).hexdigest()
        return raw, {
            "Content-Type": "application/json",
            "X-Gitea-Event": "workflow_job",
            "X-Gitea-Delivery": str(uuid.uuid4()),
            "X-Gitea-Signature": sig,
        }


class Proc:
    """One of our processes."""

    def __init__(self, name: str, env: dict[str, str], logdir: Path) -> None:
        self.name = name
        self.log = (logdir / f"{name}.log").open("wb")
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).parent / name)],
            env={**os.environ, **env},
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def cpu_seconds(self) -> float:
        """User + system CPU time so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def peak_rss_mb(self) -> float:
        """Peak resident memory (VmHWM)."""
        return self._status_mb("VmHWM")

    def rss_mb(self) -> float:
        """Resident memory now (VmRSS)."""
        return self._status_mb("VmRSS")

    def _status_mb(self, field: str) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        stop_process(self.proc, self.log, timeout=20)


class Stack:
    """Redis, optionally a control plane, and our processes, in one folder."""

    def __init__(self, workdir: Path, *, kube: bool) -> None:
        self.dir = workdir
        self.redis = RedisServer(workdir / "redis-data")
        (workdir / "redis-data").mkdir(parents=True, exist_ok=True)
        self.kube = KubeCluster(workdir / "kube") if kube else None
        self.procs: list[Proc] = []
        self.prefix = f"b{uuid.uuid4().hex[:6]}"
        self.gitea_url = "http://127.0.0.1:9"  # nothing: without a control plane nothing registers runners
        self.gitea: FakeGitea | None = None  # the Gitea runners register with (a control plane's)
        self._exits = contextlib.ExitStack()

    def __enter__(self) -> Stack:
        self.redis.start()
        if self.kube:
            (self.dir / "kube").mkdir(parents=True, exist_ok=True)
            self.kube.start()
            apply_crd(self.kube, crd())
            assert api_request(self.kube, "POST", "/api/v1/namespaces", {"metadata": {"name": NS}})[0] == 201
            # The controller registers every runner: with a fake Gitea's `Register`, as it would with Gitea's.
            self.gitea = FakeGitea(token="tok")
            self.gitea_url = self._exits.enter_context(served(self.gitea))
            data = {
                "reg": base64.b64encode(REGISTRATION_TOKEN.encode()).decode(),
                "api": base64.b64encode(b"tok").decode(),
            }
            secret = {"metadata": {"name": "gitea"}, "data": data}
            assert api_request(self.kube, "POST", f"/api/v1/namespaces/{NS}/secrets", secret)[0] == 201
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self.procs:
            p.stop()
        if self.kube:
            self.kube.stop()
        self._exits.close()
        self.redis.stop()
        if self.gitea is not None:
            checked(self.gitea)  # loud, after the stack is down: a drifted fake fails the run

    def common_env(self) -> dict[str, str]:
        return {"GRS_REDIS_URL": self.redis.url, "GRS_REDIS_PREFIX": self.prefix, "GRS_LOG_LEVEL": "WARNING"}

    def receiver(self, **extra: str) -> tuple[Proc, str]:
        port = free_port()
        env = {
            **self.common_env(),
            "GRS_WEBHOOK_SECRET": SECRET,
            "GRS_LISTEN_HOST": "127.0.0.1",
            "GRS_LISTEN_PORT": str(port),
            **extra,
        }
        proc = Proc("webhook-scaler", env, self.dir)
        self.procs.append(proc)
        wait_port(port, timeout=30)
        return proc, f"http://127.0.0.1:{port}/webhook"

    def reconciler(self, **env: str) -> tuple[Proc, str]:
        assert self.kube is not None
        port = free_port()
        full = {
            **self.common_env(),
            "GRS_KUBECONFIG": str(self.kube.kubeconfig),
            "GRS_WATCH_NAMESPACE": NS,
            "GRS_GITEA_URL": self.gitea_url,  # the default instance: the admin's choice
            "GRS_LISTEN_HOST": "127.0.0.1",
            "GRS_LISTEN_PORT": str(port),
            "GRS_POLL_ENABLED": "false",
            **env,
        }
        proc = Proc("reconciler", full, self.dir)
        self.procs.append(proc)
        wait_port(port, timeout=30)
        return proc, f"http://127.0.0.1:{port}"

    def groups(
        self, count: int, *, first: int = 0, each: Callable[[int], dict[str, Any]] | None = None, **spec: Any
    ) -> None:
        """Create RunnerGroups g{first}..g{first+count-1}; by default group i serves repository acme/r{i}.

        `spec` changes every group's spec, `each(i)` group i's; a None value removes a field.
        """
        assert self.kube is not None
        for i in range(first, first + count):
            fields: dict[str, Any] = {
                "scope": "repo",
                "repo": f"acme/r{i}",
                "gitea": {"url": self.gitea_url},
                "labels": [],
                "defaultLabels": [],
                "maxActiveRunners": 100,
                "authToken": {"secretRef": {"name": "gitea", "key": "api"}},
            }
            fields |= spec | (each(i) if each else {})
            body = {
                "apiVersion": "gitea.bpg.pw/v1alpha1",
                "kind": "RunnerGroup",
                "metadata": {"name": f"g{i}"},
                "spec": {k: v for k, v in fields.items() if v is not None},
            }
            status, answer = api_request(
                self.kube, "POST", f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{NS}/runnergroups", body
            )
            assert status == 201, answer


async def metric(url: str, name: str) -> dict[str, float]:
    """The samples of one metric family from a /metrics endpoint, by their full name."""
    async with aiohttp.ClientSession() as s, s.get(f"{url}/metrics") as r:
        text = await r.text()
    return {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line.startswith(name) and not line.startswith("#")
    }


class JobWatch:
    """Watches runner Jobs in the bench namespace and notes when each Gitea job id's Job appeared."""

    def __init__(self, kube: KubeCluster) -> None:
        self.kube = kube
        self.seen: dict[int, float] = {}
        self.names: dict[int, list[str]] = {}
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        from tests.kube_cluster import ADMIN_TOKEN

        ssl_ctx = False
        url = f"{self.kube.server}/apis/batch/v1/namespaces/{NS}/jobs?watch=1&allowWatchBookmarks=false"
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        timeout = aiohttp.ClientTimeout(total=None, sock_read=None)
        async with aiohttp.ClientSession(timeout=timeout) as s, s.get(url, headers=headers, ssl=ssl_ctx) as r:
            async for line in r.content:
                event = json.loads(line)
                if event["type"] != "ADDED":
                    continue
                meta = event["object"]["metadata"]
                job_id = int((meta.get("annotations") or {}).get("gitea.bpg.pw/job-id", 0))
                self.seen.setdefault(job_id, time.perf_counter())
                self.names.setdefault(job_id, []).append(meta["name"])

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


@contextlib.contextmanager
def workdir() -> Iterator[Path]:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="grs-bench-") as d:
        yield Path(d)
