"""The Dockerfile's OCI labels say what pyproject.toml says: name, description, version, license."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
DOCKERFILE = (ROOT / "Dockerfile").read_text(encoding="utf-8")


def label(name: str) -> str:
    found: list[str] = re.findall(rf'org\.opencontainers\.image\.{name}="([^"]*)"', DOCKERFILE)
    assert len(found) == 1, f"one {name} label expected, found {found}"
    return found[0]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        pytest.param("title", PROJECT["name"], id="title"),
        pytest.param("description", PROJECT["description"], id="description"),
        pytest.param("licenses", PROJECT["license"], id="licenses"),
        pytest.param("version", "${VERSION}", id="version"),
        pytest.param("revision", "${REVISION}", id="revision"),
    ],
)
def test_labels_follow_the_project(name: str, expected: str) -> None:
    assert label(name) == expected


def test_the_version_argument_defaults_to_the_projects_version() -> None:
    assert re.findall(r"^ARG VERSION=(\S+)$", DOCKERFILE, flags=re.MULTILINE) == [PROJECT["version"]]
