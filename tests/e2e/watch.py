"""Watches a namespace's runner Jobs and their Pods through the API server's watch streams, to observe,
not sample, how many runners were alive at once. TEST HARNESS ONLY.

A runner is alive from its Job's creation until the Job finishes, is deleted, or its Pod terminates
(act_runner exited; the Job's own Complete condition follows a moment later). What a test claims
"never" happened (a runner deleted mid-job, its Pod replaced or restarted) is read from what the watch
saw over the whole run, not from the objects left at its end.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from reconciler.kube.manifests import GROUP_LABEL
from tests.kube_cluster import ADMIN_TOKEN, KubeCluster, api_request, tls_context

Handler = Callable[[str, dict[str, Any]], None]


def finished(job: dict[str, Any]) -> bool:
    """Whether a Job has its Complete or Failed condition."""
    conds = (job.get("status") or {}).get("conditions") or []
    return any(c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in conds)


class _Stream:
    """One resource's list, then its watch from that version, each event handed to `handle`, in a thread.

    When the version expired (410 Gone: etcd compacted it) it lists again. `gaps` counts the lists
    that showed a change the watch never delivered (an object newer than the last event seen, or
    one gone): only those may have hidden a moment in between. The objects that vanished meanwhile
    are handed on as DELETED.
    """

    def __init__(self, cluster: KubeCluster, path: str, handle: Handler, stop: threading.Event) -> None:
        self.cluster, self.path, self.handle, self.stop = cluster, path, handle, stop
        self.gaps = 0
        self.broken = 0  # watch lines that were no JSON: the watch was taken up again from its version
        self.version: str | None = None
        self.known: dict[str, dict[str, Any]] = {}  # name -> the latest object seen
        self.conn: http.client.HTTPSConnection | None = None
        self._list()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _list(self) -> None:
        _, listing = api_request(self.cluster, "GET", self.path)
        listed = {item["metadata"]["name"]: item for item in listing["items"]}
        # etcd's resourceVersions are revisions, so a test may compare them (clients must not)
        newer = [
            i for i in listed.values() if self.version and int(i["metadata"]["resourceVersion"]) > int(self.version)
        ]
        vanished = [obj for name, obj in self.known.items() if name not in listed]
        if newer or vanished:
            self.gaps += 1
        for obj in vanished:
            self._event("DELETED", obj)
        for item in listed.values():
            self._event("ADDED", item)
        self.version = listing["metadata"]["resourceVersion"]

    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self.known.pop(name, None)
        else:
            self.known[name] = obj
        self.handle(kind, obj)

    def _run(self) -> None:
        url = urlsplit(self.cluster.server)
        ctx = tls_context(self.cluster)
        while not self.stop.is_set():
            # A long read timeout: a watch left and taken up again from its version may find that version
            # compacted (410), and the list after it may show changes the watch missed. `close` ends a
            # blocked read when the watch stops.
            conn = self.conn = http.client.HTTPSConnection(url.hostname or "", url.port, context=ctx, timeout=60)
            try:
                conn.request(
                    "GET",
                    f"{self.path}?watch=true&allowWatchBookmarks=true&resourceVersion={self.version}",
                    headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                )
                resp = conn.getresponse()
                while not self.stop.is_set() and (line := resp.readline()):
                    try:
                        event = json.loads(line)
                    except ValueError:  # a line the stream mangled (seen once under load): watch again from
                        self.broken += 1  # the last version read, so the event it carried comes again
                        break
                    if event["type"] == "ERROR":  # 410 Gone: the version expired; start again from a list
                        self._list()
                        break
                    self.version = event["object"]["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        self._event(event["type"], event["object"])
            except TimeoutError:
                continue  # no event for a minute: watch again from the last version
            except OSError:
                if not self.stop.is_set():
                    raise
            finally:
                conn.close()

    def close(self) -> None:
        """Unblock the watch's read (call after setting `stop`)."""
        sock = self.conn.sock if self.conn is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class RunnerWatch:
    """Every change to the runner Jobs and Pods of one namespace, and the most runners alive at once."""

    def __init__(
        self, cluster: KubeCluster, namespace: str, *, on_added: Callable[[dict[str, Any]], None] | None = None
    ) -> None:
        # By the Job's uid: a Job deleted and made again under its name is another runner.
        self.jobs: dict[str, bool] = {}  # uid -> alive
        self.names: dict[str, str] = {}  # uid -> its name
        self.uid_of: dict[str, str] = {}  # name -> the uid of the latest Job of that name
        self.group_of: dict[str, str] = {}  # uid -> its RunnerGroup
        self.max_by_group: dict[str, int] = {}  # the most runners of one group alive at once
        self.on_added = on_added  # called (in the watch's thread) once per new runner Job
        self.pods_done: set[str] = set()  # uids of the Jobs whose Pod terminated
        # When this watch first saw each runner Job, and its Pod running (wall clock, ms); and the
        # Gitea job each runner Job was started for. By name: the node benchmark's timings.
        self.added_ms: dict[str, int] = {}
        self.running_ms: dict[str, int] = {}
        # The steps of each runner's Pod in between, as first seen (the node benchmark splits a burst by
        # them): the Pod listed, bound to the node, its last init container (prepare; register before the
        # controller registered runners) started and exited, and its Pod terminated.
        self.pod_added_ms: dict[str, int] = {}
        self.scheduled_ms: dict[str, int] = {}
        self.init_started_ms: dict[str, int] = {}
        self.registered_ms: dict[str, int] = {}
        self.done_ms: dict[str, int] = {}
        self.for_job: dict[str, int] = {}
        # Runner Jobs (by name) deleted before they finished and before their Pod terminated: cut mid-run.
        self.deleted_alive: set[str] = set()
        # The Pods (uids) seen for each runner Job (by name), and the most restarts each Pod's containers had.
        self.pods_of: dict[str, set[str]] = {}
        self.restarts: dict[str, int] = {}
        self.max_alive = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._streams = [
            _Stream(cluster, f"/apis/batch/v1/namespaces/{namespace}/jobs", self._job, self._stop),
            _Stream(cluster, f"/api/v1/namespaces/{namespace}/pods", self._pod, self._stop),
        ]

    @property
    def alive(self) -> set[str]:
        """The runners alive now (their Jobs' names)."""
        with self._lock:
            return {self.names[uid] for uid, up in self.jobs.items() if up and uid not in self.pods_done}

    @property
    def gaps(self) -> int:
        """How often a watch started again from a list that showed changes it had not delivered (a moment
        between may have been missed)."""
        return sum(stream.gaps for stream in self._streams)

    @property
    def seen(self) -> set[str]:
        """Every runner Job seen (by uid)."""
        with self._lock:
            return set(self.jobs)

    def of_groups(self) -> dict[str, str]:
        """Every Job seen that a RunnerGroup made (uid -> name), not the namespace's others (a chart's hooks)."""
        with self._lock:
            return {uid: self.names[uid] for uid, group in self.group_of.items() if group}

    def __enter__(self) -> RunnerWatch:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None:
            self.stop()
        else:  # the test's own failure comes first
            with contextlib.suppress(AssertionError):
                self.stop()

    def _count(self) -> None:
        alive = [uid for uid, up in self.jobs.items() if up and uid not in self.pods_done]
        self.max_alive = max(self.max_alive, len(alive))
        per_group = Counter(self.group_of.get(uid, "") for uid in alive)
        for group, count in per_group.items():
            self.max_by_group[group] = max(self.max_by_group.get(group, 0), count)

    def _job(self, kind: str, job: dict[str, Any]) -> None:
        meta = job["metadata"]
        uid = meta["uid"]
        new = uid not in self.jobs
        with self._lock:
            if kind == "DELETED" and self.jobs.get(uid) and uid not in self.pods_done:
                self.deleted_alive.add(meta["name"])
            self.jobs[uid] = kind != "DELETED" and not finished(job)
            self.names[uid] = meta["name"]
            if kind != "DELETED":
                self.uid_of[meta["name"]] = uid
            self.group_of[uid] = (meta.get("labels") or {}).get(GROUP_LABEL, "")
            self.added_ms.setdefault(meta["name"], int(time.time() * 1000))
            for_job = (meta.get("annotations") or {}).get("gitea.bpg.pw/job-id")
            if for_job:
                self.for_job[meta["name"]] = int(for_job)
            self._count()
        if new and self.on_added is not None:
            self.on_added(job)

    def _pod(self, kind: str, pod: dict[str, Any]) -> None:
        labels = pod["metadata"].get("labels") or {}
        owner = labels.get("job-name")
        if not owner:
            return
        owner_uid = labels.get("batch.kubernetes.io/controller-uid") or self.uid_of.get(owner, owner)
        now = int(time.time() * 1000)
        status = pod.get("status") or {}
        inits = [s.get("state") or {} for s in status.get("initContainerStatuses") or []]
        restarts = [c.get("restartCount", 0) for c in status.get("containerStatuses") or []]
        with self._lock:
            self.pods_of.setdefault(owner, set()).add(pod["metadata"]["uid"])
            self.restarts[pod["metadata"]["uid"]] = max([self.restarts.get(pod["metadata"]["uid"], 0), *restarts])
            self.pod_added_ms.setdefault(owner, now)
            if (pod.get("spec") or {}).get("nodeName"):
                self.scheduled_ms.setdefault(owner, now)
            if inits and ("running" in inits[-1] or "terminated" in inits[-1]):
                self.init_started_ms.setdefault(owner, now)
            if inits and "terminated" in inits[-1]:
                self.registered_ms.setdefault(owner, now)
            if status.get("phase") == "Running":
                self.running_ms.setdefault(owner, now)
            if kind == "DELETED" or status.get("phase") in ("Succeeded", "Failed"):
                self.done_ms.setdefault(owner, now)
                self.pods_done.add(owner_uid)
                self._count()

    def stop(self) -> None:
        """Stop watching; fail if a stream had stopped before (what it claims after that would be blind)."""
        if self._stop.is_set():
            return
        dead = [stream.path for stream in self._streams if not stream.thread.is_alive()]
        self._stop.set()
        for stream in self._streams:
            stream.close()
            stream.thread.join(timeout=10)
        assert not dead, f"the watch of {dead} died before it was stopped: what it saw after that is missing"


def ready(pod: dict[str, Any]) -> bool:
    """Whether a Pod has its Ready condition."""
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)


class PodTimeline:
    """When each Pod of a namespace was first seen, first seen Ready, and first seen on its way out (its
    deletion begun, or gone), by `time.monotonic()`: the moments of a roll, to set what happened meanwhile
    against."""

    def __init__(self, cluster: KubeCluster, namespace: str) -> None:
        self.seen_at: dict[str, float] = {}  # Pod name -> when
        self.ready_at: dict[str, float] = {}
        self.going_at: dict[str, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stream = _Stream(cluster, f"/api/v1/namespaces/{namespace}/pods", self._pod, self._stop)

    def _pod(self, kind: str, pod: dict[str, Any]) -> None:
        now, name = time.monotonic(), pod["metadata"]["name"]
        with self._lock:
            self.seen_at.setdefault(name, now)
            if ready(pod) and kind != "DELETED":
                self.ready_at.setdefault(name, now)
            if kind == "DELETED" or pod["metadata"].get("deletionTimestamp"):
                self.going_at.setdefault(name, now)

    def roll(self, old: set[str], new: set[str]) -> tuple[float, float]:
        """When a roll from the `old` Pods to the `new` began (the first new one seen or old one going, if
        sooner) and ended (the last new one Ready or old one going, if later)."""
        with self._lock:
            for names, moments, what in ((old, self.going_at, "going"), (new, self.ready_at, "Ready")):
                assert names <= set(moments), f"never seen {what}: {sorted(names - set(moments))}"
            began = min(min(self.seen_at[n] for n in new), min(self.going_at[n] for n in old))
            ended = max(max(self.ready_at[n] for n in new), max(self.going_at[n] for n in old))
        return began, ended

    def __enter__(self) -> PodTimeline:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        dead = not self._stream.thread.is_alive()
        self._stop.set()
        self._stream.close()
        self._stream.thread.join(timeout=10)
        assert kind is not None or not dead, "the Pod watch died before it was stopped: it missed what came after"
