"""`reconciler check`'s reading of a RunnerGroup's status, on statuses made by the controller's own code
(`decide.status.desired_status` and the functions that make its conditions), so the lines follow what
the controller writes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from reconciler.check import ALL_READY, NOT_READY, report, verdict
from reconciler.decide import ownership
from reconciler.decide.gitea_health import poll_failed
from reconciler.decide.phases import Phase, Runner
from reconciler.decide.plan import Backoff
from reconciler.decide.status import REGISTRATION_REFUSED, SCOPE_MISMATCH, Condition, desired_status, failing
from tests.groups import spec, spec_dict

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
URL = spec_dict()["gitea"]["url"]
REACHED = Condition("GiteaReachable", "True", "PollSucceeded", "2 queued or running job(s)")
PROVEN = ownership.condition(ownership.Proof(proven_at=0, asked_at=0), spec(), now=1)
HOOKED = Condition("WebhookInstalled", "True", "Installed", "delivers to https://hooks.example.com")
FAILED_RUNNER = Runner("runners-abc", Phase.FAILED, 0, reason="exit code 1: registration failed", finished_ms=1)


def status(**changes: Any) -> dict[str, Any]:
    """The status a pass of the controller writes for the default group (org acme), with `changes`."""
    arguments: dict[str, Any] = {
        "generation": 1,
        "previous": {},
        "spec": spec(),
        "counts": None,
        "now": NOW,
        "invalid": "",
        "gitea": REACHED,
        "last_poll": None,
        "proven": PROVEN,
        "failed": [],
        "scope": "org acme",
    }
    return desired_status(**(arguments | changes))


def group(written: dict[str, Any] | None, *, generation: int = 1, **spec_changes: Any) -> dict[str, Any]:
    """A RunnerGroup ci/runners as the API server returns it."""
    body: dict[str, Any] = {
        "metadata": {"namespace": "ci", "name": "runners", "generation": generation},
        "spec": spec_dict(**spec_changes),
    }
    if written is not None:
        body["status"] = written
    return body


def test_a_ready_group_is_one_line_saying_what_holds() -> None:
    said = verdict(group(status()))
    assert said.ready
    assert said.lines == (f"ci/runners: Gitea {URL} reachable; token proves org acme; runners admitted; Ready",)


@pytest.mark.parametrize(
    ("changes", "spec_changes", "line"),
    [
        pytest.param(
            {"webhook": HOOKED},
            {},
            f"Gitea {URL} reachable; token proves org acme; runners admitted; webhook installed; Ready",
            id="webhook-installed",
        ),
        pytest.param(
            {"gitea": None},
            {},
            f"Gitea {URL} not polled yet; token proves org acme; runners admitted; Ready",
            id="not-polled-yet",
        ),
        pytest.param(
            {"spec": spec(suspend=True)},
            {"suspend": True},
            f"Gitea {URL} reachable; token proves org acme; runners admitted; Ready (suspended: no new runners are"
            " started)",
            id="suspended",
        ),
        pytest.param(
            {"spec": spec(scope="repo", org=None, repo="acme/widgets"), "proven": None},
            {"scope": "repo", "org": None, "repo": "acme/widgets"},
            f"Gitea {URL} reachable; runners admitted; Ready",
            id="not-asked-about-its-scope",
        ),
    ],
)
def test_ready_groups_say_each_condition_that_holds(
    changes: dict[str, Any], spec_changes: dict[str, Any], line: str
) -> None:
    said = verdict(group(status(**changes), **spec_changes))
    assert said.ready and said.lines == (f"ci/runners: {line}",)


def test_a_global_group_proves_the_instance() -> None:
    global_spec = spec(scope="global", org=None)
    written = status(
        spec=global_spec, proven=ownership.condition(ownership.Proof(proven_at=0, asked_at=0), global_spec, now=1)
    )
    assert "token proves the instance (global)" in verdict(group(written, scope="global", org=None)).lines[0]


def test_a_ready_group_whose_webhook_gitea_refused_says_so_and_stays_ready() -> None:
    refused = Condition("WebhookInstalled", "False", "WebhookRefused", "Gitea answered 403 to the API token")
    said = verdict(group(status(webhook=refused)))
    assert said.ready
    assert said.lines[1] == "ci/runners: WebhookInstalled False: WebhookRefused: Gitea answered 403 to the API token"


SCOPE = "org acme"
TOO_OLD = poll_failed(status=404, error="HTTP 404", where=SCOPE, version="1.24.6")
NOT_ADMINISTERED = ownership.condition(
    ownership.Proof(proven_at=None, asked_at=0, refused=True, why="HTTP 403 listing the runners"), spec(), now=1
)
BACKOFF = Backoff(failures=3, retry_at_ms=1_800_000_000_000, last=FAILED_RUNNER)


@pytest.mark.parametrize(
    ("changes", "reason", "words"),
    [
        pytest.param({"gitea": TOO_OLD}, "GiteaTooOld", "this one is 1.24.6", id="gitea-too-old"),
        pytest.param(
            {"gitea": poll_failed(status=401, error="HTTP 401", where=SCOPE, version=None)},
            "TokenRefused",
            "Gitea refused the group's API token for org acme",
            id="token-refused",
        ),
        pytest.param(
            {"gitea": poll_failed(status=404, error="HTTP 404", where=SCOPE, version="1.26.0")},
            "ScopeNotFound",
            "Gitea has no org acme",
            id="scope-not-found",
        ),
        pytest.param(
            {"gitea": poll_failed(status=None, error="connection refused", where=SCOPE, version=None)},
            "PollFailed",
            "connection refused",
            id="poll-failed",
        ),
        pytest.param(
            {"gitea": Condition("GiteaReachable", "False", "AuthTokenUnavailable", "secret ci/gitea has no key api")},
            "AuthTokenUnavailable",
            "secret ci/gitea has no key api",
            id="auth-token-unavailable",
        ),
        pytest.param(
            {"proven": NOT_ADMINISTERED},
            "TokenCannotAdminister",
            "HTTP 403 listing the runners",
            id="cannot-administer",
        ),
        pytest.param(
            {"proven": ownership.condition(None, spec(), now=1)}, "NotProven", "not asked yet", id="not-proven"
        ),
        pytest.param(
            {"refused": {"runners-x": "violates PodSecurity"}}, "PodRefused", "violates PodSecurity", id="pod-refused"
        ),
        pytest.param({"create_refused": "exceeded quota"}, "JobRefused", "exceeded quota", id="job-refused"),
        pytest.param(
            {"create_refused": f"{REGISTRATION_REFUSED}Gitea answered 401"},
            "RegistrationRefused",
            "Gitea answered 401",
            id="registration-refused",
        ),
        pytest.param(
            {"create_refused": f"{SCOPE_MISMATCH}repo acme/other"},
            "RegistrationScopeMismatch",
            "repo acme/other",
            id="registration-scope-mismatch",
        ),
        pytest.param({"unlisted": ["runners-y"]}, "NotInScope", "runners-y", id="not-in-scope"),
        pytest.param(
            {"failed": [FAILED_RUNNER], "backoff": BACKOFF}, "RegistrationFailed", "3 runner(s)", id="runners-failing"
        ),
        pytest.param({"invalid": "spec.labels[0]: empty"}, "InvalidSpec", "spec.labels[0]: empty", id="invalid-spec"),
        pytest.param({"error": "HTTP 422"}, "ReconcileFailed", "stopped until the RunnerGroup changes", id="stopped"),
    ],
)
def test_a_group_that_is_not_ready_says_why_in_one_line(changes: dict[str, Any], reason: str, words: str) -> None:
    """Each reason the controller writes for Ready=False, with its message; the condition Ready names is
    not repeated on a line of its own."""
    said = verdict(group(status(**changes)))
    assert not said.ready
    assert said.lines[0].startswith(f"ci/runners: NOT READY: {reason}: ")
    assert words in said.lines[0]
    assert len(said.lines) == 1, said.lines


def test_every_false_condition_gets_a_line_besides_the_one_ready_names() -> None:
    said = verdict(group(status(proven=NOT_ADMINISTERED, create_refused="exceeded quota")))
    assert said.lines[0].startswith("ci/runners: NOT READY: TokenCannotAdminister: ScopeProven: the group's API token")
    assert said.lines[1:] == (
        "ci/runners: RunnersAdmitted False: JobRefused: the API server refused to create runner Jobs (their seats"
        " are free again): exceeded quota",
    )


def test_a_group_whose_passes_keep_failing_says_so() -> None:
    written = failing(status(), "ConnectionError", now=NOW, generation=1)
    said = verdict(group(written))
    assert not said.ready
    assert said.lines == (
        "ci/runners: NOT READY: PassFailing: the controller cannot serve this group now: ConnectionError",
    )


@pytest.mark.parametrize(
    ("written", "generation", "words"),
    [
        pytest.param(None, 1, "no status yet: the reconciler has not served this group", id="no-status"),
        pytest.param({"observedGeneration": 1}, 1, "no status yet", id="no-conditions"),
        pytest.param(
            status(), 2, "the status is of generation 1 and the group is at 2: the reconciler has not", id="stale"
        ),
    ],
)
def test_a_group_the_controller_has_not_served_yet_is_not_ready(
    written: dict[str, Any] | None, generation: int, words: str
) -> None:
    said = verdict(group(written, generation=generation))
    assert not said.ready
    (line,) = said.lines
    assert line.startswith("ci/runners: NOT READY: ") and words in line


def test_the_exit_status_is_0_only_when_every_group_is_ready() -> None:
    ready, other = group(status()), group(status(gitea=TOO_OLD))
    other["metadata"]["name"] = "another"
    code, lines = report([ready, other], namespaces=("ci",))
    assert code == NOT_READY
    assert lines[0].startswith("ci/another: NOT READY: GiteaTooOld") and lines[1].startswith("ci/runners: Gitea")
    assert lines[-1] == "1 of 2 RunnerGroup(s) Ready"
    assert report([ready], namespaces=())[0] == ALL_READY


@pytest.mark.parametrize(
    ("namespaces", "where"), [(("ci", "qa"), "namespace(s) ci, qa"), ((), "any namespace")], ids=["named", "all"]
)
def test_no_group_is_not_ready_and_says_where_it_looked(namespaces: tuple[str, ...], where: str) -> None:
    assert report([], namespaces=namespaces) == (
        NOT_READY,
        [f"no RunnerGroup in {where}: create one (docs/runnergroups.md)"],
    )
