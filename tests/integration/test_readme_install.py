"""The README's quick start, its commands taken from the README itself (a drift fails this), run with bash
from the repository's root against a real API server of its own and a registry on this machine.

Step 0 (`deploy/release.sh --registry "$REGISTRY"`) runs with a recording stand-in for Docker (no engine
here): the builds and pushes it asks for are checked, and the chart goes into the registry for real. Step
3's `helm install` then installs from that registry as a server-side dry run (the API server has no node
to run hook Jobs on); steps 1, 2 and 4 run as written. The README's own instruction for an HTTP registry
(`--plain-http` on steps 0 and 3) is followed. That the images run and the quick start's job goes green:
tests/e2e/test_helm.py follows the same commands on a real node, with a Docker stand-in that pushes
images the harness built from the same Dockerfile.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from reconciler.kube.crd import crd
from reconciler.model.labels import DEFAULT_LABELS, label_name
from tests.e2e.helm_release import ROOT, VERSION, helm_home
from tests.kube_cluster import KubeCluster, api_request, apply_crd, peer
from tests.node.registry import Registry
from tests.readme import plain_http, quick_start, step

pytestmark = pytest.mark.kube
ENV = {"GITEA_URL": "https://gitea.example.net:3000", "GITEA_ORG": "widgets", "GITEA_API_TOKEN": "t0ken-for-readme"}
DOCKER_STUB = '#!/bin/sh\nprintf "%s\\n" "$*" >> "$DOCKER_LOG"\n'


@dataclass
class Run:
    """The quick start run: what each step printed and what the Docker stand-in was asked."""

    outputs: list[str]
    docker: list[str]
    cluster: KubeCluster
    registry: str


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    work = tmp_path_factory.mktemp("readme")
    (work / "kube").mkdir()
    cluster = KubeCluster(work / "kube")
    registry = Registry(work / "registry", host="127.0.0.1")
    cluster.start()
    try:
        apply_crd(cluster, crd())
        registry.start()
        yield Run(_run(work, cluster, registry.address), _docker_calls(work), cluster, registry.address)
    finally:
        registry.stop()
        cluster.stop()


def _run(work: Path, cluster: KubeCluster, registry: str) -> list[str]:
    """Each command of the quick start in turn, as bash runs it in the repository's root."""
    bin_dir = work / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(DOCKER_STUB)
    (bin_dir / "docker").chmod(0o755)
    (bin_dir / "helm").symlink_to(peer("helm"))
    env = {
        **os.environ,
        **helm_home(work / "helm"),
        **ENV,
        "REGISTRY": registry,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "KUBECONFIG": str(cluster.kubeconfig),
        "DOCKER_LOG": str(work / "docker.log"),
        "DIST": str(work / "dist"),
    }
    outputs = []
    for command in quick_start()[0]:
        command = plain_http(command)
        if command.startswith("helm install"):
            command += " --dry-run=server"
        done = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        outputs.append(done.stdout)
    return outputs


def _docker_calls(work: Path) -> list[str]:
    log = work / "docker.log"
    return log.read_text().splitlines() if log.exists() else []


def test_the_quick_start_is_five_commands_numbered_as_it_counts_them() -> None:
    commands, section = quick_start()
    assert [step(c) for c in commands] == [0, 1, 2, 3, 4], commands
    assert "5. Push `deploy/quickstart/hello.yaml`" in section
    assert "five steps" in section


def test_step_0_builds_and_pushes_every_image_the_chart_pulls_and_prints_step_3(ran: Run) -> None:
    """The image built from the repository's root and pushed, the chart's other images copied, each under
    the name `release.sh images` gives (the one the mirror value renders); the install line it prints is
    the README's step 3, word for word but for the values."""
    registry = ran.registry
    own = f"{registry}/bpg-pw/gitea-runner-scaler:{VERSION}"
    builds = [c for c in ran.docker if c.startswith("build ")]
    assert len(builds) == 1 and builds[0].endswith(f"-t {own} {ROOT}"), ran.docker
    pushed = {c.split()[-1] for c in ran.docker if c.startswith("push ")}
    listed = subprocess.run(
        ["bash", str(ROOT / "deploy" / "release.sh"), "images", registry],
        env={**os.environ, "HELM": str(peer("helm"))},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert pushed == set(listed), ran.docker
    printed = " ".join(ran.outputs[0].split("Install it")[1].split("\n", 1)[1].replace("\\\n", " ").split())
    step3 = next(c for c in quick_start()[0] if c.startswith("helm install")).split("  #")[0]
    step3 = " ".join(step3.replace("$REGISTRY", registry).replace('"' + registry + '"', registry).split())
    assert printed == step3.replace(f"--version {VERSION}", f"--version {VERSION} --plain-http"), printed


def test_step_3_installs_the_chart_from_where_step_0_pushed_it(ran: Run) -> None:
    """`helm install oci://$REGISTRY/...` finds the chart there and renders it for the cluster, with every
    image from the registry and the default Gitea the reader named."""
    out = ran.outputs[3]
    assert "STATUS: pending-install" in out, out
    manifest = out.split("MANIFEST:", 1)[1].split("NOTES:", 1)[0]
    images = set(re.findall(r"^\s+image: (\S+)$", manifest, flags=re.MULTILINE))
    assert images and all(i.startswith(f"{ran.registry}/") for i in images), images
    assert 'value: "https://gitea.example.net:3000"' in manifest


def test_steps_1_2_and_4_leave_the_namespace_the_token_and_the_group(ran: Run) -> None:
    status, ns = api_request(ran.cluster, "GET", "/api/v1/namespaces/ci")
    assert status == 200, ns
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    status, secret = api_request(ran.cluster, "GET", "/api/v1/namespaces/ci/secrets/gitea-runner-token")
    assert status == 200, secret
    assert base64.b64decode(secret["data"]["token"]).decode() == ENV["GITEA_API_TOKEN"]
    status, group = api_request(
        ran.cluster, "GET", "/apis/gitea.bpg.pw/v1alpha1/namespaces/ci/runnergroups/quick-start"
    )
    assert status == 200, group
    spec = group["spec"]
    assert (spec["scope"], spec["org"], spec["gitea"]["url"]) == ("org", "widgets", ENV["GITEA_URL"]), json.dumps(spec)
    assert spec["authToken"]["secretRef"] == {"name": "gitea-runner-token", "key": "token"}


def test_step_5s_workflow_runs_on_a_label_the_group_serves() -> None:
    """The group names no labels, so it serves act_runner's defaults: hello.yaml's `runs-on` is one."""
    group = yaml.safe_load((ROOT / "deploy" / "quickstart" / "runnergroup.yaml").read_text())
    assert "labels" not in group["spec"] and "defaultLabels" not in group["spec"]
    workflow = yaml.safe_load((ROOT / "deploy" / "quickstart" / "hello.yaml").read_text())
    assert {job["runs-on"] for job in workflow["jobs"].values()} <= {label_name(x) for x in DEFAULT_LABELS}
