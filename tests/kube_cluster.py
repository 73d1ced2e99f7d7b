"""A real control plane on loopback for tests: etcd, kube-apiserver and, optionally, the controller manager.

The binaries come from tests/peers/build.sh (built from their Go modules, cached outside the
repository). This cluster has no node: Pods stay Pending. `tests/node/cluster.py` extends it with a real one.
"""

from __future__ import annotations

import datetime
import json
import os
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from tests.redis_server import die_with_parent, free_port, wait_port

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "tests" / "peers" / "build.sh"
ADMIN_TOKEN = "grs-test-admin-token"


def peer(name: str) -> Path:
    """The path of a cached peer binary, once a build of it under way has ended (`.ci/run` builds Helm
    and kubeconform while the tests run); a clear error if it has not been built."""
    path = Path(
        subprocess.run(["bash", str(BUILD), "--wait", name], check=True, capture_output=True, text=True).stdout.strip()
    )
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"{name} is not built: run `bash tests/peers/build.sh` (or .ci/run) first ({path})")
    return path


class KubeCluster:
    """etcd + kube-apiserver (+ kube-controller-manager) in one temporary folder."""

    #: The address the API server binds and advertises.
    host = "127.0.0.1"
    #: Controllers the controller manager runs (no node lifecycle: this cluster has no node).
    controllers = "*,-nodeipam,-nodelifecycle,-cloud-node-lifecycle"
    #: ClusterIPs of Services.
    service_cidr = "10.96.0.0/24"
    #: Authorizers (a cluster with a node adds Node).
    authorization_mode = "RBAC"

    def __init__(self, workdir: Path, *, controller_manager: bool = False) -> None:
        self.dir = workdir
        self.controller_manager = controller_manager
        self.procs: list[subprocess.Popen[bytes]] = []
        self.by_name: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[IO[bytes]] = []
        self.port = free_port()
        self.kubeconfig = workdir / "kubeconfig"
        self.sa_key = workdir / "sa.key"

    @property
    def server(self) -> str:
        """The API server's URL."""
        return f"https://{self.host}:{self.port}"

    @property
    def ca_file(self) -> Path:
        """The CA that signed the API server's serving certificate."""
        return self.dir / "certs" / "apiserver.crt"

    def apiserver_args(self) -> list[str]:
        """Flags a subclass replaces: the certificates, and how watches behave."""
        return [
            "--cert-dir",
            str(self.dir / "certs"),
            # Compact etcd often, so that watches from old resourceVersions really get 410 Gone.
            "--etcd-compaction-interval=2s",
            # ...and serve Job watches from etcd itself, which answers a compacted revision with 410.
            "--watch-cache-sizes=jobs.batch#0",
        ]

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = (self.dir / f"{name}.log").open("wb")
        self._logs.append(log)
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=self.dir, preexec_fn=die_with_parent)
        self.procs.append(proc)
        self.by_name[name] = proc
        return proc

    def start(self) -> None:
        """Start everything and wait until the API server is ready."""
        etcd_port, peer_port = free_port(), free_port()
        self._spawn(
            "etcd",
            [
                str(peer("etcd")),
                "--name",
                "default",
                "--data-dir",
                str(self.dir / "etcd"),
                "--listen-client-urls",
                f"http://127.0.0.1:{etcd_port}",
                "--advertise-client-urls",
                f"http://127.0.0.1:{etcd_port}",
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-cluster",
                f"default=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync",
                "--log-level",
                "warn",
            ],
        )
        wait_port(etcd_port, timeout=30)
        key, pub = self.sa_key, self.dir / "sa.pub"
        subprocess.run(["openssl", "genrsa", "-out", str(key), "2048"], check=True, capture_output=True)
        subprocess.run(
            ["openssl", "rsa", "-in", str(key), "-pubout", "-out", str(pub)], check=True, capture_output=True
        )
        tokens = self.dir / "tokens.csv"
        tokens.write_text(f'{ADMIN_TOKEN},admin,admin-uid,"system:masters"\n')
        self._spawn(
            "kube-apiserver",
            [
                str(peer("kube-apiserver")),
                "--etcd-servers",
                f"http://127.0.0.1:{etcd_port}",
                "--bind-address",
                self.host,
                "--advertise-address",
                self.host,
                "--secure-port",
                str(self.port),
                "--service-account-issuer",
                "https://kubernetes.default.svc.cluster.local",
                "--service-account-key-file",
                str(pub),
                "--service-account-signing-key-file",
                str(key),
                "--token-auth-file",
                str(tokens),
                "--authorization-mode",
                self.authorization_mode,
                "--service-cluster-ip-range",
                self.service_cidr,
                "--allow-privileged=true",
                "--enable-priority-and-fairness=false",
                "--profiling=false",
                *self.apiserver_args(),
            ],
        )
        self._wait_ready()
        self._write_kubeconfig()
        if self.controller_manager:
            self._spawn(
                "kube-controller-manager",
                [
                    str(peer("kube-controller-manager")),
                    "--kubeconfig",
                    str(self.kubeconfig),
                    "--authentication-kubeconfig",
                    str(self.kubeconfig),
                    "--authorization-kubeconfig",
                    str(self.kubeconfig),
                    "--service-account-private-key-file",
                    str(key),
                    "--root-ca-file",
                    str(self.ca_file),
                    "--use-service-account-credentials=false",
                    "--controllers",
                    self.controllers,
                    "--leader-elect=false",
                    "--bind-address",
                    "127.0.0.1",
                    "--secure-port",
                    str(free_port()),
                ],
            )

    def _wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        last = ""
        while time.monotonic() < deadline:
            for proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{proc.args!r} exited: see {self.dir}/*.log")
            req = urllib.request.Request(f"{self.server}/readyz", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
            try:
                with urllib.request.urlopen(req, context=ctx, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError as exc:
                last = str(exc)
            time.sleep(0.25)
        raise TimeoutError(f"kube-apiserver not ready after {timeout}s: {last}")

    def _write_kubeconfig(self) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "test",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority": str(self.ca_file),
                    },
                }
            ],
            "users": [{"name": "admin", "user": {"token": ADMIN_TOKEN}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "admin"}}],
            "current-context": "test",
        }
        self.kubeconfig.write_text(json.dumps(config))

    def write_kubeconfig_for(self, path: Path, *, token: str) -> Path:
        """A kubeconfig for another identity (e.g. a ServiceAccount token) on this cluster."""
        config = json.loads(self.kubeconfig.read_text())
        config["users"] = [{"name": "admin", "user": {"token": token}}]
        path.write_text(json.dumps(config))
        return path

    def stop(self) -> None:
        """Stop every process, newest first."""
        for proc in reversed(self.procs):
            proc.terminate()
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
        for log in self._logs:
            log.close()
        self.procs.clear()


def tls_context(cluster: KubeCluster) -> ssl.SSLContext:
    """A client TLS context that trusts the cluster's CA (its certificates name no hostname we dial)."""
    ctx = ssl.create_default_context(cafile=str(cluster.ca_file))
    ctx.check_hostname = False
    return ctx


def api_request(
    cluster: KubeCluster,
    method: str,
    path: str,
    body: Any = None,
    *,
    token: str = ADMIN_TOKEN,
    content_type: str = "application/json",
) -> tuple[int, Any]:
    """One synchronous API call (for fixtures): (status, decoded body).

    A PATCH needs its patch type as `content_type`, e.g. "application/merge-patch+json".
    """
    ctx = tls_context(cluster)
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        cluster.server + path,
        data=data,
        method=method,
        headers={"Authorization": f"Bearer {token}", "Content-Type": content_type},
    )
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def api_text(cluster: KubeCluster, path: str) -> str:
    """One GET of a plain-text resource (e.g. a Pod's log); raises for a non-2xx answer."""
    req = urllib.request.Request(cluster.server + path, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    with urllib.request.urlopen(req, context=tls_context(cluster), timeout=30) as resp:
        return str(resp.read().decode(errors="replace"))


def apply_crd(cluster: KubeCluster, crd: dict[str, Any], *, timeout: float = 30) -> None:
    """Create a CRD and wait until it is Established."""
    name = crd["metadata"]["name"]
    status, body = api_request(cluster, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    if status not in (201, 409):
        raise RuntimeError(f"CRD {name} not created: {status} {body}")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _, got = api_request(cluster, "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        conds = {c["type"]: c["status"] for c in (got.get("status") or {}).get("conditions") or []}
        spec = crd["spec"]
        list_path = f"/apis/{spec['group']}/{spec['versions'][0]['name']}/{spec['names']['plural']}"
        if conds.get("Established") == "True" and api_request(cluster, "GET", list_path)[0] == 200:
            return
        time.sleep(0.1)
    raise TimeoutError(f"CRD {name} not established")


def fail_job(cluster: KubeCluster, namespace: str, name: str, reason: str = "BackoffLimitExceeded") -> None:
    """Mark a Job Failed through its status, as the Job controller does when its Pod failed."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = [
        {"type": t, "status": "True", "reason": reason, "lastTransitionTime": now, "lastProbeTime": now}
        for t in ("FailureTarget", "Failed")  # the order the Job controller sets them in
    ]
    status = {"status": {"startTime": now, "failed": 1, "conditions": conditions}}
    path = f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}/status"
    code, answer = api_request(cluster, "PATCH", path, status, content_type="application/merge-patch+json")
    assert code == 200, answer


def runner_of(job: Mapping[str, Any]) -> str:
    """A runner Job's runner, as Gitea calls it (the name it registers with, see `reconciler.model.names`)."""
    return str(job["metadata"]["annotations"]["gitea.bpg.pw/runner-name"])


def complete_job(cluster: KubeCluster, namespace: str, name: str) -> None:
    """Mark a Job Complete through its status, as the Job controller does when its Pod succeeded."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    conditions = [
        {"type": t, "status": "True", "lastTransitionTime": now, "lastProbeTime": now}
        for t in ("SuccessCriteriaMet", "Complete")  # the order the Job controller sets them in
    ]
    status = {"status": {"startTime": now, "completionTime": now, "succeeded": 1, "conditions": conditions}}
    path = f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}/status"
    code, answer = api_request(cluster, "PATCH", path, status, content_type="application/merge-patch+json")
    assert code == 200, answer
