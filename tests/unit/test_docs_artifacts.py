"""The README, the changelog, the docs and the chart's NOTES.txt name no artifact the repository does not
build or hold: repository paths and file names exist, relative links resolve, chart and image references
are the ones deploy/release.sh and the release workflow publish (owner, names, version), and every
`deploy/release.sh` subcommand they use is one the script has.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "gitea-runner-scaler"
DOCS = [
    ROOT / "README.md",
    ROOT / "CHANGELOG.md",
    *sorted((ROOT / "docs").glob("*.md")),
    CHART / "templates" / "NOTES.txt",
]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
CHART_NAME = yaml.safe_load((CHART / "Chart.yaml").read_text())["name"]
IMAGE = yaml.safe_load((CHART / "values.yaml").read_text())["image"]["repository"]  # owner/name
OWNER = IMAGE.split("/")[0]
# The registry a tag's release publishes to by default (the workflow's `vars.RELEASE_REGISTRY || '...'`).
PUBLISHED = re.findall(r"RELEASE_REGISTRY \|\| '([^']+)'", (ROOT / ".gitea" / "workflows" / "release.yaml").read_text())
# Named in the docs, and not the repository's to build: each with where it lives.
NOT_OURS = {
    ".gitea/workflows/hello.yaml": "the quick start's workflow, in the user's repository",
    "app.ini": "Gitea's configuration",
    "hosts.toml": "containerd's configuration of a registry, on the nodes",
    "sandbox.json": "written by tests/e2e/sandbox.sh up",
}

REPO_PATH = re.compile(r"(?<![\w./$-])((?:\.gitea|\.ci|deploy|docs|tests|reconciler|webhook_scaler)/[\w./*-]*)")
FILE_NAME = re.compile(r"`([\w.-]+\.(?:ya?ml|py|sh|json|md|txt|toml|ini|tpl))`")
LINK = re.compile(r"\]\(([^)#\s:]+)(?:#[^)]*)?\)")
OCI = re.compile(r"oci://([^\s`\"')]+)")
OUR_IMAGE = re.compile(rf"(?<![\w./-])([\w.:$<>-]+)/{re.escape(OWNER)}/([\w.-]+)(?::([\w.<>$-]+))?")
OCI_VERSION = re.compile(r"oci://\S+\s+--version\s+(\S+)")
RELEASE_SH = re.compile(r"deploy/release\.sh\s+([^\s`\"]+)")


def _tree() -> set[str]:
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return {Path(p).name for p in listed}


def _placeholder(host: str) -> bool:
    """A registry the reader chooses (`$REGISTRY`, REGISTRY, registry.example.com, <host>)."""
    return any(mark in host for mark in ("$", "REGISTRY", "example", "<", "mirror", "…", "..."))


def _subcommands() -> set[str]:
    script = (ROOT / "deploy" / "release.sh").read_text()
    return set(re.findall(r"^  ([\w-]+)\)", script, flags=re.MULTILINE))


def violations(text: str, where: Path) -> list[str]:
    """What `text` (a page at `where`) names that the repository does not build or hold."""
    found: list[str] = []
    for match in REPO_PATH.finditer(text):
        path = match.group(1).rstrip(".,:;")
        exists = any(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()
        if not exists and path not in NOT_OURS:
            found.append(f"{where.name}: no {path} in the repository")
    names = _tree()
    for match in FILE_NAME.finditer(text):
        if match.group(1) not in names and match.group(1) not in NOT_OURS:
            found.append(f"{where.name}: no file {match.group(1)} in the repository")
    for match in LINK.finditer(text):
        if not (where.parent / match.group(1)).exists():
            found.append(f"{where.name}: the link {match.group(1)} leads nowhere")
    found += _references(text, where)
    for match in RELEASE_SH.finditer(text):
        if match.group(1) not in _subcommands():
            found.append(f"{where.name}: deploy/release.sh has no subcommand {match.group(1)}")
    return found


def _references(text: str, where: Path) -> list[str]:
    """Chart and image references: the owner, names, registry and version the release publishes."""
    found: list[str] = []
    for match in OCI.finditer(text):
        host, _, path = match.group(1).partition("/")
        if _placeholder(host) and not path:
            continue
        if path not in (f"{OWNER}/charts", f"{OWNER}/charts/{CHART_NAME}"):
            found.append(f"{where.name}: oci://{match.group(1)} is not a chart the release pushes")
        if not _placeholder(host) and host not in PUBLISHED:
            found.append(f"{where.name}: oci://{match.group(1)}: the release publishes to {PUBLISHED}, not {host}")
    for match in OUR_IMAGE.finditer(text):
        host, name, tag = match.groups()
        if name == "charts":
            continue
        if f"{OWNER}/{name}" != IMAGE:
            found.append(f"{where.name}: {match.group(0)} is not the image the release builds ({IMAGE})")
        if not _placeholder(host) and host not in PUBLISHED:
            found.append(f"{where.name}: {match.group(0)}: the release publishes to {PUBLISHED}, not {host}")
        if tag and tag not in (VERSION, "<version>") and not _placeholder(tag):
            found.append(f"{where.name}: {match.group(0)} is not version {VERSION}")
    for match in OCI_VERSION.finditer(text):
        if match.group(1) not in (VERSION, "<version>", "<new>"):
            found.append(f"{where.name}: chart version {match.group(1)} is not {VERSION}")
    return found


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_page_names_only_what_the_repository_builds(page: Path) -> None:
    assert violations(page.read_text(), page) == []


@pytest.mark.parametrize(
    ("planted", "says"),
    [
        pytest.param("`deploy/examples/runnergroup-team.yaml`", "no deploy/examples/runnergroup-team.yaml", id="path"),
        pytest.param("apply `runnergroup-team.yaml`", "no file runnergroup-team.yaml", id="file-name"),
        pytest.param("[install](docs/instal.md)", "the link docs/instal.md leads nowhere", id="link"),
        pytest.param(
            "helm install r oci://ghcr.io/bpg-pw/gitea-runner-scaler", "not a chart the release pushes", id="chart"
        ),
        pytest.param("oci://quay.io/bpg-pw/charts/gitea-runner-scaler", "the release publishes to", id="registry"),
        pytest.param(
            "helm install r oci://ghcr.io/bpg-pw/charts/gitea-runner-scaler --version 0.0.9", "0.0.9", id="version"
        ),
        pytest.param("docker pull ghcr.io/bpg-pw/grs:latest", "not the image the release builds", id="image"),
        pytest.param("`deploy/release.sh publish REG`", "no subcommand publish", id="script"),
    ],
)
def test_a_planted_wrong_artifact_is_found(planted: str, says: str) -> None:
    """Each rule finds what it is for (a page with a wrong name in it fails its test above)."""
    found = violations(planted, ROOT / "README.md")
    assert any(says in v for v in found), found
