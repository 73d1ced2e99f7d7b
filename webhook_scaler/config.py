"""Reading settings from the environment, and the command line, shared by both processes.

Owns: the `GRS_` naming rule, `*_FILE` indirection for secrets, turning validation errors into one
clear message, and the command line: `--help` (every variable, generated from the settings model)
and `--version`. Must not hold settings itself: each process parses its own once in `main()`.
"""

from __future__ import annotations

import argparse
import difflib
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Literal, NoReturn, TypeVar, get_args, get_origin

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
    """Build `model` from its variables (see `variables`); fields without one keep their defaults. A
    choice (a `Literal` field) is matched case-insensitively. ConfigError: one line per bad setting."""
    env = os.environ if environ is None else environ
    data: dict[str, object] = {}
    named: dict[str, str] = {}
    for field, names, info in variables(model):
        named[field] = " or ".join(names)
        secret = _secret(info)
        value = read_secret(env, secret.name) if secret else env.get(names[0])
        if value is not None:
            data[field] = _choice(info, value)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError("\n".join(_problem(named, err) for err in exc.errors(include_input=False))) from None


def _choice(info: FieldInfo, value: str) -> str:
    """`value` spelt as the field's choice it names regardless of case (`info` -> `INFO`), else as given."""
    if get_origin(info.annotation) is not Literal:
        return value
    return next((c for c in get_args(info.annotation) if str(c).lower() == value.lower()), value)


def _problem(named: Mapping[str, str], err: Mapping[str, Any]) -> str:
    """One plain line: the variable, then what it accepts (pydantic's "Value error, " dropped)."""
    message = str(err["msg"]).removeprefix("Value error, ")
    field = str(err["loc"][0]) if err["loc"] else ""
    return f"{named[field]}: {message}" if field in named else message


def unknown(model: type[BaseModel], environ: Mapping[str, str] | None = None) -> list[str]:
    """A line for each `GRS_*` variable set that `model` does not read (a typo is otherwise silent),
    with the closest one it does read."""
    env = os.environ if environ is None else environ
    known = [name for _, names, _ in variables(model) for name in names]
    out = []
    for name in sorted(n for n in env if n.startswith(PREFIX) and n not in known):
        close = difflib.get_close_matches(name, known, n=1)
        out.append(
            f"{name} is not a setting of this program and is ignored" + (f"; did you mean {close[0]}?" if close else "")
        )
    return out


def shown_default(info: FieldInfo) -> str:
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
        lines.append(f"  {', '.join(names)}  (default: {shown_default(info)})")
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


def revision() -> str | None:
    """The commit this code was built from: the image's `REVISION` file (written by the Dockerfile), else
    `git describe` of the checkout it runs from (`-dirty` with local changes), else None."""
    stamped = Path(sys.prefix) / "REVISION"
    if stamped.is_file():
        return stamped.read_text().strip() or None
    tree = Path(__file__).resolve().parent.parent
    if not (tree / ".git").exists():
        return None
    git = ["git", "-C", str(tree), "describe", "--always", "--dirty", "--abbrev=12", "--match", "v*"]
    try:
        done = subprocess.run(git, capture_output=True, text=True, timeout=5, check=False)  # noqa: S603 (fixed argv)
    except OSError:  # no git installed
        return None
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def full_version() -> str:
    """What `--version` prints after the program's name: `0.1.0`, or `0.1.0 (git 3991bb0c1d2e)`."""
    built = revision()
    return f"{version()} (git {built})" if built else version()


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
    parser.add_argument("--version", action="version", version=f"{program} {full_version()}")
    return parser


def parse_or_exit(model: type[M], *, program: str, description: str) -> M:
    """Answer `--help`/`--version` (exit 0), refuse other arguments or bad config (exit 2), else parse."""
    command_line(model, program=program, description=description).parse_args()
    try:
        return load(model)
    except ConfigError as exc:
        for line in str(exc).splitlines():
            print(f"{program}: invalid setting: {line}", file=sys.stderr)
        raise SystemExit(2) from None
