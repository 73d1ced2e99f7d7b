"""The register init container's script, run by a real /bin/sh against a stand-in `act_runner`.

The stand-in does what act_runner's `register` does in each case (writes `.runner`, or logs Gitea's
refusal, or waits forever on an unreachable Gitea), so the script's exit codes and last lines (the
Pod's termination message, shown in the group's status) are checked for real.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from reconciler.egress import DIRECT, Egress
from reconciler.manifests import REGISTER_SCRIPT
from reconciler.runner_cache import RunnerCache

TOKEN = "registration-token-0123456789abcdef0123"
FAKES = {
    "ok": 'for a; do [ "$prev" = --name ] && name=$a; prev=$a; done\n'
    'echo "INFO Runner registered successfully."\nprintf \'{"name":"%s"}\' "$name" > .runner\n',
    "refused": "echo 'Error: poller: cannot register new runner: invalid_argument: "
    "runner registration token not found'\nexit 1\n",
    "hangs": "echo 'Cannot ping the Gitea instance server'\nexec sleep 60\n",
    "silent": "exit 0\n",
    # registers, and keeps the config it was given (as act_runner reads it) for the test to look at
    "config": 'for a; do [ "$prev" = --config ] && cat "$a" > registered-with.yaml; prev=$a; done\n'
    'echo "{}" > .runner\n',
    # registers only if the CA bundle its TLS client is pointed at holds the test CA
    "tls": 'grep -q "grs test ca" "$SSL_CERT_FILE" || { echo "x509: certificate signed by unknown authority"\n'
    "exit 1; }\n"
    'echo "INFO Runner registered successfully."\necho "{}" > .runner\n',
}


def run(
    tmp_path: Path,
    behaviour: str,
    *,
    timeout: int = 30,
    binary: str = "act_runner",
    egress: Egress = DIRECT,
    config: str | Path | None = None,
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run the script with a stand-in `binary` (act_runner 0.x's name; 1.x's is gitea-runner; "": none)
    on a PATH of nothing else but the tools the script uses."""
    bin_dir, state = tmp_path / "bin", tmp_path / "data"
    bin_dir.mkdir()
    state.mkdir()
    if binary:
        fake = bin_dir / binary
        fake.write_text("#!/bin/sh\nprev=\n" + FAKES[behaviour])
        fake.chmod(0o755)
    for tool in ("timeout", "cat", "rm", "grep", "sleep", "mkdir", "awk"):
        (bin_dir / tool).symlink_to(shutil.which(tool) or f"/usr/bin/{tool}")
    env = {
        "PATH": str(bin_dir),
        "GRS_STATE_DIR": str(state),
        "GRS_REGISTER_TIMEOUT": str(timeout),
        "GITEA_INSTANCE_URL": "http://gitea.invalid:3000",
        "GITEA_RUNNER_NAME": "builders-7-ab12",
        "GITEA_RUNNER_LABELS": "k8s",
        "GITEA_RUNNER_REGISTRATION_TOKEN": TOKEN,
        **{
            e["name"]: e["value"] if "value" in e else SECRETS[str(e["valueFrom"])]
            for e in egress.register_env(str(state))
        },
    }
    if isinstance(config, str):  # the config's text; a Path: where CONFIG_FILE points, as it is
        text, config = config, tmp_path / "config.yaml"
        config.write_text(text)
    if config is not None:
        env["CONFIG_FILE"] = str(config)
    done = subprocess.run(["/bin/sh", "-c", REGISTER_SCRIPT], env=env, capture_output=True, text=True, timeout=60)
    return done, state


CACHE_SECRET = "cache-secret-'quoted' \\-\"0123456789"  # the script must quote it for YAML
# What the pod's secretKeyRef would give the script.
SECRETS = {str({"secretKeyRef": {"name": "gitea-runner-cache", "key": "secret"}}): CACHE_SECRET}


def last_line(done: subprocess.CompletedProcess[str]) -> str:
    return done.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("binary", ["act_runner", "gitea-runner"])
def test_a_registration_leaves_the_state_file_and_exits_0(tmp_path: Path, binary: str) -> None:
    done, state = run(tmp_path, "ok", binary=binary)
    assert done.returncode == 0, done
    assert (state / ".runner").read_text() == '{"name":"builders-7-ab12"}'
    assert last_line(done) == "registered builders-7-ab12"
    assert TOKEN not in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("behaviour", "said"),
    [
        ("refused", "registration failed: Gitea refused the registration token"),
        ("hangs", "registration failed: no answer from http://gitea.invalid:3000 within 1s"),
        ("silent", "registration failed: act_runner register exited with 0 and wrote no .runner"),
    ],
)
def test_a_failed_registration_exits_1_and_says_why_last(tmp_path: Path, behaviour: str, said: str) -> None:
    done, state = run(tmp_path, behaviour, timeout=1)
    assert done.returncode == 1, done
    assert last_line(done) == said
    assert not (state / ".runner").exists()
    assert TOKEN not in done.stdout + done.stderr


def test_an_image_without_either_runner_binary_fails_saying_so(tmp_path: Path) -> None:
    done, _ = run(tmp_path, "ok", binary="")
    assert done.returncode == 1, done
    assert last_line(done) == "registration failed: the image has neither act_runner nor gitea-runner on its PATH"


CA = "-----BEGIN CERTIFICATE-----\ngrs test ca\n-----END CERTIFICATE-----"


def test_the_ca_certificates_are_in_the_bundle_the_runner_trusts_before_it_registers(tmp_path: Path) -> None:
    """The image's own bundle, then ours: public CAs keep working, and Gitea's CA is trusted."""
    done, state = run(tmp_path, "tls", egress=Egress(ca_pem=CA))
    assert done.returncode == 0, done
    bundle = (state / ".ca" / "ca-certificates.crt").read_text()
    system = Path("/etc/ssl/certs/ca-certificates.crt")
    assert bundle.endswith(CA + "\n") and (not system.is_file() or bundle.startswith(system.read_text()))
    assert (state / ".ca" / "extra-ca.crt").read_text() == CA + "\n"


def test_without_the_ca_the_same_registration_is_refused(tmp_path: Path) -> None:
    """The stand-in above does check: with no CA given, it refuses as act_runner would."""
    done, _ = run(tmp_path, "tls", egress=Egress(proxy=(("HTTPS_PROXY", "http://proxy.invalid:3128"),)))
    assert done.returncode == 1, done
    assert "x509" in done.stdout


CACHE = Egress(cache=RunnerCache("http://cache.ci.svc:8088/", secret=CACHE_SECRET))
OURS = {"enabled": True, "external_server": "http://cache.ci.svc:8088/", "external_secret": CACHE_SECRET}


@pytest.mark.parametrize(
    ("config", "merged"),
    [
        (None, {"cache": OURS}),
        ("log:\n  level: info\n", {"log": {"level": "info"}, "cache": OURS}),
        # a block keeps its other keys and its indentation; ours replace its enabled and server
        (
            "runner:\n    capacity: 1\ncache:   # the cache\n    enabled: false\n    dir: /cache\n"
            "    external_server: http://elsewhere/\n\n# done\ncontainer:\n    network: host\n",
            {"runner": {"capacity": 1}, "cache": {**OURS, "dir": "/cache"}, "container": {"network": "host"}},
        ),
        ("runner:\n  capacity: 2\ncache:\n", {"runner": {"capacity": 2}, "cache": OURS}),
        ("cache: {enabled: false}\nrunner: {capacity: 3}\n", {"cache": OURS, "runner": {"capacity": 3}}),
        # written on Windows: the block is still found, and its keys replaced rather than doubled
        ("cache:\r\n  enabled: false\r\n  dir: /c\r\n", {"cache": {**OURS, "dir": "/c"}}),
    ],
    ids=["no-config", "no-cache-section", "block", "empty-block", "flow", "crlf"],
)
def test_the_runner_registers_with_its_config_and_the_shared_cache_merged_in(
    tmp_path: Path, config: str | None, merged: dict[str, object]
) -> None:
    done, state = run(tmp_path, "config", egress=CACHE, config=config)
    assert done.returncode == 0, done
    written = state / ".grs" / "config.yaml"
    assert yaml.safe_load(written.read_text()) == merged
    assert (state / "registered-with.yaml").read_text() == written.read_text(), "registered with the merged config"
    assert written.stat().st_mode & 0o077 == 0, "only the runner's user reads the secret"
    assert CACHE_SECRET not in done.stdout + done.stderr


def test_a_cache_server_that_takes_no_secret_gets_none(tmp_path: Path) -> None:
    done, state = run(tmp_path, "config", egress=Egress(cache=RunnerCache("http://cache:8088/")))
    assert done.returncode == 0, done
    assert yaml.safe_load((state / ".grs" / "config.yaml").read_text()) == {
        "cache": {"enabled": True, "external_server": "http://cache:8088/"}
    }


def test_a_config_file_it_cannot_read_fails_the_registration_saying_which(tmp_path: Path) -> None:
    missing = tmp_path / "mounted" / "config.yaml"  # e.g. a ConfigMap the Pod does not mount
    done, state = run(tmp_path, "config", egress=CACHE, config=missing)
    assert done.returncode == 1, done
    assert last_line(done) == f"registration failed: cannot read the runner config {missing}"
    assert not (state / ".runner").exists()
