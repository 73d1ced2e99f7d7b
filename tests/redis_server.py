"""A real redis-server on a free loopback port in a temporary folder, for tests and benchmarks."""

from __future__ import annotations

import ctypes
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import IO, Any


def die_with_parent() -> None:
    """`preexec_fn` for test processes: SIGTERM when the test process dies, even if it is killed
    before its fixtures' finalizers run (Linux prctl PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_port(port: int, *, timeout: float = 10.0) -> None:
    """Block until 127.0.0.1:port accepts connections."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


class RedisServer:
    """One redis-server process with AOF on (fsync always), stoppable and restartable on its port."""

    def __init__(self, workdir: Path, *, binary: str | None = None) -> None:
        found = binary or shutil.which("redis-server")
        if found is None:
            raise RuntimeError("redis-server not found: run .ci/run, or apt-get install redis-server")
        self.binary = found
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The URL clients connect to."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(self.workdir),
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--daemonize",
                "no",
                "--logfile",
                str(self.workdir / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=die_with_parent,
        )
        wait_port(self.port)

    def stop(self) -> None:
        """Stop the server (SIGTERM) and wait for it to exit."""
        stop_process(self.proc, None, timeout=10)
        self.proc = None


def stop_process(proc: subprocess.Popen[Any] | None, log: IO[Any] | None, *, timeout: float = 30) -> None:
    """SIGTERM a process we started and wait for it; SIGKILL it if it takes longer than `timeout`; close
    its log."""
    if proc is not None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if log is not None:
        log.close()
