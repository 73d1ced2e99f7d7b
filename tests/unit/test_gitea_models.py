"""gitea.py on the REST API path (python-mode validation of parsed JSON): Gitea's JSON types, strictly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from webhook_scaler.gitea import ActionRunner, ActionRunnersResponse, WorkflowJobsResponse

_EXAMPLES = Path(__file__).parents[1] / "data" / "gitea" / "api-examples"


def _runner(**changes: Any) -> dict[str, Any]:
    row: dict[str, Any] = json.loads((_EXAMPLES / "org-actions-runners.v1.25.json").read_text())["runners"][0]
    return {**row, **changes}


def test_real_runner_rows_fit() -> None:
    body = json.loads((_EXAMPLES / "org-actions-runners.v1.25.json").read_text())
    assert ActionRunnersResponse.model_validate(body).runners


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("busy", "true", id="busy-string"),
        pytest.param("busy", 1, id="busy-number"),
        pytest.param("ephemeral", "false", id="ephemeral-string"),
        pytest.param("ephemeral", 0, id="ephemeral-number"),
        pytest.param("id", "3", id="id-string"),
        pytest.param("id", 0, id="id-zero"),
        pytest.param("id", 2**63, id="id-over-int64"),
        pytest.param("name", "r" * 256, id="name-256-chars"),
    ],
)
def test_runner_field_out_of_gitea_type_is_refused(field: str, value: Any) -> None:
    with pytest.raises(ValidationError) as err:
        ActionRunner.model_validate(_runner(**{field: value}))
    assert [e["loc"] for e in err.value.errors()] == [(field,)]


@pytest.mark.parametrize("value", [True, False])
def test_runner_booleans_are_json_booleans(value: bool) -> None:
    runner = ActionRunner.model_validate(_runner(busy=value, ephemeral=value))
    assert (runner.busy, runner.ephemeral) == (value, value)


@pytest.mark.parametrize("total", ["2", -1, 2.0])
def test_total_count_is_a_non_negative_integer(total: Any) -> None:
    body = json.loads((_EXAMPLES / "repo-actions-jobs.status-queued.v1.25.json").read_text())
    assert WorkflowJobsResponse.model_validate(body).jobs
    with pytest.raises(ValidationError):
        WorkflowJobsResponse.model_validate({**body, "total_count": total})
