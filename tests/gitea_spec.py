"""Gitea's OpenAPI spec made strict by Gitea's own answers, and the paging headers Gitea sends.

Gitea's swagger (2.0) marks no field required and cannot say "nullable". Its Go structs send every
field without `omitempty` and render a nil slice as null. So the check here learns both from answers
Gitea gave: a definition's required fields are those present in every recorded object of it (the
`omitempty` ones come and go), an extra field is refused, and an array may be null only where a
recorded answer has null there. The answers: tests/data/gitea-1.26/ (recorded from the real Gitea
1.26 by tests/gitea_record.py) for 1.26, and the constructed 1.25 examples in
tests/data/gitea/api-examples/ for 1.25. Must not start Gitea or serve anything.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jsonschema

DATA = Path(__file__).parent / "data"
RECORDED = DATA / "gitea-1.26"  # tests/gitea_record.py's answers of the Gitea the node tests run
ROOT_URL = "https://gitea.example.com/"  # the ROOT_URL recorded answers are written with
# The 1.25 examples (constructed from 1.25.5's source: tests/data/gitea/README.md) and what they answer.
EXAMPLES_125 = {
    "repo-actions-jobs.status-queued.v1.25.json": "/repos/{owner}/{repo}/actions/jobs",
    "repo-actions-jobs.status-queued+in_progress.v1.25.json": "/repos/{owner}/{repo}/actions/jobs",
    "org-actions-runners.v1.25.json": "/orgs/{org}/actions/runners",
}


_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}
_TYPES[type(None)] = "null"


def recorded_answers(folder: Path = RECORDED) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each recorded REST answer (name, entry), the spec and the runner RPC's answers left out."""
    for path in sorted(folder.glob("*.json")):
        entry = json.loads(path.read_text())
        if "request" in entry:
            yield path.stem, entry


def _template(spec: dict[str, Any], path: str) -> str | None:
    """The spec's path template that `path` (under /api/v1) matches."""
    path = path.removeprefix("/api/v1")
    template: str
    for template in sorted(spec["paths"], key=lambda t: t.count("{")):  # a literal segment before a parameter
        if re.fullmatch(re.sub(r"\\{[^}]+\\}", "[^/]+", re.escape(template)), path):
            return template
    return None


class SwaggerValidator:
    """Validates bodies against a definition or a path's 200 response in Gitea's spec; strict where
    `samples` ((path template, method, 200 body) of Gitea's answers) show what Gitea sends."""

    def __init__(
        self, path: Path = DATA / "gitea" / "swagger.v1.json", samples: Sequence[tuple[str, str, Any]] = ()
    ) -> None:
        self.spec: dict[str, Any] = json.loads(path.read_text())
        self.seen: dict[str, list[set[str]]] = {}  # definition -> the key sets of its recorded objects
        self.nulls: set[tuple[str, str]] = set()  # (definition, property) recorded as null
        self.unlisted: dict[str, dict[str, str]] = {}  # definition -> fields Gitea sends that its spec leaves out
        for template, method, body in samples:
            self._learn(self.response_schema(template, method), body, None)
        self._tighten()

    def response_schema(self, path: str, method: str = "get") -> dict[str, Any]:
        """The schema of `method path`'s 200 answer."""
        ref = self.spec["paths"][path][method]["responses"]["200"]["$ref"]
        if ref.startswith("#/definitions/"):  # the runners lists point at a definition, not a response
            return {"$ref": ref}
        schema: dict[str, Any] = self.spec["responses"][ref.rsplit("/", 1)[1]]["schema"]
        return schema

    def _learn(self, schema: dict[str, Any], value: Any, where: str | None) -> None:
        if "$ref" in schema:
            name = schema["$ref"].rsplit("/", 1)[1]
            self._learn(self.spec["definitions"][name], value, name)
        elif schema.get("type") == "array" and isinstance(value, list):
            for item in value:
                self._learn(schema.get("items", {}), item, None)
        elif isinstance(value, dict) and where is not None:
            self.seen.setdefault(where, []).append(set(value))
            for key in set(value) - set(schema.get("properties", {})):  # sent, but not in the spec (`username`)
                self.unlisted.setdefault(where, {})[key] = _TYPES[type(value[key])]
            for key, prop in schema.get("properties", {}).items():
                if key in value:
                    if value[key] is None:
                        self.nulls.add((where, key))
                    self._learn(prop, value[key], None)

    def _tighten(self) -> None:
        for name, definition in self.spec["definitions"].items():
            for key, prop in definition.get("properties", {}).items():
                if prop.get("type") == "array" and (name, key) in self.nulls:
                    prop["type"] = ["array", "null"]
            for key, kind in self.unlisted.get(name, {}).items():
                definition.setdefault("properties", {})[key] = {"type": kind}
            if name in self.seen:
                definition["required"] = sorted(set.intersection(*self.seen[name]))
                definition["additionalProperties"] = False

    def _check(self, schema: dict[str, Any], body: Any) -> None:
        root: dict[str, Any] = {**self.spec, **schema}
        jsonschema.Draft4Validator(root).validate(body)

    def response(self, path: str, body: Any, *, method: str = "get") -> None:
        """Raise jsonschema.ValidationError unless `body` fits `method path`'s 200 response."""
        self._check(self.response_schema(path, method), body)

    def has(self, method: str, path: str, status: int) -> bool:
        """Whether Gitea's spec documents this answer to `method path`."""
        return str(status) in self.spec["paths"][path][method.lower()]["responses"]

    def request(self, method: str, path: str, body: Any) -> None:
        """Raise jsonschema.ValidationError unless `body` fits `method path`'s body parameter."""
        (param,) = [p for p in self.spec["paths"][path][method.lower()]["parameters"] if p["in"] == "body"]
        self._check(param["schema"], body)


def _samples(spec: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """(path template, method, body) of each recorded 200 answer whose spec gives its body a schema (the
    registration token's documents a header, wrongly: tests/data/gitea/README.md)."""
    out = []
    for _, entry in recorded_answers():
        method, template = entry["request"]["method"].lower(), _template(spec, entry["request"]["path"])
        if entry["status"] != 200 or template is None:
            continue
        ref = spec["paths"][template][method]["responses"]["200"]["$ref"].rsplit("/", 1)[1]
        if "schema" in spec["responses"].get(ref, {"schema": "a definition"}):
            out.append((template, method, entry["body"]))
    return out


@functools.cache
def _validator(version: tuple[int, int]) -> SwaggerValidator:
    if version >= (1, 26):
        return SwaggerValidator(
            RECORDED / "swagger.v1.json", _samples(json.loads((RECORDED / "swagger.v1.json").read_text()))
        )
    folder = DATA / "gitea" / "api-examples"
    examples = [(p, "get", json.loads((folder / f).read_text())) for f, p in EXAMPLES_125.items()]
    return SwaggerValidator(DATA / "gitea" / "swagger.v1.json", examples)


def validator(version: str) -> SwaggerValidator:
    """The strict check of a Gitea of `version` (1.26 and later: 1.26's; before: 1.25's). Shared: read only."""
    major, minor = (int(p) for p in version.split(".")[:2])
    return _validator((1, 26) if (major, minor) >= (1, 26) else (1, 25))


def paging_headers(path: str, query: list[tuple[str, str]], *, total: int, page_size: int, page: int) -> dict[str, str]:
    """`X-Total-Count` and `Link` as Gitea's `SetTotalCountHeader` and `SetLinkHeader` write them: links
    from ROOT_URL, the query's keys sorted (Go's `url.Values.Encode`), `page` clamped to the pages there
    are; rel next, last, first, prev, the ones that apply."""
    pages = math.ceil(total / max(page_size, 1))
    current = max(min(page, pages), 1)

    def link(to: int, rel: str) -> str:
        params = sorted([(k, v) for k, v in query if k != "page"] + [("page", str(to))], key=lambda kv: kv[0])
        return f'<{ROOT_URL}{path.lstrip("/")}?{urlencode(params)}>; rel="{rel}"'

    links = []
    if current * page_size < total:
        links += [link(current + 1, "next"), link(pages, "last")]
    if current > 1:
        links += [link(1, "first"), link(current - 1, "prev")]
    headers = {"X-Total-Count": str(total)}
    return headers | ({"Link": ",".join(links)} if links else {})
