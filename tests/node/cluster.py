"""A real one-node Kubernetes cluster on this machine, for end-to-end tests and the sandbox.

The control plane of `tests/kube_cluster.py` (etcd, kube-apiserver, kube-controller-manager) plus
kube-scheduler, containerd (its own socket and root), a kubelet, a bridge CNI network, kube-proxy
and CoreDNS. Binaries come from tests/peers/build.sh, images from tests/images/build.sh (imported
into containerd: nothing is pulled). Pods run for real; Services and their names work inside Pods.

Addresses: the node's own private address (on `lo`), a bridge for Pods, a range for Services; none
is routed off the machine. `stop()` deletes every Pod while the kubelet still runs, stops every
process by PID, and undoes every change to the host (see host.py). TEST HARNESS ONLY: needs root.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

from tests.kube_cluster import ADMIN_TOKEN, KubeCluster, api_request, peer
from tests.node import configs
from tests.node.host import HostChanges, hold_the_machine
from tests.node.pki import Authority
from tests.redis_server import free_port

ROOT = Path(__file__).resolve().parent.parent.parent
IMAGES = ROOT / "tests" / "images" / "build.sh"
NODE_NAME = "grs-node"
NODE_IP = "198.51.100.1"
POD_CIDR = "198.18.0.0/22"
SERVICE_CIDR = "198.19.0.0/24"
BRIDGE = "grs-cni0"
# What one node's stores take at most (the Helm node test: some 1.3 GiB) with room for the kubelet's
# eviction floor (configs.kubelet_config) above it.
NODE_DISK_NEEDED = 3 << 30
# What makes Pods, each kind's collection in a namespace ({ns}): the drain deletes these before the Pods.
WORKLOADS = (
    "/apis/apps/v1/namespaces/{ns}/deployments",
    "/apis/apps/v1/namespaces/{ns}/statefulsets",
    "/apis/apps/v1/namespaces/{ns}/daemonsets",
    "/apis/apps/v1/namespaces/{ns}/replicasets",
    "/apis/batch/v1/namespaces/{ns}/cronjobs",
    "/apis/batch/v1/namespaces/{ns}/jobs",
)


def check_disk(workdir: Path) -> None:
    """A clear error when the disk under `workdir` has too little room for a node: short of it, the
    kubelet reports DiskPressure, taints the node, and every runner Pod stays Pending without a word."""
    free = shutil.disk_usage(workdir).free
    if free < NODE_DISK_NEEDED:
        raise RuntimeError(
            f"{workdir} has {free / (1 << 30):.1f} GiB free; a node needs {NODE_DISK_NEEDED >> 30} GiB "
            "(old runs' folders, such as ${TMPDIR:-/tmp}/grs-ci.* of failed CI runs, may be removed)"
        )


def image(name: str) -> tuple[str, Path]:
    """(reference, oci-archive) of a locally built image, once a build of it under way has ended (.ci/run
    builds some while the tests run); a clear error if it is not built."""

    def ask(flag: str) -> str:
        return subprocess.run(["bash", str(IMAGES), flag, name], check=True, capture_output=True, text=True).stdout

    ref, tar = ask("--ref").strip(), Path(ask("--wait").strip())
    if not tar.is_file():
        raise RuntimeError(f"image {name} is not built: run `bash tests/images/build.sh` (or .ci/run) first")
    return ref, tar


class NodeCluster(KubeCluster):
    """The control plane, one real node, Service routing and cluster DNS."""

    host = NODE_IP
    controllers = "*,-nodeipam,-cloud-node-lifecycle"
    service_cidr = SERVICE_CIDR
    authorization_mode = "Node,RBAC"

    def __init__(self, workdir: Path, *, images: tuple[str, ...] = ("pause", "runner", "scaler")) -> None:
        super().__init__(workdir, controller_manager=True)
        self.images = [image(name) for name in images]
        self.layout = configs.Layout(
            root=workdir / "node",
            node_name=NODE_NAME,
            node_ip=NODE_IP,
            pod_cidr=POD_CIDR,
            bridge=BRIDGE,
            pause_image=image("pause")[0],
        )
        self.changes = HostChanges(scratch=str(workdir), node_ip=NODE_IP, bridge=BRIDGE)
        self.pki = Authority(workdir / "pki")
        self.undrained: list[str] = []  # what stop()'s drain left running at its timeout
        self._machine: IO[bytes] | None = None  # held from start() to stop(): one node at a time

    @property
    def ca_file(self) -> Path:
        return self.pki.ca.cert

    def apiserver_args(self) -> list[str]:
        service_ip = SERVICE_CIDR.rsplit(".", 1)[0] + ".1"
        serving = self.pki.issue(
            "apiserver",
            cn="kube-apiserver",
            ips=(NODE_IP, "127.0.0.1", service_ip),
            dns=("kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"),
        )
        client = self.pki.issue("apiserver-kubelet-client", cn="kube-apiserver-kubelet-client", org="system:masters")
        return [
            "--tls-cert-file", str(serving.cert), "--tls-private-key-file", str(serving.key),
            "--client-ca-file", str(self.ca_file),
            "--kubelet-client-certificate", str(client.cert), "--kubelet-client-key", str(client.key),
            "--kubelet-preferred-address-types", "InternalIP,Hostname",
            "--enable-admission-plugins", "NodeRestriction",
        ]  # fmt: skip

    def start(self) -> None:
        """Start the control plane and the node; return once the node is Ready and untainted. Waits first
        while another process's node runs on this machine."""
        check_disk(self.layout.root.parent)
        self._machine = hold_the_machine()
        try:
            self.changes.record()
        except BaseException:
            self._release()
            raise
        try:
            self._start_containerd()
            # Importing the images takes seconds: do it while the control plane starts.
            with ThreadPoolExecutor() as pool:
                imports = [pool.submit(self.ctr, "images", "import", str(tar)) for _, tar in self.images]
                super().start()
                for done in imports:
                    done.result()
            self._start_node()
            self.wait_node_ready()
        except BaseException:
            self.stop()
            raise

    def _start_containerd(self) -> None:
        root = self.layout.root
        for sub in ("containerd", "kubelet", "pod-logs", "cni/net.d", "cni/ipam"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        (root / "containerd.toml").write_text(configs.containerd_toml(self.layout))
        address, hosts = configs.registry_hosts(self.layout)
        (self.layout.registry_hosts_dir / address).mkdir(parents=True, exist_ok=True)
        (self.layout.registry_hosts_dir / address / "hosts.toml").write_text(hosts)
        (self.layout.cni_conf_dir / "10-grs.conflist").write_text(configs.cni_conflist(self.layout))
        (root / "resolv.conf").write_text("")
        self._spawn("containerd", ["containerd", "--config", str(root / "containerd.toml")])
        self._wait(lambda: self.layout.containerd_socket.exists(), what="containerd's socket", timeout=30)

    def _start_node(self) -> None:
        root = self.layout.root
        self._spawn("kube-scheduler", [
            str(peer("kube-scheduler")), "--kubeconfig", str(self.kubeconfig), "--leader-elect=false",
            "--bind-address", "127.0.0.1", "--secure-port", str(free_port()),
        ])  # fmt: skip
        self._start_kubelet()
        proxy_conf = root / "kube-proxy.json"
        proxy_conf.write_text(
            configs.kube_proxy_config(
                self.layout, kubeconfig=self.kubeconfig, healthz_port=free_port(), metrics_port=free_port()
            )
        )
        self._spawn("kube-proxy", [str(peer("kube-proxy")), "--config", str(proxy_conf)])
        corefile = root / "Corefile"
        corefile.write_text(configs.corefile(self.layout, kubeconfig=self.kubeconfig, health_port=free_port()))
        self._spawn("coredns", [str(peer("coredns")), "-conf", str(corefile)])

    def _start_kubelet(self) -> None:
        root = self.layout.root
        identity = self.pki.issue("kubelet-client", cn=f"system:node:{NODE_NAME}", org="system:nodes")
        serving = self.pki.issue("kubelet-serving", cn=NODE_NAME, ips=(NODE_IP,), dns=(NODE_NAME,))
        kubeconfig = root / "kubelet.kubeconfig"
        config = json.loads(self.kubeconfig.read_text())
        config["users"][0]["user"] = {"client-certificate": str(identity.cert), "client-key": str(identity.key)}
        kubeconfig.write_text(json.dumps(config))
        settings = root / "kubelet.json"
        settings.write_text(
            configs.kubelet_config(
                self.layout,
                ca=self.ca_file,
                cert=serving.cert,
                key=serving.key,
                port=free_port(),
                healthz_port=free_port(),
            )
        )
        self._spawn("kubelet", [
            str(peer("kubelet")), "--config", str(settings), "--kubeconfig", str(kubeconfig),
            "--root-dir", str(root / "kubelet"), "--cert-dir", str(root / "kubelet" / "pki"),
            "--node-ip", NODE_IP, "--hostname-override", NODE_NAME, "--v", "1",
        ])  # fmt: skip

    def ctr(self, *args: str) -> str:
        """One `ctr` call in the CRI namespace of this node's containerd."""
        done = subprocess.run(
            ["ctr", "--address", str(self.layout.containerd_socket), "--namespace", "k8s.io", *args],
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout

    def wait_node_ready(self, timeout: float = 90.0) -> None:
        """Until the node is Ready and carries no NoSchedule taint."""

        def ready() -> bool:
            status, node = api_request(self, "GET", f"/api/v1/nodes/{NODE_NAME}")
            if status != 200:
                return False
            conds = {c["type"]: c["status"] for c in node["status"].get("conditions") or []}
            taints = [t for t in node["spec"].get("taints") or [] if t["effect"] in ("NoSchedule", "NoExecute")]
            return conds.get("Ready") == "True" and not taints

        self._wait(ready, what=f"node {NODE_NAME} Ready", timeout=timeout)

    def _wait(self, check: Any, *, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.by_name.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited while waiting for {what}: see {self.dir}/{name}.log")
            if check():
                return
            time.sleep(0.1)
        raise TimeoutError(f"{what}: not within {timeout}s (see {self.dir}/*.log)")

    def _drain(self, timeout: float = 60.0) -> list[str]:
        """Delete every workload and Pod while the kubelet runs, and wait until no container is left; return
        the Pods and containers still there at the timeout. A Pod deleted alone comes back while its
        controller lives (a Deployment's, the chart's Redis StatefulSet's), and a reconciler still running
        may start a Job meanwhile: so the deletions are made again every few seconds until nothing is left."""
        deadline, again, left = time.monotonic() + timeout, 0.0, []
        while time.monotonic() < deadline:
            status, pods = api_request(self, "GET", "/api/v1/pods")
            if status != 200:
                return []
            left = [f"Pod {p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods.get("items") or []]
            left += [f"container {task}" for task in self.ctr("tasks", "list", "--quiet").split()]
            if not left:
                return []
            if time.monotonic() >= again:
                self._delete_workloads()
                again = time.monotonic() + 5
            time.sleep(0.2)
        return left

    def _delete_workloads(self) -> None:
        """Delete, in every namespace, what makes Pods (controllers first), then the Pods themselves."""
        status, namespaces = api_request(self, "GET", "/api/v1/namespaces")
        if status != 200:
            return
        for ns in (n["metadata"]["name"] for n in namespaces["items"]):
            for kind in WORKLOADS:
                api_request(self, "DELETE", f"{kind.format(ns=ns)}?propagationPolicy=Background")
            api_request(self, "DELETE", f"/api/v1/namespaces/{ns}/pods?gracePeriodSeconds=0")

    def stop(self) -> None:
        """Delete all Pods, stop every process by PID, and undo every change to the host. What the drain
        could not delete in time is kept in `undrained` (the processes are stopped all the same)."""
        kubelet = self.by_name.get("kubelet")
        if kubelet is not None and kubelet.poll() is None:
            with contextlib.suppress(OSError, subprocess.CalledProcessError):
                self.undrained = self._drain()
        # Newest first, each gone before the next: the API server takes its address out of the
        # `kubernetes` Endpoints as it stops, through etcd, and waits for etcd if etcd is stopping too.
        for proc in reversed(self.procs):
            proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=15)
        super().stop()  # what did not stop is killed; the logs are closed
        self.changes.undo()
        self._release()

    def _release(self) -> None:
        """Let another process's node start."""
        if self._machine is not None:
            self._machine.close()
            self._machine = None


__all__ = ["ADMIN_TOKEN", "NODE_IP", "NODE_NAME", "NodeCluster", "image"]


@contextlib.contextmanager
def running_node(workdir: Path, *, images: tuple[str, ...] = ("pause", "runner", "scaler")) -> Iterator[NodeCluster]:
    """A started node, stopped afterwards; fails if anything of it is left on the machine."""
    cluster = NodeCluster(workdir, images=images)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
    left = cluster.changes.leftovers()
    assert not left, f"the node left these on the machine: {left}"
    assert not cluster.undrained, f"the node's drain left these running at its timeout: {cluster.undrained}"
