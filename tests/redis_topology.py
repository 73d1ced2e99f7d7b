"""Real multi-process Redis topologies on loopback for tests: a 3-master Redis Cluster, and one master
with one replica watched by three Sentinels (quorum 2, a failover in a few seconds).

Owns: starting them, each process in its own temporary folder, waiting until they are usable, and
stopping every process by its PID (a paused one is resumed first so that SIGTERM reaches it).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import redis

from tests.redis_server import die_with_parent, free_port, wait_port

SERVICE = "mymaster"


def _binary() -> str:
    found = shutil.which("redis-server")
    if found is None:
        raise RuntimeError("redis-server not found: run tests/setup.sh, or apt-get install redis-server")
    return found


def cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free and valid too."""
    while True:
        port = free_port()
        if port + 10000 > 65535:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


def wait_until(check: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Poll `check` (errors count as not yet) until it holds; TimeoutError naming `what` if it never does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (redis.RedisError, OSError):
            pass
        time.sleep(0.05)
    raise TimeoutError(f"{what} after {timeout}s")


def _cluster_ok(client: redis.Redis) -> bool:
    return bool(client.cluster("INFO")["cluster_state"] == "ok")


class Processes:
    """redis-server processes, one folder each under `workdir`, stopped by PID."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.binary = _binary()
        self.procs: dict[int, subprocess.Popen[bytes]] = {}  # by port

    def start(self, port: int, *args: str, sentinel: bool = False) -> None:
        """Start one redis-server (a Sentinel with `sentinel`) on 127.0.0.1:port; wait for its port."""
        folder = self.workdir / str(port)
        folder.mkdir()
        conf = folder / "redis.conf"  # a Sentinel rewrites its config file, so each has its own
        conf.write_text("\n".join(args) + "\n")
        common = ["--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder), "--save", ""]
        common += ["--daemonize", "no", "--logfile", str(folder / "redis.log")]
        self.procs[port] = subprocess.Popen(
            [self.binary, str(conf), *(["--sentinel"] if sentinel else []), *common],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        wait_port(port)

    def pause(self, port: int) -> None:
        """SIGSTOP the server on `port`: it hangs, as a stuck or partitioned master does."""
        os.kill(self.procs[port].pid, signal.SIGSTOP)

    def stop(self) -> None:
        """Stop every process by its PID (resumed first if paused), then remove the folders."""
        for proc in self.procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGCONT)
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self.procs.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)


class ClusterServers:
    """Three cluster-enabled masters sharing the 16384 slots, no replicas."""

    def __init__(self, workdir: Path) -> None:
        self.processes = Processes(workdir)
        self.ports = [cluster_port() for _ in range(3)]

    @property
    def url(self) -> str:
        """A `redis+cluster://` URL naming two of the three nodes (the client discovers the third)."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports[:2])

    def start(self) -> None:
        """Start the nodes, give each a third of the slots, join them, wait for `cluster_state:ok`."""
        for port in self.ports:
            self.processes.start(port, "cluster-enabled yes", "cluster-node-timeout 2000", "appendonly no")
        clients = [redis.Redis(port=p) for p in self.ports]
        try:
            bounds = [0, 5461, 10923, 16384]
            for i, client in enumerate(clients):
                client.cluster("ADDSLOTSRANGE", bounds[i], bounds[i + 1] - 1)
            for port in self.ports[1:]:
                clients[0].cluster("MEET", "127.0.0.1", port)
            for client in clients:
                wait_until(partial(_cluster_ok, client), timeout=30, what="the cluster is not ok")
        finally:
            for client in clients:
                client.close()

    def stop(self) -> None:
        """Stop every node by PID and remove the folders."""
        self.processes.stop()


class SentinelServers:
    """One master, one replica, three Sentinels (quorum 2, down after 1 s)."""

    def __init__(self, workdir: Path) -> None:
        self.processes = Processes(workdir)
        self.data_ports = [free_port(), free_port()]
        self.sentinel_ports = [free_port() for _ in range(3)]

    @property
    def url(self) -> str:
        """A `redis+sentinel://` URL naming every Sentinel and the service."""
        return "redis+sentinel://" + ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports) + f"/{SERVICE}/0"

    def master_port(self) -> int:
        """The port of the master the Sentinels name now."""
        with redis.Redis(port=self.sentinel_ports[0], socket_timeout=2) as sentinel:
            _host, port = sentinel.sentinel_get_master_addr_by_name(SERVICE)
            return int(port)

    def start(self) -> None:
        """Start the master, its replica and the Sentinels; wait until the Sentinels know all of them."""
        master, replica = self.data_ports
        self.processes.start(master, "appendonly no")
        self.processes.start(replica, "appendonly no", f"replicaof 127.0.0.1 {master}")
        with redis.Redis(port=replica) as client:
            wait_until(
                lambda: client.info("replication")["master_link_status"] == "up",
                timeout=30,
                what="the replica did not sync",
            )
        for port in self.sentinel_ports:
            self.processes.start(
                port,
                f"sentinel monitor {SERVICE} 127.0.0.1 {master} 2",
                f"sentinel down-after-milliseconds {SERVICE} 1000",
                f"sentinel failover-timeout {SERVICE} 5000",
                f"sentinel parallel-syncs {SERVICE} 1",
                sentinel=True,
            )
        for port in self.sentinel_ports:
            self._wait_sentinel_ready(port)

    def _wait_sentinel_ready(self, port: int) -> None:
        with redis.Redis(port=port) as sentinel:

            def ready() -> bool:
                state = sentinel.sentinel_master(SERVICE)
                return bool(state["num-other-sentinels"] == 2 and state["num-slaves"] == 1)

            wait_until(ready, timeout=30, what=f"the Sentinel on {port} does not see the others and the replica")

    def stop(self) -> None:
        """Stop every server and Sentinel by PID and remove the folders."""
        self.processes.stop()
