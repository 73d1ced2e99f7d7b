"""End-to-end harness: a real Gitea (built from its Go module, sqlite) and our two real processes.

TEST HARNESS ONLY. It starts Gitea with Actions on and webhooks allowed to loopback, creates an
admin, a token, an org and a repository through Gitea's own CLI and API, and runs `webhook-scaler`
and `reconciler` as real processes with real configuration (environment variables).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from tests.kube_cluster import peer
from tests.node.pki import Pair
from tests.redis_server import die_with_parent, free_port, stop_process, wait_port

ADMIN = "root"
PASSWORD = "Passw0rd-Passw0rd"


class Gitea:
    """One Gitea instance in a temporary folder."""

    def __init__(
        self, workdir: Path, *, host: str = "127.0.0.1", tls: Pair | None = None, ca: Path | None = None
    ) -> None:
        self.dir = workdir
        self.host = host  # runner Pods reach Gitea on the node's address, not on loopback
        self.port = free_port()
        self.tls = tls  # serve HTTPS with this certificate, which `ca` signed
        self.url = f"{'https' if tls else 'http'}://{host}:{self.port}"
        self.context = ssl.create_default_context(cafile=str(ca)) if ca else None
        self.token = ""
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def _cli(self, *args: str) -> str:
        done = subprocess.run(
            [str(peer("gitea")), *args, "-c", str(self.dir / "app.ini")],
            env={**os.environ, "GITEA_WORK_DIR": str(self.dir)},
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip()

    def start(self) -> None:
        """Write app.ini, start the server, and make an admin with an API token."""
        self.dir.mkdir(parents=True, exist_ok=True)
        serving = f"PROTOCOL = https\nCERT_FILE = {self.tls.cert}\nKEY_FILE = {self.tls.key}" if self.tls else ""
        (self.dir / "app.ini").write_text(f"""APP_NAME = e2e
RUN_MODE = prod
WORK_PATH = {self.dir}
; CI runs as root; Gitea refuses that unless told.
I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true
[server]
HTTP_ADDR = {self.host}
HTTP_PORT = {self.port}
ROOT_URL = {self.url}/
{serving}
DISABLE_SSH = true
OFFLINE_MODE = true
; Stop within seconds, even with runners' requests open (the default waits up to a minute).
GRACEFUL_HAMMER_TIME = 3s
STATIC_ROOT_PATH = {peer("gitea-share")}
[database]
DB_TYPE = sqlite3
PATH = {self.dir}/data/gitea.db
[repository]
ROOT = {self.dir}/repos
[security]
INSTALL_LOCK = true
SECRET_KEY = {secrets.token_hex(16)}
[actions]
ENABLED = true
; `uses: actions/checkout@v4` resolves to this Gitea's own actions/checkout (tests/e2e/actions.py)
DEFAULT_ACTIONS_URL = self
[webhook]
ALLOWED_HOST_LIST = loopback,{self.host}/32
DELIVER_TIMEOUT = 5
[log]
MODE = file
LEVEL = Info
ROOT_PATH = {self.dir}/log
[service]
DISABLE_REGISTRATION = true
[cron.update_checker]
ENABLED = false
""")
        self._log = (self.dir / "gitea.out").open("wb")
        self.proc = subprocess.Popen(
            [str(peer("gitea")), "web", "-c", str(self.dir / "app.ini")],
            env={**os.environ, "GITEA_WORK_DIR": str(self.dir)},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gitea exited: see {self.dir}/gitea.out")
            try:
                with urllib.request.urlopen(f"{self.url}/api/v1/version", timeout=2, context=self.context):
                    break
            except OSError:
                time.sleep(0.2)
        self._cli(
            "admin",
            "user",
            "create",
            "--admin",
            "--username",
            ADMIN,
            "--password",
            PASSWORD,
            "--email",
            "root@example.com",
            "--must-change-password=false",
        )
        self.token = self._cli(
            "admin",
            "user",
            "generate-access-token",
            "--username",
            ADMIN,
            "--token-name",
            "e2e",
            "--scopes",
            "all",
            "--raw",
        ).splitlines()[-1]

    def api(self, method: str, path: str, body: Any = None) -> Any:
        """One API call as the admin; raises for a non-2xx answer."""
        raw = self.raw(method, path, body)
        return json.loads(raw) if raw else None

    def raw(self, method: str, path: str, body: Any = None) -> bytes:
        """One API call as the admin, its body as sent; raises for a non-2xx answer."""
        req = urllib.request.Request(
            f"{self.url}/api/v1{path}",
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=30, context=self.context) as resp:
                raw: bytes = resp.read()
        except urllib.error.HTTPError as err:
            raise RuntimeError(f"{method} {path}: {err.code} {err.read()[:300]!r}") from None
        return raw

    def push_file(self, repo: str, path: str, content: str, *, message: str) -> None:
        """Commit one file (new or changed) to the default branch through the API: a push, as far as
        Actions care."""
        body = {"content": base64.b64encode(content.encode()).decode(), "message": message}
        try:
            sha = self.api("GET", f"/repos/{repo}/contents/{path}")["sha"]
        except RuntimeError as err:
            if ": 404 " not in str(err):
                raise
            self.api("POST", f"/repos/{repo}/contents/{path}", body)  # a new file
        else:
            self.api("PUT", f"/repos/{repo}/contents/{path}", {**body, "sha": sha})

    def stop(self) -> None:
        """Stop the server."""
        stop_process(self.proc, self._log)
        self.proc = None


class Service:
    """One of our processes, run as users run it: its console script and GRS_* variables."""

    def __init__(self, name: str, env: dict[str, str], workdir: Path) -> None:
        self.name = name
        self.env = env
        self.dir = workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self, *, port: int | None = None) -> None:
        """Start it, and wait for its port if it has one."""
        self._log = (self.dir / f"{self.name}.log").open("ab")
        binary = Path(sys.executable).parent / self.name
        # The machine's own proxy variables are not the test's: a reconciler would send its calls to the
        # test Gitea through them, and pass them on to every runner Pod.
        machine = {k: v for k, v in os.environ.items() if k.upper() not in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")}
        self.proc = subprocess.Popen(
            [str(binary)],
            env={**machine, **self.env},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,
        )
        if port:
            wait_port(port, timeout=30)

    def stop(self) -> None:
        """SIGTERM, and wait."""
        stop_process(self.proc, self._log)
        self.proc = None

    @contextlib.contextmanager
    def reconfigured(self, *, port: int | None = None, **env: str) -> Iterator[None]:
        """Restarted with some settings changed, and restarted as it was afterwards."""
        before = dict(self.env)
        self.stop()
        self.env.update(env)
        self.start(port=port)
        try:
            yield
        finally:
            self.stop()
            self.env = before
            self.start(port=port)

    def log(self) -> str:
        """What it logged so far."""
        return (self.dir / f"{self.name}.log").read_text(errors="replace")


def our_services(
    workdir: Path, *, redis_url: str, kubeconfig: Path, namespace: str, secret: str, **reconciler_env: str
) -> tuple[Service, int, Service, int]:
    """`webhook-scaler` and `reconciler` on free loopback ports, configured as users configure them
    (not started): (receiver, its port, reconciler, its metrics port)."""
    port, metrics = free_port(), free_port()
    common = {"GRS_REDIS_URL": redis_url, "GRS_LOG_LEVEL": "DEBUG", "GRS_LISTEN_HOST": "127.0.0.1"}
    receiver = Service(
        "webhook-scaler", {**common, "GRS_WEBHOOK_SECRET": secret, "GRS_LISTEN_PORT": str(port)}, workdir
    )
    reconciler = Service(
        "reconciler",
        {
            **common,
            "GRS_KUBECONFIG": str(kubeconfig),
            "GRS_WATCH_NAMESPACE": namespace,
            "GRS_LISTEN_PORT": str(metrics),
            **reconciler_env,
        },
        workdir,
    )
    return receiver, port, reconciler, metrics


def deliveries(receiver: Service) -> list[dict[str, Any]]:
    """What the receiver logged about each delivery it recorded (job_id, action, outcome, time, ...)."""
    return [json.loads(line) for line in receiver.log().splitlines() if '"webhook recorded"' in line]
