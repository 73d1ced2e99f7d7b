"""Both console commands answer --help and --version, and refuse other arguments, with no GRS_* set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

import pytest
from pydantic import BaseModel

from reconciler.kube.api import api_client
from reconciler.settings import Settings as ReconcilerSettings
from webhook_scaler.config import variables
from webhook_scaler.settings import Settings as ReceiverSettings

PROGRAMS: dict[str, tuple[str, type[BaseModel]]] = {
    "webhook-scaler": ("webhook_scaler", ReceiverSettings),
    "reconciler": ("reconciler", ReconcilerSettings),
}
ARGUMENTS = {"help": ["--help"], "version": ["--version"], "unknown": ["--listen-port", "80"]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], subprocess.CompletedProcess[str]]:
    """Every (program, arguments) case, run once as `python -m PACKAGE ...` with no GRS_* variable."""
    home = tmp_path_factory.mktemp("home")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRS_", "KUBERNETES_"))}
    env.update(HOME=str(home), KUBECONFIG=str(Path(home) / "missing"))

    def run(case: tuple[str, str]) -> subprocess.CompletedProcess[str]:
        package = PROGRAMS[case[0]][0]
        args = [sys.executable, "-m", package, *ARGUMENTS[case[1]]]
        return subprocess.run(args, env=env, capture_output=True, text=True, timeout=60, check=False)

    cases = [(program, arguments) for program in PROGRAMS for arguments in ARGUMENTS]
    # The imports take most of a second per process; run the cases side by side.
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(zip(cases, pool.map(run, cases), strict=True))


@pytest.mark.parametrize("program", PROGRAMS)
def test_help_lists_every_setting_with_its_default_and_description(
    runs: dict[tuple[str, str], subprocess.CompletedProcess[str]], program: str
) -> None:
    done = runs[program, "help"]
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: {program} ") and done.stderr == ""
    flat = " ".join(done.stdout.split())
    for field, names, info in variables(PROGRAMS[program][1]):
        assert info.description, f"{field} has no description"
        assert f"{', '.join(names)} (default: " in flat
        assert " ".join(info.description.split()) in flat


@pytest.mark.parametrize(
    ("program", "expected"),
    [
        pytest.param("webhook-scaler", "GRS_WEBHOOK_SECRET, GRS_WEBHOOK_SECRET_FILE (default: unset)", id="secret"),
        pytest.param("webhook-scaler", "GRS_INSECURE_ACCEPT_UNSIGNED_WEBHOOKS (default: false)", id="bool"),
        pytest.param("webhook-scaler", "GRS_MAX_BODY_BYTES (default: 1048576)", id="int"),
        pytest.param("reconciler", "GRS_REDIS_PASSWORD, GRS_REDIS_PASSWORD_FILE (default: unset)", id="optional"),
        pytest.param("reconciler", "GRS_POLL_INTERVAL (default: 30)", id="float"),
        pytest.param("reconciler", 'GRS_WATCH_NAMESPACE (default: "")', id="empty"),
        pytest.param("reconciler", "GRS_REPLICA_ID (default: gethostname())", id="factory"),
        pytest.param("reconciler", "Log level. One of: DEBUG, INFO, WARNING, ERROR.", id="choices"),
    ],
)
def test_help_shows_defaults_as_one_would_set_them(
    runs: dict[tuple[str, str], subprocess.CompletedProcess[str]], program: str, expected: str
) -> None:
    assert expected in " ".join(runs[program, "help"].stdout.split())


@pytest.mark.parametrize("program", PROGRAMS)
def test_version_is_the_installed_distributions_with_the_checkouts_revision(
    runs: dict[tuple[str, str], subprocess.CompletedProcess[str]], program: str
) -> None:
    """Run from this checkout (an editable install), `--version` names the commit as `git describe` does."""
    done = runs[program, "version"]
    root = Path(__file__).resolve().parents[2]
    describe = ["git", "-C", str(root), "describe", "--always", "--dirty", "--abbrev=12", "--match", "v*"]
    commit = subprocess.run(describe, capture_output=True, text=True, check=True).stdout.strip()
    assert commit
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        f"{program} {metadata.version('gitea-runner-scaler')} (git {commit})\n",
        "",
    )


@pytest.mark.parametrize("program", PROGRAMS)
def test_any_other_argument_is_refused_with_exit_2(
    runs: dict[tuple[str, str], subprocess.CompletedProcess[str]], program: str
) -> None:
    done = runs[program, "unknown"]
    assert done.returncode == 2 and done.stdout == ""
    assert f"{program}: error: unrecognized arguments: --listen-port 80" in done.stderr
    assert "GRS_*" in done.stderr and "--help" in done.stderr


def _run(package: str, home: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m package` with only `env` besides PATH and HOME (no GRS_*, not in a cluster)."""
    base = {"PATH": os.environ["PATH"], "HOME": str(home), **env}
    return subprocess.run([sys.executable, "-m", package], env=base, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("program", PROGRAMS)
def test_bad_settings_are_one_plain_line_each_and_refused_with_exit_2(program: str, tmp_path: Path) -> None:
    done = _run(PROGRAMS[program][0], tmp_path, GRS_LOG_LEVEL="loud", GRS_REDIS_TIMEOUT="soon")
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert f"{program}: invalid setting: GRS_LOG_LEVEL: Input should be 'DEBUG', 'INFO', 'WARNING' or 'ERROR'" in lines
    assert any(line.startswith(f"{program}: invalid setting: GRS_REDIS_TIMEOUT: ") for line in lines), lines
    assert all(line.startswith(f"{program}: invalid setting: GRS_") for line in lines), lines


def test_outside_a_cluster_the_reconciler_reads_kubeconfig_and_says_where_it_looked(tmp_path: Path) -> None:
    """No KUBERNETES_SERVICE_HOST: $KUBECONFIG (else ~/.kube/config), not the in-cluster account; a
    misspelt setting is warned about first."""
    missing = tmp_path / "nowhere" / "config"
    done = _run("reconciler", tmp_path, KUBECONFIG=str(missing), GRS_LOG_FORMAT="text", GRS_POL_INTERVAL="3")
    assert done.returncode == 2, done.stderr
    assert "GRS_POL_INTERVAL is not a setting of this program and is ignored; did you mean GRS_POLL_INTERVAL?" in (
        done.stderr
    )
    assert (
        f"reconciler: cannot load the Kubernetes configuration: not in a cluster (no KUBERNETES_SERVICE_HOST), "
        f"and the kubeconfig {missing} ($KUBECONFIG, else ~/.kube/config; or set GRS_KUBECONFIG) cannot be used"
    ) in done.stderr


async def test_without_a_kubeconfig_setting_the_client_comes_from_kubeconfig_outside_a_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubeconfig = tmp_path / "config"
    cluster = {"name": "c", "cluster": {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True}}
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    api = await api_client(None)
    try:
        assert api.configuration.host == "https://127.0.0.1:6443"
    finally:
        await api.close()
