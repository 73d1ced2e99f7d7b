"""Structured logging for both processes: one JSON object per line, fields from `extra=`.

Must not format secrets: callers pass ids and reasons, never tokens, signatures or payloads.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Literal

_STANDARD = frozenset(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime", "taskName"}
# Client libraries that log whole requests and responses at DEBUG: Secret objects, tokens, payloads.
# They stay at WARNING whatever the level asked for, so that DEBUG never prints a secret.
_VERBATIM = ("kubernetes_asyncio", "aiohttp.access", "urllib3")


def _extras(record: logging.LogRecord) -> dict[str, object]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


class JsonFormatter(logging.Formatter):
    """Renders a record as JSON with its `extra=` fields at the top level."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one JSON line."""
        out: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        out.update(_extras(record))
        if record.exc_info and record.exc_info[0] is not None:
            out["error"] = record.exc_info[0].__name__
            out["traceback"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    """Renders a record as one line for a terminal, its `extra=` fields as `key=value` after the message."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        """The message, then the fields."""
        fields = " ".join(f"{k}={json.dumps(v, default=str)}" for k, v in _extras(record).items())
        return f"{super().formatMessage(record)} {fields}".rstrip()


def setup(*, level: str, fmt: Literal["json", "text"]) -> None:
    """Configure the root logger once, in `main()`."""
    handler = logging.StreamHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in _VERBATIM:
        logging.getLogger(name).setLevel(logging.WARNING)
