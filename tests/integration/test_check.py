"""The real `reconciler check` command (the console script) against a REAL kube-apiserver, reading
RunnerGroup statuses written as the controller writes them (PUT .../status of `desired_status`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from reconciler.decide.gitea_health import poll_failed
from tests.integration.test_chart_notes import notes
from tests.integration.test_reconciler import RG, create_group
from tests.integration.test_reconciler import namespace as new_namespace
from tests.kube_cluster import KubeCluster, api_request
from tests.unit.test_check import status

pytestmark = pytest.mark.kube
COMMAND = Path(sys.executable).parent / "reconciler"
URL = "http://gitea.invalid:3000"
TOO_OLD = poll_failed(status=404, error="HTTP 404 Not Found", where="org acme", version="1.24.6")


@pytest.fixture
def namespace(kube: KubeCluster) -> str:
    """A namespace of this test's own (with the groups' token Secret)."""
    return new_namespace(kube)


def write_status(kube: KubeCluster, ns: str, name: str, written: dict[str, Any]) -> None:
    """PUT the group's status subresource, as the controller's status write lands."""
    path = f"{RG.format(ns=ns)}/{name}"
    _, body = api_request(kube, "GET", path)
    body["status"] = written
    code, answer = api_request(kube, "PUT", f"{path}/status", body)
    assert code == 200, answer


def run(kube: KubeCluster, *args: str, kubeconfig: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {"PATH": os.environ["PATH"], "GRS_KUBECONFIG": str(kubeconfig or kube.kubeconfig), **env}
    return subprocess.run(
        [str(COMMAND), "check", *args], capture_output=True, text=True, env=environ, timeout=60, check=False
    )


def test_check_prints_a_line_per_group_and_exits_1_until_every_group_is_ready(
    kube: KubeCluster, namespace: str
) -> None:
    ns = namespace
    for name in ("ready", "too-old", "new"):
        create_group(kube, ns, name)
    write_status(kube, ns, "ready", status())
    write_status(kube, ns, "too-old", status(gitea=TOO_OLD))
    done = run(kube, "--namespace", ns)
    print(done.stdout)  # what docs/troubleshooting.md shows
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == [
        f"{ns}/new: NOT READY: no status yet: the reconciler has not served this group (is it running, and does it"
        " serve this namespace?)",
        f"{ns}/ready: Gitea {URL} reachable; token proves org acme; runners admitted; Ready",
        f"{ns}/too-old: NOT READY: GiteaTooOld: GiteaReachable: needs Gitea 1.25 or newer; this one is 1.24.6: older"
        " ones have no jobs API to poll, and answer it 404",
        "1 of 3 RunnerGroup(s) Ready",
    ]
    # The namespaces it serves by default are the reconciler's own (GRS_WATCH_NAMESPACE).
    assert run(kube, GRS_WATCH_NAMESPACE=ns).stdout == done.stdout

    write_status(kube, ns, "too-old", status())
    write_status(kube, ns, "new", status())
    done = run(kube, "-n", ns)
    assert done.returncode == 0, done.stdout
    assert done.stdout.splitlines()[-1] == "3 of 3 RunnerGroup(s) Ready"


def test_check_waits_for_a_group_to_become_ready(kube: KubeCluster, namespace: str) -> None:
    """With --wait, a group the controller serves meanwhile ends Ready: exit 0. The status is written once
    the command has said it waits (it read the group not Ready), so the wait is what is tested."""
    create_group(kube, namespace, "runners")
    environ = {"PATH": os.environ["PATH"], "GRS_KUBECONFIG": str(kube.kubeconfig), "GRS_WATCH_NAMESPACE": namespace}
    with subprocess.Popen(
        [str(COMMAND), "check", "--wait", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environ
    ) as proc:
        assert proc.stderr is not None
        said = proc.stderr.readline()
        assert said == "reconciler check: waiting up to 60 s for every RunnerGroup to be Ready\n"
        write_status(kube, namespace, "runners", status())
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert (
        out.splitlines()[0]
        == f"{namespace}/runners: Gitea {URL} reachable; token proves org acme; runners admitted; Ready"
    )


def test_check_says_when_there_is_no_group(kube: KubeCluster, namespace: str) -> None:
    done = run(kube, "--namespace", namespace)
    assert (done.returncode, done.stdout) == (
        1,
        f"no RunnerGroup in namespace(s) {namespace}: create one (docs/runnergroups.md)\n",
    )


def test_check_exits_2_naming_what_the_api_refused_and_never_the_token(
    kube: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    account = {"metadata": {"name": "nobody"}}
    assert api_request(kube, "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", account)[0] == 201
    code, body = api_request(kube, "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/nobody/token", {"spec": {}})
    assert code == 201, body
    token = body["status"]["token"]
    done = run(
        kube, kubeconfig=kube.write_kubeconfig_for(tmp_path / "nobody", token=token), GRS_WATCH_NAMESPACE=namespace
    )
    assert done.returncode == 2 and not done.stdout
    assert done.stderr.startswith(
        f"reconciler check: cannot list the RunnerGroups in namespace {namespace}: HTTP 403 Forbidden: "
    ), done.stderr
    assert token not in done.stderr
    # No API server at all: where it looked and why, exit 2.
    missing = run(kube, kubeconfig=tmp_path / "absent")
    assert missing.returncode == 2
    assert f"reconciler check: cannot load the Kubernetes configuration ({tmp_path / 'absent'}): " in missing.stderr


@pytest.mark.parametrize("sets", [(), ("runnerNamespaces={ci,qa}",), ("rbac.clusterWide=true",)], ids=str)
def test_the_install_notes_end_with_helm_test_as_the_way_to_see_whether_it_works(
    kube: KubeCluster, tmp_path: Path, sets: tuple[str, ...]
) -> None:
    said = notes(kube, tmp_path / "helm", *sets).rstrip("\n").splitlines()
    assert said[-1] == "     helm test runners -n ci --logs"
    assert said[-2].startswith("Whether it works (Gitea reachable and new enough")
