"""The entry modules the chart and the CRD file name keep working where the code moved into rooms:
`python -m reconciler.crd`, `reconciler.crd_apply` and `reconciler.secrets` run their room's module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )


def test_reconciler_crd_prints_the_crd_file_as_committed() -> None:
    printed = _run("reconciler.crd")
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == (ROOT / "deploy" / "crds" / "gitea.bpg.pw_runnergroups.yaml").read_text()


def test_the_hook_entry_modules_run_their_mains() -> None:
    secrets = _run("reconciler.secrets")
    assert (secrets.returncode, secrets.stderr.split(":")[0]) == (2, "reconciler.secrets"), secrets.stderr
    assert "usage: python -m reconciler.secrets NAMESPACE SECRET:KEY" in secrets.stderr
    crd_apply = _run("reconciler.crd_apply", "unexpected")
    assert (crd_apply.returncode, crd_apply.stderr.strip()) == (2, "reconciler.crd_apply: takes no arguments")
