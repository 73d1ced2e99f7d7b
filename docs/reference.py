"""The generated parts of the docs: the `GRS_*` settings of both processes, the Helm chart's values and
the RunnerGroup's fields, each a Markdown table between marker comments in a docs page.

Reads the sources of truth (the pydantic settings models, the chart's values.yaml and
values.schema.json, the CRD) and rewrites only what lies between `<!-- BEGIN GENERATED: name -->` and
`<!-- END GENERATED: name -->`; the prose around the tables is written by hand. Must not change
anything else in a page, nor import anything that does I/O beyond reading these files.

    .venv/bin/python docs/reference.py            rewrite the generated sections
    .venv/bin/python docs/reference.py --check    exit 1, with a diff, when one is stale
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the packages sit next to docs/
    sys.path.insert(0, str(ROOT))

from reconciler import settings as reconciler_settings  # noqa: E402
from webhook_scaler import settings as receiver_settings  # noqa: E402
from webhook_scaler.config import shown_default, variables  # noqa: E402 (one rendering of defaults: --help's)

CHART = ROOT / "deploy" / "helm" / "gitea-runner-scaler"
CRD = ROOT / "deploy" / "crds" / "gitea.bpg.pw_runnergroups.yaml"
MARKER = re.compile(r"(<!-- BEGIN GENERATED: ([a-z-]+) -->\n)(.*?)(<!-- END GENERATED: \2 -->)", re.DOTALL)


def cell(text: str) -> str:
    """Text fit for one Markdown table cell: one line, no unescaped pipe."""
    parts = " ".join(text.split()).replace("|", "\\|").split("`")
    # Outside code spans, `<name>` would be read as an HTML tag and vanish.
    return "`".join(p if n % 2 else p.replace("<", "&lt;") for n, p in enumerate(parts))


def table(header: Sequence[str], rows: Iterator[Sequence[str]]) -> str:
    """A Markdown table, as the README writes them."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _settings_rows(model: type[BaseModel], *, skip: Mapping[str, object]) -> Iterator[Sequence[str]]:
    for field, names, info in variables(model):
        if field in skip:
            continue
        text = info.description or ""
        if get_origin(info.annotation) is Literal:
            text += " One of: " + ", ".join(f"`{choice}`" for choice in get_args(info.annotation)) + "."
        yield " / ".join(f"`{n}`" for n in names), f"`{shown_default(info)}`", text


def settings_table(model: type[BaseModel], *, skip: Mapping[str, object] | None = None) -> str:
    """The variables of a settings model, those of `skip` (field names) left out."""
    return table(["variable", "default", "meaning"], _settings_rows(model, skip=skip or {}))


def value_comments(text: str) -> dict[str, str]:
    """The comment lines right above each key of values.yaml, by dotted path."""
    comments: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    pending: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            pending.append(stripped.lstrip("#").strip())
            continue
        key = re.match(r"( *)([A-Za-z0-9_]+):", line)
        if key:
            indent = len(key.group(1))
            stack = [(i, k) for i, k in stack if i < indent] + [(indent, key.group(2))]
            if pending:
                comments[".".join(k for _, k in stack)] = " ".join(pending)
        pending = []
    return comments


def flow(value: object) -> str:
    """A default as one would write it in a values file."""
    if value == "":
        return '""'
    return yaml.safe_dump(value, default_flow_style=True, width=1000).strip().removesuffix("...").strip()


def schema_type(node: Mapping[str, Any]) -> str:
    """A schema node's type, or its choices."""
    if "enum" in node:
        return "one of " + ", ".join(flow(v) for v in node["enum"])
    kind = node.get("type", "any")
    return " or ".join(kind) if isinstance(kind, list) else str(kind)


def _value_rows(
    values: Mapping[str, Any], schema: Mapping[str, Any], comments: Mapping[str, str], prefix: str
) -> Iterator[Sequence[str]]:
    props = schema.get("properties", {})
    for key, value in values.items():
        path, node = prefix + key, props.get(key, {})
        text = comments.get(path) or node.get("description", "")
        if isinstance(value, dict) and "properties" in node:
            if text:
                yield f"`{path}`", "", "", text
            yield from _value_rows(value, node, comments, path + ".")
        else:
            yield f"`{path}`", schema_type(node), f"`{flow(value)}`", text


def chart_values_table(chart: Path = CHART) -> str:
    """Every value of the chart: its type from the schema, its default and description from values.yaml."""
    text = (chart / "values.yaml").read_text()
    schema = json.loads((chart / "values.schema.json").read_text())
    rows = _value_rows(yaml.safe_load(text), schema, value_comments(text), "")
    return table(["value", "type", "default", "meaning"], rows)


def _crd_schema(crd: Path) -> Mapping[str, Any]:
    document = yaml.safe_load(crd.read_text())
    schema: Mapping[str, Any] = document["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _crd_rows(node: Mapping[str, Any], prefix: str, *, opaque: frozenset[str]) -> Iterator[Sequence[str]]:
    required = set(node.get("required", ()))
    for key, child in node.get("properties", {}).items():
        path = prefix + key
        default = f"`{flow(child['default'])}`" if "default" in child else ""
        yield f"`{path}`", schema_type(child), "yes" if key in required else "", default, child.get("description", "")
        if path not in opaque:
            yield from _crd_rows(child, path + ".", opaque=opaque)


def crd_table(part: str, crd: Path = CRD) -> str:
    """The fields of the RunnerGroup's `spec` or `status`, as the CRD's schema has them."""
    node = _crd_schema(crd)["properties"][part]
    rows = _crd_rows(node, "", opaque=frozenset({"podTemplate", "conditions"}))
    return table(["field", "type", "required", "default", "meaning"], rows)


def modules_table(*packages: str) -> str:
    """One row per module of the packages and their rooms (sub-packages, named by their folder): its
    path and the first paragraph of its docstring."""

    def rows() -> Iterator[Sequence[str]]:
        for package in packages:
            for path in sorted((ROOT / package).rglob("*.py")):
                doc = ast.get_docstring(ast.parse(path.read_text())) or ""
                name = path.relative_to(ROOT).as_posix()
                if doc:
                    yield f"`{name.removesuffix('__init__.py')}`", doc.split("\n\n")[0]

    return table(["module", "what it owns"], rows())


SECTIONS: dict[str, Callable[[], str]] = {
    "modules": lambda: modules_table("webhook_scaler", "reconciler"),
    "grs-redis": lambda: settings_table(receiver_settings.RedisSettings),
    "grs-receiver": lambda: settings_table(
        receiver_settings.Settings, skip=receiver_settings.RedisSettings.model_fields
    ),
    "grs-reconciler": lambda: settings_table(
        reconciler_settings.Settings, skip=receiver_settings.RedisSettings.model_fields
    ),
    "chart-values": chart_values_table,
    "runnergroup-spec": lambda: crd_table("spec"),
    "runnergroup-status": lambda: crd_table("status"),
}
PAGES = [ROOT / "docs" / name for name in ("configuration.md", "runnergroups.md", "architecture.md")]


def render(text: str, sections: Mapping[str, Callable[[], str]] = SECTIONS) -> str:
    """`text` with every generated section written anew; KeyError for a section nobody generates."""
    return MARKER.sub(lambda m: m.group(1) + sections[m.group(2)]() + m.group(4), text)


def stale(pages: Sequence[Path] = PAGES) -> str:
    """A unified diff of what regenerating the pages would change ("" when they are current)."""
    out: list[str] = []
    for page in pages:
        text = page.read_text()
        out += difflib.unified_diff(
            text.splitlines(keepends=True),
            render(text).splitlines(keepends=True),
            fromfile=str(page.relative_to(ROOT)),
            tofile=f"{page.relative_to(ROOT)} (generated)",
        )
    return "".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite the generated sections, or with --check report whether they are stale."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 with a diff when a section is stale")
    args = parser.parse_args(argv)
    if args.check:
        diff = stale()
        sys.stdout.write(diff or "the generated reference is current\n")
        return 1 if diff else 0
    for page in PAGES:
        page.write_text(render(page.read_text()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
