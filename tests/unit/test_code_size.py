"""The size rule of the two packages: no file over 300 lines, no function or method over 40.

A function's length is `end_lineno - lineno + 1` as `ast` reports it: from its `def` line to its last
line, docstring included. A file or function past the limit is asking to be split, not for a higher one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
PACKAGES = ("webhook_scaler", "reconciler")
MAX_FILE_LINES = 300
MAX_FUNCTION_LINES = 40


def oversized(path: Path) -> list[str]:
    """Where `path` breaks the rule, as `path:line what is N lines`."""
    text = path.read_text(encoding="utf-8")
    where = path.relative_to(ROOT)
    found = []
    lines = len(text.splitlines())
    if lines > MAX_FILE_LINES:
        found.append(f"{where}:1 the file is {lines} lines (at most {MAX_FILE_LINES})")
    for node in ast.walk(ast.parse(text, filename=str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(f"{where}:{node.lineno} {node.name}() is {length} lines (at most {MAX_FUNCTION_LINES})")
    return found


def test_no_file_or_function_is_over_the_limit() -> None:
    files = sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))
    assert files, "no source files found"
    found = [problem for path in files for problem in oversized(path)]
    if found:
        pytest.fail("split these:\n" + "\n".join(found), pytrace=False)
