"""Watches a namespace's runner Jobs and their Pods through the API server's watch streams, to observe,
not sample, how many runners were alive at once. TEST HARNESS ONLY.

A runner is alive from its Job's creation until the Job finishes, is deleted, or its Pod terminates
(act_runner exited; the Job's own Complete condition follows a moment later).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from tests.kube_cluster import ADMIN_TOKEN, KubeCluster, api_request, tls_context

Handler = Callable[[str, dict[str, Any]], None]


def finished(job: dict[str, Any]) -> bool:
    """Whether a Job has its Complete or Failed condition."""
    conds = (job.get("status") or {}).get("conditions") or []
    return any(c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in conds)


class _Stream:
    """One resource's list, then its watch from that version, each event handed to `handle`, in a thread."""

    def __init__(self, cluster: KubeCluster, path: str, handle: Handler, stop: threading.Event) -> None:
        self.cluster, self.path, self.handle, self.stop = cluster, path, handle, stop
        self.relists = 0
        self._list()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _list(self) -> None:
        _, listing = api_request(self.cluster, "GET", self.path)
        for item in listing["items"]:
            self.handle("ADDED", item)
        self.version = listing["metadata"]["resourceVersion"]

    def _run(self) -> None:
        url = urlsplit(self.cluster.server)
        ctx = tls_context(self.cluster)
        while not self.stop.is_set():
            conn = http.client.HTTPSConnection(url.hostname or "", url.port, context=ctx, timeout=2)
            try:
                conn.request(
                    "GET",
                    f"{self.path}?watch=true&allowWatchBookmarks=true&resourceVersion={self.version}",
                    headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                )
                resp = conn.getresponse()
                while not self.stop.is_set() and (line := resp.readline()):
                    event = json.loads(line)
                    if event["type"] == "ERROR":  # 410 Gone: the version expired; start again from a list
                        self.relists += 1
                        self._list()
                        break
                    self.version = event["object"]["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        self.handle(event["type"], event["object"])
            except TimeoutError:
                continue  # no event for a while: watch again from the last version
            finally:
                conn.close()


class RunnerWatch:
    """Every change to the runner Jobs and Pods of one namespace, and the most runners alive at once."""

    def __init__(self, cluster: KubeCluster, namespace: str) -> None:
        self.jobs: dict[str, bool] = {}  # name -> alive
        self.pods_done: set[str] = set()  # Jobs whose Pod terminated
        # When this watch first saw each runner Job, and its Pod running (wall clock, ms); and the
        # Gitea job each runner Job was started for.
        self.added_ms: dict[str, int] = {}
        self.running_ms: dict[str, int] = {}
        self.for_job: dict[str, int] = {}
        self.max_alive = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._streams = [
            _Stream(cluster, f"/apis/batch/v1/namespaces/{namespace}/jobs", self._job, self._stop),
            _Stream(cluster, f"/api/v1/namespaces/{namespace}/pods", self._pod, self._stop),
        ]

    @property
    def alive(self) -> set[str]:
        """The runners alive now."""
        with self._lock:
            return {name for name, up in self.jobs.items() if up and name not in self.pods_done}

    @property
    def relists(self) -> int:
        """How often a watch had to start again from a list (events between may have been missed)."""
        return sum(stream.relists for stream in self._streams)

    @property
    def seen(self) -> set[str]:
        """Every runner Job seen."""
        with self._lock:
            return set(self.jobs)

    def _count(self) -> None:
        alive = sum(1 for name, up in self.jobs.items() if up and name not in self.pods_done)
        self.max_alive = max(self.max_alive, alive)

    def _job(self, kind: str, job: dict[str, Any]) -> None:
        meta = job["metadata"]
        with self._lock:
            self.jobs[meta["name"]] = kind != "DELETED" and not finished(job)
            self.added_ms.setdefault(meta["name"], int(time.time() * 1000))
            for_job = (meta.get("annotations") or {}).get("gitea.bpg.pw/job-id")
            if for_job:
                self.for_job[meta["name"]] = int(for_job)
            self._count()

    def _pod(self, kind: str, pod: dict[str, Any]) -> None:
        owner = (pod["metadata"].get("labels") or {}).get("job-name")
        if owner and (pod.get("status") or {}).get("phase") == "Running":
            with self._lock:
                self.running_ms.setdefault(owner, int(time.time() * 1000))
        if owner and (kind == "DELETED" or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")):
            with self._lock:
                self.pods_done.add(owner)
                self._count()

    def stop(self) -> None:
        """Stop watching."""
        self._stop.set()
        for stream in self._streams:
            stream.thread.join(timeout=10)
