"""CI's short pass of the benchmarks: the scripts run and print every figure, and no figure of correctness
FAILED (the run exits 1 then). No timing is asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.kube
ROOT = Path(__file__).resolve().parents[2]
SECTIONS = [
    "Time to runner",
    "Side by side",
    "Burst",
    "Polling cost",
    "Memory",
    "Growth",
    "Scaling",
    "Intake",
    "Ingest",
]


def test_benchmarks_smoke_pass() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tests.bench", "--smoke"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    for section in SECTIONS:
        assert f"## {section}" in done.stdout
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert len(rows) >= 18
    assert "every run | 40 / 0 / 0 |" in done.stdout  # correctness, not speed
