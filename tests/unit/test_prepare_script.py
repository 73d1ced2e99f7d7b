"""The prepare init container's script, run by a real /bin/sh with a stand-in runner binary.

The controller registered the runner; the script checks the image has a runner binary, writes the CA
bundle and the cache config, and copies the runner's credential (the Secret's `.runner`) to where the
image's entrypoint looks. Its exit codes and last lines (the Pod's termination message, shown in the
group's status) are checked for real.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from reconciler.kube.egress import DIRECT, Egress
from reconciler.kube.manifests import PREPARE_SCRIPT
from reconciler.kube.runner_cache import RunnerCache, config_env

CREDENTIAL = '{"id": 7, "uuid": "u-7", "name": "builders-7-ab12", "token": "runner-own-token"}\n'


def run(
    tmp_path: Path,
    *,
    binary: str = "act_runner",
    egress: Egress = DIRECT,
    config: str | Path | None = None,
    credential: str | None = CREDENTIAL,
    fetch_interval: str = "1s",
    **more: str,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run the script with a stand-in `binary` (act_runner 0.x's name; 1.x's is gitea-runner; "": none)
    on a PATH of nothing else but the tools the script uses, and the credential Secret's file (None:
    not mounted)."""
    bin_dir, state, secret = tmp_path / "bin", tmp_path / "data", tmp_path / "secret"
    for folder in (bin_dir, state, secret):
        folder.mkdir()
    if binary:
        fake = bin_dir / binary
        fake.write_text("#!/bin/sh\nexit 0\n")
        fake.chmod(0o755)
    for tool in ("cat", "cp", "rm", "grep", "mkdir", "awk"):
        (bin_dir / tool).symlink_to(shutil.which(tool) or f"/usr/bin/{tool}")
    if credential is not None:
        (secret / ".runner").write_text(credential)
        (secret / ".runner").chmod(0o444)  # as the Secret's volume has it (defaultMode)
    env = {
        "PATH": str(bin_dir),
        "GRS_STATE_DIR": str(state),
        "GRS_CREDENTIAL_FILE": str(secret / ".runner"),
        "GITEA_INSTANCE_URL": "http://gitea.invalid:3000",
        "GITEA_RUNNER_NAME": "builders-7-ab12",
        "GITEA_RUNNER_LABELS": "k8s",
        **{
            e["name"]: e["value"] if "value" in e else SECRETS[str(e["valueFrom"])]
            for e in egress.register_env(str(state)) + config_env(str(state), fetch_interval=fetch_interval)
        },
        **more,
    }
    if isinstance(config, str):  # the config's text; a Path: where CONFIG_FILE points, as it is
        text, config = config, tmp_path / "config.yaml"
        config.write_text(text)
    if config is not None:
        env["CONFIG_FILE"] = str(config)
    done = subprocess.run(["/bin/sh", "-c", PREPARE_SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    return done, state


CACHE_SECRET = "cache-secret-'quoted' \\-\"0123456789"  # the script must quote it for YAML
# What the pod's secretKeyRef would give the script.
SECRETS = {str({"secretKeyRef": {"name": "gitea-runner-cache", "key": "secret"}}): CACHE_SECRET}


def last_line(done: subprocess.CompletedProcess[str]) -> str:
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("binary", ["act_runner", "gitea-runner"])
def test_the_runners_credential_is_where_the_entrypoint_looks_and_nothing_else_is_asked(
    tmp_path: Path, binary: str
) -> None:
    done, state = run(tmp_path, binary=binary)
    assert done.returncode == 0, done
    assert (state / ".runner").read_text() == CREDENTIAL
    assert last_line(done) == "runner builders-7-ab12 registered by the controller: its credential is in .runner"
    assert "runner-own-token" not in done.stdout + done.stderr
    # The daemon rewrites it when its labels differ (act_runner's SaveRegistration), as the runner's user.
    assert (state / ".runner").stat().st_mode & 0o777 == 0o600


def test_a_state_file_named_by_runner_state_file_gets_the_credential(tmp_path: Path) -> None:
    done, state = run(tmp_path, RUNNER_STATE_FILE="state.json")
    assert done.returncode == 0, done
    assert (state / "state.json").read_text() == CREDENTIAL and not (state / ".runner").exists()


def test_a_credential_it_cannot_read_fails_saying_so(tmp_path: Path) -> None:
    done, state = run(tmp_path, credential=None)
    assert done.returncode == 1, done
    assert last_line(done) == "registration failed: cannot write the runner's credential to .runner"
    assert not (state / ".runner").exists()


def test_an_image_without_either_runner_binary_fails_saying_so(tmp_path: Path) -> None:
    done, _ = run(tmp_path, binary="")
    assert done.returncode == 1, done
    assert last_line(done) == "registration failed: the image has neither act_runner nor gitea-runner on its PATH"


CA = "-----BEGIN CERTIFICATE-----\ngrs test ca\n-----END CERTIFICATE-----"


def test_the_ca_certificates_are_in_the_bundle_the_runner_trusts(tmp_path: Path) -> None:
    """The image's own bundle, then ours: public CAs keep working, and Gitea's CA is trusted."""
    done, state = run(tmp_path, egress=Egress(ca_pem=CA))
    assert done.returncode == 0, done
    bundle = (state / ".ca" / "ca-certificates.crt").read_text()
    system = Path("/etc/ssl/certs/ca-certificates.crt")
    assert bundle.endswith(CA + "\n") and (not system.is_file() or bundle.startswith(system.read_text()))
    assert (state / ".ca" / "extra-ca.crt").read_text() == CA + "\n"


CACHE = Egress(cache=RunnerCache("http://cache.ci.svc:8088/", secret=CACHE_SECRET))
OURS = {"enabled": True, "external_server": "http://cache.ci.svc:8088/", "external_secret": CACHE_SECRET}
PINNED = {"fetch_interval": "1s", "fetch_interval_max": "1s"}


@pytest.mark.parametrize(
    ("config", "merged"),
    [
        (None, {"runner": PINNED, "cache": OURS}),
        ("log:\n  level: info\n", {"log": {"level": "info"}, "runner": PINNED, "cache": OURS}),
        # a block keeps its other keys and its indentation; ours replace its enabled and server
        (
            "runner:\n    capacity: 1\n    fetch_interval: 30s\ncache:   # the cache\n    enabled: false\n"
            "    dir: /cache\n    external_server: http://elsewhere/\n\n# done\ncontainer:\n    network: host\n",
            {"runner": {"capacity": 1, **PINNED}, "cache": {**OURS, "dir": "/cache"}, "container": {"network": "host"}},
        ),
        ("runner:\n  capacity: 2\ncache:\n", {"runner": {"capacity": 2, **PINNED}, "cache": OURS}),
        ("cache: {enabled: false}\nrunner: {capacity: 3}\n", {"cache": OURS, "runner": PINNED}),
        # written on Windows: the block is still found, and its keys replaced rather than doubled
        ("cache:\r\n  enabled: false\r\n  dir: /c\r\n", {"cache": {**OURS, "dir": "/c"}, "runner": PINNED}),
    ],
    ids=["no-config", "no-cache-section", "block", "empty-block", "flow", "crlf"],
)
def test_the_runner_gets_its_config_with_the_shared_cache_merged_in(
    tmp_path: Path, config: str | None, merged: dict[str, object]
) -> None:
    done, state = run(tmp_path, egress=CACHE, config=config)
    assert done.returncode == 0, done
    written = state / ".grs" / "config.yaml"
    assert yaml.safe_load(written.read_text()) == merged
    assert written.stat().st_mode & 0o077 == 0, "only the runner's user reads the secret"
    assert CACHE_SECRET not in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("config", "merged"),
    [
        (None, {"runner": {"fetch_interval": "3s", "fetch_interval_max": "3s"}}),
        # act_runner 1.x's generated config: the idle backoff up to 60 s goes, the rest stays
        (
            "log:\n  level: info\nrunner:\n  file: .runner\n  fetch_timeout: 5s\n  fetch_interval: 2s\n"
            "  fetch_interval_max: 60s\n  labels:\n    - \"ubuntu-latest:docker://node:20\"\ncache:\n  enabled: true\n",
            {
                "log": {"level": "info"},
                "runner": {"file": ".runner", "fetch_timeout": "5s", "fetch_interval": "3s",
                           "fetch_interval_max": "3s", "labels": ["ubuntu-latest:docker://node:20"]},
                "cache": {"enabled": True},
            },
        ),
    ],
    ids=["no-config", "generated-config"],
)  # fmt: skip
def test_without_a_cache_server_the_runner_polls_at_the_groups_fetch_interval_without_backoff(
    tmp_path: Path, config: str | None, merged: dict[str, object]
) -> None:
    """The group's fetchInterval (here 3s) pins fetch_interval and fetch_interval_max, so an idle warm runner
    keeps asking Gitea at that pace instead of backing off to act_runner's 60 s; the cache is the image's."""
    done, state = run(tmp_path, config=config, fetch_interval="3s")
    assert done.returncode == 0, done
    assert yaml.safe_load((state / ".grs" / "config.yaml").read_text()) == merged


def test_a_cache_server_that_takes_no_secret_gets_none(tmp_path: Path) -> None:
    done, state = run(tmp_path, egress=Egress(cache=RunnerCache("http://cache:8088/")))
    assert done.returncode == 0, done
    assert yaml.safe_load((state / ".grs" / "config.yaml").read_text()) == {
        "runner": PINNED,
        "cache": {"enabled": True, "external_server": "http://cache:8088/"},
    }


@pytest.mark.parametrize("egress", [CACHE, DIRECT], ids=["cache", "no-cache"])
def test_a_config_file_it_cannot_read_fails_the_runner_saying_which(tmp_path: Path, egress: Egress) -> None:
    missing = tmp_path / "mounted" / "config.yaml"  # e.g. a ConfigMap the Pod does not mount
    done, state = run(tmp_path, egress=egress, config=missing)
    assert done.returncode == 1, done
    assert last_line(done) == f"registration failed: cannot read the runner config {missing}"
    assert not (state / ".runner").exists()
