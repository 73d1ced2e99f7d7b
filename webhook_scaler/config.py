"""Reading settings from the environment, shared by both processes' `settings.py`.

Owns: the `GRS_` naming rule, `*_FILE` indirection for secrets, and turning validation errors into
one clear message. Must not hold settings itself: each process parses its own once in `main()`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

PREFIX = "GRS_"
M = TypeVar("M", bound=BaseModel)


class ConfigError(Exception):
    """The configuration is unusable; the message names the variables at fault, never their values."""


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


def parse_or_exit(parse: Callable[[Mapping[str, str]], M], *, program: str) -> M:
    """Parse settings from the environment in `main()`; on bad config, say why and exit 2."""
    try:
        return parse(os.environ)
    except ConfigError as exc:
        print(f"{program}: invalid configuration: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def load(model: type[M], environ: Mapping[str, str] | None = None, **overrides: object) -> M:
    """Build `model` from `GRS_<FIELD>` variables; fields without one keep their defaults."""
    env = os.environ if environ is None else environ
    data: dict[str, object] = {}
    for field in model.model_fields:
        value = env.get(env_name(field))
        if value is not None:
            data[field] = value
    data.update(overrides)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{env_name(str(err['loc'][0])) if err['loc'] else model.__name__}: {err['msg']}"
            for err in exc.errors(include_input=False)
        )
        raise ConfigError(problems) from None
