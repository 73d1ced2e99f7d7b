"""deploy/release.sh: one version source, and the chart pushed as an OCI artifact that Helm installs from.

The image half (`docker buildx` for two platforms) needs a Docker engine with QEMU, which CI here does
not run; the node test (tests/e2e/test_helm.py) installs from a registry holding the image and the chart.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.kube_cluster import peer
from tests.node.registry import Registry

ROOT = Path(__file__).resolve().parents[2]
RELEASE = ROOT / "deploy" / "release.sh"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def _run(script: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(script), *args], env={**os.environ, **env}, capture_output=True, text=True, check=False
    )


def test_the_version_is_pyproject_tomls_and_a_tag_must_name_it() -> None:
    assert _run(RELEASE, "version").stdout == f"{VERSION}\n"
    assert _run(RELEASE, "check-tag", f"v{VERSION}").returncode == 0
    refused = _run(RELEASE, "check-tag", "v99.0.0")
    assert refused.returncode == 1 and f"tag v99.0.0 is not v{VERSION}" in refused.stderr


@pytest.mark.parametrize(
    ("path", "old", "new"),
    [
        pytest.param("deploy/helm/gitea-runner-scaler/Chart.yaml", "\nversion: ", "\nversion: 9", id="chart-version"),
        pytest.param("deploy/helm/gitea-runner-scaler/Chart.yaml", 'appVersion: "', 'appVersion: "9', id="app-version"),
        pytest.param("Dockerfile", "ARG VERSION=", "ARG VERSION=9", id="dockerfile"),
    ],
)
def test_a_version_that_disagrees_stops_the_release(tmp_path: Path, path: str, old: str, new: str) -> None:
    tree = tmp_path / "tree"
    for part in ("pyproject.toml", "Dockerfile", "deploy/release.sh", "deploy/helm"):
        (tree / part).parent.mkdir(parents=True, exist_ok=True)
        copy = shutil.copytree if (ROOT / part).is_dir() else shutil.copy
        copy(ROOT / part, tree / part)
    text = (tree / path).read_text()
    assert old in text
    (tree / path).write_text(text.replace(old, new, 1))
    done = _run(tree / "deploy" / "release.sh", "chart", "127.0.0.1:1", HELM="/bin/false")
    assert done.returncode == 1 and "versions disagree" in done.stderr and "9" in done.stderr


def test_the_chart_goes_to_an_oci_registry_where_helm_finds_it(tmp_path: Path) -> None:
    registry = Registry(tmp_path / "registry", host="127.0.0.1")
    registry.start()
    try:
        helm_home = {f"HELM_{k}_HOME": str(tmp_path / k.lower()) for k in ("CACHE", "CONFIG", "DATA")}
        pushed = _run(
            RELEASE, "chart", registry.address, "--plain-http", HELM=str(peer("helm")), DIST=str(tmp_path), **helm_home
        )
        assert pushed.returncode == 0, pushed.stderr
        reference = f"oci://{registry.address}/bpg-pw/charts/gitea-runner-scaler"
        shown = subprocess.run(
            [str(peer("helm")), "show", "chart", reference, "--version", VERSION, "--plain-http"],
            env={**os.environ, **helm_home},
            capture_output=True,
            text=True,
            check=False,
        )
        assert shown.returncode == 0, shown.stderr
        assert f"\nversion: {VERSION}\n" in shown.stdout and f"appVersion: {VERSION}\n" in shown.stdout
    finally:
        registry.stop()
