"""What the test node changes on this machine, recorded before and undone after.

A kubelet, containerd and the CNI plugins change the host: an address on `lo`, a bridge, iptables
chains, network namespaces, mounts, cgroups, sysctls, a few fixed folders, and the modes of
/dev/net/tun and /dev/fuse (0666, as udev makes them, for the rootless Docker of the default
image). `HostChanges.record()` notes the state before the node starts (in a file outside the scratch
folder, so that a run that crashed is undone by the next one), and `undo()` puts every piece back
once the node's processes have stopped. TEST HARNESS ONLY: it must run as root, on a machine whose only node is ours.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shlex
import signal
import stat
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO

# Folders the kubelet, containerd and libcni use whatever their configuration says.
FIXED_PATHS = (
    "/run/containerd",
    "/var/lib/cni",
    "/var/lib/kubelet",
    "/var/log/containers",
    "/var/log/pods",
    "/var/run/netns",
    "/run/netns",
)
CGROUP_ROOT = Path("/sys/fs/cgroup")
# Top-level cgroups the kubelet (cgroupfs driver) and containerd's CRI create.
CGROUP_NAMES = ("kubepods", "k8s.io")
CHAIN_PREFIXES = ("KUBE-", "CNI-")
# Devices a rootless Docker daemon (the default runner image's) opens as its own user: udev makes them
# 0666 on most distributions; a machine without udev has them 0600.
USER_DEVICES = ("/dev/net/tun", "/dev/fuse")
SYSCTLS = ("net/ipv4/ip_forward", "net/ipv4/conf/all/route_localnet", "net/bridge/bridge-nf-call-iptables")
STATE_FILE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "gitea-runner-scaler" / "node-host.json"
# Held (flock) by the process whose node runs: a machine has room for one node at a time.
LOCK_FILE = STATE_FILE.with_name("node.lock")


def hold_the_machine(path: Path = LOCK_FILE) -> IO[bytes]:
    """Wait until no other process's node runs on this machine, and hold it until the returned file is
    closed (or this process ends). A second node (another test run, the sandbox, a benchmark) would take
    the same address, bridge and chains, and its `record()` would undo the running node's changes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.open("ab")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
    except BaseException:
        lock.close()
        raise
    return lock


def _run(*args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=check)


def _sysctl(name: str) -> str | None:
    try:
        return Path("/proc/sys", name).read_text().strip()
    except OSError:
        return None


def set_sysctl(name: str, value: str) -> None:
    """Write one sysctl."""
    Path("/proc/sys", name).write_text(value)


def _mounts() -> list[str]:
    return [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]


def _netns() -> set[str]:
    return {line.split()[0] for line in _run("ip", "netns", "list").stdout.splitlines() if line}


def _chains(binary: str) -> set[str]:
    chains = set()
    for table in ("filter", "nat", "mangle"):
        for line in _run(binary, "-t", table, "-S").stdout.splitlines():
            if line.startswith("-N ") and line[3:].startswith(CHAIN_PREFIXES):
                chains.add(f"{table}/{line[3:]}")
    return chains


@dataclass
class HostChanges:
    """The machine's state before the node started, and the node's own names on it."""

    scratch: str
    node_ip: str
    bridge: str
    existed: list[str] = field(default_factory=list)
    sysctls: dict[str, str] = field(default_factory=dict)
    netns: list[str] = field(default_factory=list)
    devices: dict[str, int] = field(default_factory=dict)  # path -> its mode before the node

    def record(self) -> None:
        """Undo what a crashed earlier run left, then note the state before this node starts (the caller
        holds the machine: `hold_the_machine()`, so a state file left is a dead process's)."""
        if STATE_FILE.exists():
            with contextlib.suppress(ValueError, TypeError):
                HostChanges(**json.loads(STATE_FILE.read_text())).undo()
        self.existed = [p for p in FIXED_PATHS if os.path.lexists(p)]
        self.sysctls = {name: value for name in SYSCTLS if (value := _sysctl(name)) is not None}
        self.netns = sorted(_netns())
        self.devices = {d: stat.S_IMODE(os.stat(d).st_mode) for d in USER_DEVICES if os.path.exists(d)}
        STATE_FILE.parent.mkdir(parents=True, exist_ok=True)
        STATE_FILE.write_text(json.dumps(asdict(self)))
        _run("ip", "addr", "add", f"{self.node_ip}/32", "dev", "lo")
        set_sysctl("net/ipv4/ip_forward", "1")
        for device in self.devices:  # as udev leaves them on most nodes: rootless Docker opens them
            os.chmod(device, 0o666)  # noqa: S103 (character devices, as udev makes them)

    def undo(self) -> None:
        """Put the machine back as `record()` found it; the node's processes must have stopped."""
        kill_tree(_pids_using(self.scratch))
        for netns in sorted(_netns() - set(self.netns)):
            _run("ip", "netns", "delete", netns)
        for mount in sorted(_mounts(), key=len, reverse=True):
            if mount.startswith((self.scratch + "/", *(p + "/" for p in FIXED_PATHS if p not in self.existed))):
                _run("umount", "-l", mount)
        _run("ip", "link", "delete", self.bridge)
        _run("ip", "addr", "del", f"{self.node_ip}/32", "dev", "lo")
        for binary in ("iptables", "ip6tables"):
            _delete_chains(binary)
        for name, value in self.sysctls.items():
            with contextlib.suppress(OSError):
                set_sysctl(name, value)
        for device, mode in self.devices.items():
            with contextlib.suppress(OSError):
                os.chmod(device, mode)
        for controller in CGROUP_ROOT.iterdir() if CGROUP_ROOT.is_dir() else ():
            for name in CGROUP_NAMES:
                _rmdir_tree(controller / name)
        for path in FIXED_PATHS:
            if path not in self.existed and os.path.lexists(path) and not os.path.islink(path):
                subprocess.run(["rm", "-rf", "--one-file-system", path], check=False)
        STATE_FILE.unlink(missing_ok=True)

    def leftovers(self) -> list[str]:
        """What of the node is still on the machine (empty after a clean `undo()`)."""
        found = [f"process {pid}" for pid in _pids_using(self.scratch)]
        found += [f"mount {m}" for m in _mounts() if m.startswith(self.scratch + "/")]
        found += [f"netns {n}" for n in sorted(_netns() - set(self.netns))]
        if _run("ip", "link", "show", self.bridge).returncode == 0:
            found.append(f"bridge {self.bridge}")
        if self.node_ip in _run("ip", "-o", "addr", "show", "dev", "lo").stdout:
            found.append(f"address {self.node_ip}")
        found += [f"{b} chain {c}" for b in ("iptables", "ip6tables") for c in sorted(_chains(b))]
        found += [f"cgroup {c}/{n}" for c in CGROUP_ROOT.iterdir() for n in CGROUP_NAMES if (c / n).is_dir()]
        found += [f"path {p}" for p in FIXED_PATHS if p not in self.existed and os.path.lexists(p)]
        found += [f"mode of {d}" for d, m in self.devices.items() if stat.S_IMODE(os.stat(d).st_mode) != m]
        return found


def _delete_chains(binary: str) -> None:
    """Remove every KUBE-*/CNI-* chain, and the rules that jump to them, from every table."""
    for table in ("filter", "nat", "mangle"):
        rules = _run(binary, "-t", table, "-S").stdout.splitlines()
        ours = {line[3:] for line in rules if line.startswith("-N ") and line[3:].startswith(CHAIN_PREFIXES)}
        for line in rules:
            parts = shlex.split(line)
            if parts[0] == "-A" and parts[1] not in ours and any(p in ours for p in parts):
                _run(binary, "-t", table, "-D", *parts[1:])
        for chain in ours:
            _run(binary, "-t", table, "-F", chain)
        for chain in ours:
            _run(binary, "-t", table, "-X", chain)


def _rmdir_tree(path: Path) -> None:
    if not path.is_dir():
        return
    for child in path.iterdir():
        if child.is_dir():
            _rmdir_tree(child)
    with contextlib.suppress(OSError):
        path.rmdir()


def _pids_using(scratch: str) -> list[int]:
    """Processes whose command line names the scratch folder (e.g. containerd shims, by their socket)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            with contextlib.suppress(OSError):
                if scratch.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
    return pids


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def kill_tree(pids: list[int], *, timeout: float = 10.0) -> None:
    """SIGKILL these processes and all their descendants, and wait until they are gone."""
    tree, todo, every = _children(), list(pids), set()
    while todo:
        pid = todo.pop()
        if pid not in every:
            every.add(pid)
            todo.extend(tree.get(pid, []))
    for pid in every:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while every and time.monotonic() < deadline:
        every = {pid for pid in every if Path(f"/proc/{pid}").exists() and not _zombie(pid)}
        time.sleep(0.05)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True
