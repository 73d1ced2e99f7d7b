"""The two log formats carry the same fields: JSON at the top level, text as `key=value` after the message."""

from __future__ import annotations

import json
import logging

from webhook_scaler.logs import JsonFormatter, TextFormatter


def _record() -> logging.LogRecord:
    record = logging.makeLogRecord(
        {"name": "reconciler.loop.passes.group_pass", "levelname": "INFO", "msg": "runner created"}
    )
    record.__dict__.update(group="g0", job="g0-1000-1", seconds=0.25)
    return record


def test_text_lines_name_the_fields() -> None:
    line = TextFormatter().format(_record())
    assert line.endswith(
        'INFO reconciler.loop.passes.group_pass: runner created group="g0" job="g0-1000-1" seconds=0.25'
    ), line


def test_text_line_without_fields_ends_at_the_message() -> None:
    record = logging.makeLogRecord({"name": "reconciler", "levelname": "INFO", "msg": "reconciler started"})
    assert TextFormatter().format(record).endswith("INFO reconciler: reconciler started")


def test_json_lines_carry_the_same_fields() -> None:
    out = json.loads(JsonFormatter().format(_record()))
    assert (out["message"], out["group"], out["job"], out["seconds"]) == ("runner created", "g0", "g0-1000-1", 0.25)
