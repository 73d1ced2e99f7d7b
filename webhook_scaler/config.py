"""Reading settings from the environment, and the command line, shared by both processes.

Owns: the `GRS_` naming rule, `*_FILE` indirection for secrets, turning validation errors into one
clear message, and the command line: `--help` (every variable, generated from the settings model)
and `--version`. Must not hold settings itself: each process parses its own once in `main()`.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Literal, NoReturn, TypeVar, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

PREFIX = "GRS_"
DISTRIBUTION = "gitea-runner-scaler"
M = TypeVar("M", bound=BaseModel)


class ConfigError(Exception):
    """The configuration is unusable; the message names the variables at fault, never their values."""


@dataclass(frozen=True, slots=True)
class FromFile:
    """Field metadata (`Annotated[T, FromFile("name")]`): a secret read by `read_secret` under `name`."""

    name: str


def env_name(field: str) -> str:
    """The environment variable that sets a field: `redis_url` -> `GRS_REDIS_URL`."""
    return PREFIX + field.upper()


def read_secret(environ: Mapping[str, str], field: str) -> str | None:
    """A secret from `GRS_X`, or from the file named by `GRS_X_FILE` (a mounted Secret)."""
    name = env_name(field)
    path = environ.get(name + "_FILE")
    if path:
        try:
            return Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{name}_FILE: cannot read the file ({exc.strerror})") from exc
    return environ.get(name)


def _secret(info: FieldInfo) -> FromFile | None:
    return next((m for m in info.metadata if isinstance(m, FromFile)), None)


def variables(model: type[BaseModel]) -> Iterator[tuple[str, tuple[str, ...], FieldInfo]]:
    """(field, the variables that set it, its FieldInfo) for every field of `model`, in order."""
    for field, info in model.model_fields.items():
        secret = _secret(info)
        if secret:
            yield field, (env_name(secret.name), env_name(secret.name) + "_FILE"), info
        else:
            yield field, (env_name(field),), info


def load(model: type[M], environ: Mapping[str, str] | None = None) -> M:
    """Build `model` from its variables (see `variables`); fields without one keep their defaults."""
    env = os.environ if environ is None else environ
    data: dict[str, object] = {}
    named: dict[str, str] = {}
    for field, names, info in variables(model):
        named[field] = " or ".join(names)
        secret = _secret(info)
        value = read_secret(env, secret.name) if secret else env.get(names[0])
        if value is not None:
            data[field] = value
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{named.get(str(err['loc'][0]) if err['loc'] else '', model.__name__)}: {err['msg']}"
            for err in exc.errors(include_input=False)
        )
        raise ConfigError(problems) from None


def _default(info: FieldInfo) -> str:
    """A field's default as one would write it in the environment."""
    if info.default_factory is not None:
        return f"{getattr(info.default_factory, '__name__', 'computed')}()"
    if info.is_required():
        return "required"
    value = info.default
    if value is None or value == ():
        return "unset"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value) if value != "" else '""'


def usage(model: type[BaseModel], *, description: str, width: int = 80) -> str:
    """The text after `--help`'s usage line: what the program does, then every variable it reads."""
    lines = [*textwrap.wrap(description, width), "", "Settings come only from these environment variables:"]
    for _, names, info in variables(model):
        lines.append(f"  {', '.join(names)}  (default: {_default(info)})")
        text = info.description or ""
        if get_origin(info.annotation) is Literal:
            text += " One of: " + ", ".join(str(choice) for choice in get_args(info.annotation)) + "."
        lines.extend(textwrap.wrap(text, width, initial_indent=" " * 6, subsequent_indent=" " * 6))
    return "\n".join(lines)


def version() -> str:
    """The installed distribution's version, or `unknown` when running from an uninstalled tree."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}; settings come only from {PREFIX}* variables (see --help)\n")


def command_line(model: type[BaseModel], *, program: str, description: str) -> argparse.ArgumentParser:
    """The parser both processes share: no arguments but `--help` and `--version`."""
    parser = _Parser(
        prog=program,
        description=usage(model, description=description),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"{program} {version()}")
    return parser


def parse_or_exit(model: type[M], *, program: str, description: str) -> M:
    """Answer `--help`/`--version` (exit 0), refuse other arguments or bad config (exit 2), else parse."""
    command_line(model, program=program, description=description).parse_args()
    try:
        return load(model)
    except ConfigError as exc:
        print(f"{program}: invalid configuration: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
