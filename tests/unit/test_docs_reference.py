"""The generated tables of the docs (`docs/reference.py`) are current, and its pieces render as the
pages want them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_reference", ROOT / "docs" / "reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


reference = _reference()


def test_the_generated_sections_are_current() -> None:
    diff = reference.stale()
    assert not diff, f"the docs' generated tables are stale: run .venv/bin/python docs/reference.py\n{diff}"


def test_every_page_has_the_sections_it_generates() -> None:
    named = {m.group(2) for page in reference.PAGES for m in reference.MARKER.finditer(page.read_text())}
    assert named == set(reference.SECTIONS)


def test_render_rewrites_only_between_the_markers() -> None:
    page = "before\n<!-- BEGIN GENERATED: x -->\nold\n<!-- END GENERATED: x -->\nafter\n"
    assert reference.render(page, {"x": lambda: "new\n"}) == page.replace("old", "new")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("a | b", "a \\| b", id="pipe"),
        pytest.param("one\n  line", "one line", id="newlines"),
        pytest.param("<name>-x `<kept>`", "&lt;name>-x `<kept>`", id="html-outside-code"),
    ],
)
def test_cell(text: str, expected: str) -> None:
    assert reference.cell(text) == expected


def test_value_comments_belong_to_the_key_below_them() -> None:
    values = "# file header\n\na:\n  # about b\n  # more\n  b: 1\n  c: 2\n# about d\nd: {}\n"
    assert reference.value_comments(values) == {"a.b": "about b more", "d": "about d"}
