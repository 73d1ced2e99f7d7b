"""What `deploy/release.sh --registry` puts in a registry and what the chart's mirror value makes its Pods
pull are the same images: `release.sh images REGISTRY` (the script's own list) against `helm template`
with every optional part on (ci/full-values.yaml) and `global.imageRegistry=REGISTRY`.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

import yaml

from tests.e2e.helm_release import CHART, ROOT
from tests.kube_cluster import peer

MIRROR = "mirror.local:5000"
FULL = CHART / "ci" / "full-values.yaml"


def _images(node: Any) -> set[str]:
    """Every container image anywhere in the rendered objects (Pods, Jobs, workloads of any kind)."""
    if isinstance(node, list):
        return set().union(*(_images(n) for n in node)) if node else set()
    if not isinstance(node, dict):
        return set()
    found = {c["image"] for key in ("containers", "initContainers") for c in node.get(key) or ()}
    return found.union(*(_images(v) for v in node.values()))


def rendered(*sets: str) -> set[str]:
    args = [str(peer("helm")), "template", "grs", str(CHART), "-n", "ci", "--kube-version", "1.36.3", "-f", str(FULL)]
    for s in sets:
        args += ["--set", s]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return _images([d for d in yaml.safe_load_all(done.stdout) if d])


def released(*args: str) -> set[str]:
    env = {**os.environ, "HELM": str(peer("helm"))}
    script = ROOT / "deploy" / "release.sh"
    done = subprocess.run(["bash", str(script), "images", *args], capture_output=True, text=True, check=False, env=env)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


def test_the_mirror_value_renders_exactly_the_images_the_release_copies() -> None:
    """Every part on and `global.imageRegistry` set: the Pods pull the images `--registry` pushed there and
    no other (none left on Docker Hub or ghcr.io, none the release never copied)."""
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    provided = released(MIRROR)
    assert f"{MIRROR}/bpg-pw/gitea-runner-scaler:{version}" in provided
    assert rendered(f"global.imageRegistry={MIRROR}") == provided
    # And by default the same images, each from its own registry: what `--registry` copies from.
    assert rendered() == released()


def test_the_image_value_moves_only_the_charts_own_image() -> None:
    """`image.registry` (the registry the tag's release publishes to) moves our image only; Redis's and the
    cache server's stay where they are, as the published release leaves them."""
    moved = rendered(f"image.registry={MIRROR}")
    ours = {ref for ref in moved if ref.startswith(f"{MIRROR}/")}
    assert {ref.removeprefix(f"{MIRROR}/").rsplit(":", 1)[0] for ref in ours} == {"bpg-pw/gitea-runner-scaler"}
    assert moved - ours == {ref for ref in rendered() if not ref.startswith("ghcr.io/")}
