"""Ownership is proven, not claimed: the facts a proof is made of, the groups assignment skips or demotes,
the condition that says so, and the admin's pin of the owners a namespace may serve."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from reconciler.decide import ownership
from reconciler.decide.assign import CachedIndex, GroupView, Standing, assign
from reconciler.decide.ownership import WINDOW, Proof, asked, holds
from reconciler.decide.status import Condition, desired_status
from reconciler.model.labels import effective_labels, names
from reconciler.settings import Settings
from tests.groups import spec
from webhook_scaler.store.jobs.model import QueuedJob

T0 = 1_000_000.0
RETRY = 30.0


def job(job_id: int, repo: str = "acme/widgets") -> QueuedJob:
    owner = repo.split("/")[0]
    return QueuedJob(job_id, (), owner, repo, "build", run_id=1, attempt=0, queued_ms=0, claimed_by=None)


def view(ns: str, name: str, *, proven: bool = True, demoted: bool = False, **kw: Any) -> GroupView:
    s = spec(**kw)
    labels = names(effective_labels(s.labels, s.default_labels))
    return GroupView(ns, name, s, labels, proven=proven, demoted=demoted)


REPO: dict[str, Any] = {"scope": "repo", "repo": "acme/widgets"}
ORG: dict[str, Any] = {"scope": "org", "org": "acme"}
GLOBAL: dict[str, Any] = {"scope": "global"}


# -- assignment: the proven groups, most specific first, the demoted only as a last resort ----------------


@pytest.mark.parametrize(
    ("groups", "expected"),
    [
        pytest.param(
            [view("a", "ci", **REPO), view("b", "ci", **REPO)], ("a", "ci"), id="both-proven-first-by-namespace"
        ),
        pytest.param(
            [view("a", "ci", proven=False, **REPO), view("b", "ci", **REPO)], ("b", "ci"), id="two-namespaces-one-repo"
        ),
        pytest.param(
            [view("x", "stale", proven=False, **REPO), view("y", "org", **ORG)], ("y", "org"), id="revoked-repo-group"
        ),
        pytest.param(
            [view("x", "stale", demoted=True, **REPO), view("y", "org", **ORG)], ("y", "org"), id="refused-repo-group"
        ),
        pytest.param(
            [view("x", "repo", demoted=True, **REPO), view("y", "org", demoted=True, **ORG)],
            ("x", "repo"),
            id="all-demoted-most-specific",
        ),
        pytest.param([view("x", "only", demoted=True, **REPO)], ("x", "only"), id="demoted-alone-still-served"),
        pytest.param(
            [view("x", "repo", proven=False, **REPO), view("y", "org", proven=False, **ORG)], None, id="none-proven"
        ),
        pytest.param(
            [
                view("x", "repo", proven=False, **REPO),
                view("y", "org", demoted=True, **ORG),
                view("z", "all", **GLOBAL),
            ],
            ("z", "all"),
            id="falls-to-global",
        ),
    ],
)
def test_a_job_goes_to_the_most_specific_proven_group_and_a_demoted_one_only_if_no_other(
    groups: list[GroupView], expected: tuple[str, str] | None
) -> None:
    out = assign([job(1)], groups)
    taken = [key for key, jobs in out.items() if jobs]
    assert taken == ([expected] if expected else [])


def test_the_cached_index_follows_the_standing() -> None:
    repo, org = spec(**REPO), spec(**ORG)
    groups = [("a", "repo", repo), ("b", "org", org)]
    cache = CachedIndex()
    proven = cache.of(groups)
    assert assign([job(1)], proven)[("a", "repo")] == [job(1)]
    assert cache.of(groups, Standing()) is proven
    unproven = cache.of(groups, Standing(unproven=frozenset({("a", "repo")})))
    assert unproven is not proven and assign([job(1)], unproven)[("b", "org")] == [job(1)]
    assert cache.of(groups, Standing(unproven=frozenset({("a", "repo")}))) is unproven
    demoted = cache.of(groups, Standing(demoted=frozenset({("a", "repo")})))
    assert assign([job(1)], demoted)[("b", "org")] == [job(1)]


# -- the facts: a proof with a time ----------------------------------------------------------------------


@dataclass(frozen=True)
class Ask:
    at: float
    why: str = ""
    status: int | None = None
    refused: bool = False


@pytest.mark.parametrize(
    ("asks", "now", "proven"),
    [
        pytest.param([], T0, False, id="never-asked"),
        pytest.param([Ask(T0)], T0 + 1, True, id="proven"),
        pytest.param([Ask(T0)], T0 + WINDOW - 1, True, id="within-the-window"),
        pytest.param([Ask(T0)], T0 + WINDOW, False, id="too-old"),
        pytest.param([Ask(T0), Ask(T0 + 60, "GET: HTTP 403", 403)], T0 + 61, False, id="403-withdraws-at-once"),
        pytest.param([Ask(T0), Ask(T0 + 60, "GET: HTTP 401", 401)], T0 + 61, False, id="revoked-withdraws-at-once"),
        pytest.param([Ask(T0), Ask(T0 + 60, "GET: HTTP 404", 404)], T0 + 61, False, id="scope-gone"),
        pytest.param([Ask(T0), Ask(T0 + 60, "another user's", None, True)], T0 + 61, False, id="another-user"),
        pytest.param([Ask(T0), Ask(T0 + 60, "GET: HTTP 502", 502)], T0 + 61, True, id="5xx-keeps-the-proof"),
        pytest.param([Ask(T0), Ask(T0 + 60, "GET: TimeoutError")], T0 + 61, True, id="no-answer-keeps-it"),
        pytest.param([Ask(T0), Ask(T0 + 60, "GET: TimeoutError")], T0 + WINDOW, False, id="kept-only-its-window"),
        pytest.param([Ask(T0, "GET: HTTP 502", 502)], T0 + 1, False, id="no-answer-proves-nothing"),
        pytest.param([Ask(T0, "GET: HTTP 403", 403), Ask(T0 + 30)], T0 + 31, True, id="granted-since"),
    ],
)
def test_a_proof_holds_within_its_window_until_gitea_refuses_the_token(
    asks: list[Ask], now: float, proven: bool
) -> None:
    proof: Proof | None = None
    for a in asks:
        proof = asked(proof, now=a.at, why=a.why, status=a.status, refused=a.refused)
    assert holds(proof, now=now) is proven


@pytest.mark.parametrize(
    ("proof", "now", "due"),
    [
        pytest.param(None, T0, True, id="never-asked"),
        pytest.param(Proof(T0, T0), T0 + RETRY - 1, False, id="fresh"),
        pytest.param(Proof(T0, T0), T0 + RETRY, True, id="proven-asked-again-as-often-as-the-poll"),
        pytest.param(Proof(None, T0, "HTTP 403", 403, True), T0 + RETRY - 1, False, id="refused-waits"),
        pytest.param(Proof(None, T0, "HTTP 403", 403, True), T0 + RETRY, True, id="refused-asked-again"),
        pytest.param(Proof(T0, T0 + 10, "HTTP 502", 502), T0 + 10 + RETRY, True, id="failed-asked-again"),
    ],
)
def test_when_a_token_is_asked_again(proof: Proof | None, now: float, due: bool) -> None:
    assert ownership.due(proof, now=now, retry=RETRY) is due


@pytest.mark.parametrize(
    ("proof", "unread", "reason", "words"),
    [
        pytest.param(Proof(T0, T0), "", ("True", "Proven"), "administers repo acme/widgets", id="proven"),
        pytest.param(None, "", ("False", "NotProven"), "not asked yet", id="new"),
        pytest.param(
            Proof(None, T0, "GET /repos/acme/widgets/actions/runners: HTTP 403", 403, True),
            "",
            ("False", "TokenCannotAdminister"),
            "cannot administer repo acme/widgets: GET /repos/acme/widgets/actions/runners: HTTP 403",
            id="refused-with-the-status",
        ),
        pytest.param(
            Proof(None, T0, "GET /repos/acme/widgets/actions/runners: HTTP 502", 502),
            "",
            ("False", "NotProven"),
            "HTTP 502",
            id="gitea-failing",
        ),
        pytest.param(
            None, "its API token cannot be read: Secret ci/gitea not found", ("False", "NotProven"), "not found", id="x"
        ),
    ],
)
def test_the_scope_proven_condition_says_why(
    proof: Proof | None, unread: str, reason: tuple[str, str], words: str
) -> None:
    c = ownership.condition(proof, spec(**REPO), now=T0 + 1, unread=unread)
    assert (c.type, c.status, c.reason) == ("ScopeProven", *reason)
    assert words in c.message


def test_an_unproven_scope_makes_ready_false_after_an_unreachable_gitea() -> None:
    unproven = ownership.condition(None, spec(**REPO), now=T0)
    kw: dict[str, Any] = {"generation": 1, "previous": {}, "spec": spec(**REPO), "counts": None, "failed": ()}
    now = datetime.fromtimestamp(T0, UTC)
    status = desired_status(**kw, now=now, invalid="", gitea=None, last_poll=None, proven=unproven)
    ready = {c["type"]: c for c in status["conditions"]}
    assert (ready["Ready"]["status"], ready["Ready"]["reason"]) == ("False", "NotProven")
    assert ready["ScopeProven"]["status"] == "False"
    down = Condition("GiteaReachable", "False", "PollFailed", "no answer")
    status = desired_status(**kw, now=now, invalid="", gitea=down, last_poll=None, proven=unproven)
    assert next(c for c in status["conditions"] if c["type"] == "Ready")["reason"] == "PollFailed"
    proven = ownership.condition(Proof(T0, T0), spec(**REPO), now=T0)
    status = desired_status(**kw, now=now, invalid="", gitea=None, last_poll=None, proven=proven)
    assert next(c for c in status["conditions"] if c["type"] == "Ready")["status"] == "True"


# -- the admin's pin -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Group:
    namespace: str
    name: str = "ci"
    deleting: bool = False


PINS = "tenant-a=acme|Bob,tenant-b=*"


@pytest.mark.parametrize(
    ("group", "changes", "refused"),
    [
        pytest.param(Group("tenant-a"), ORG, "", id="its-org"),
        pytest.param(Group("tenant-a"), {"scope": "org", "org": "ACME"}, "", id="case-insensitive"),
        pytest.param(Group("tenant-a"), {"scope": "user", "user": "bob"}, "", id="its-user"),
        pytest.param(Group("tenant-a"), REPO, "", id="a-repo-of-its-org"),
        pytest.param(Group("tenant-a"), {"scope": "org", "org": "other"}, "spec.org other", id="another-org"),
        pytest.param(Group("tenant-a"), {"scope": "repo", "repo": "other/x"}, "spec.repo other/x", id="another-repo"),
        pytest.param(Group("tenant-a"), GLOBAL, "spec.scope global", id="global-needs-a-star"),
        pytest.param(Group("tenant-b"), GLOBAL, "", id="star-any"),
        pytest.param(Group("tenant-c"), ORG, "namespace tenant-c may serve no Gitea owner", id="namespace-not-named"),
        pytest.param(Group("tenant-a", deleting=True), {"scope": "org", "org": "other"}, "", id="deleted-drains"),
    ],
)
def test_a_pinned_namespace_serves_only_its_owners(group: Group, changes: dict[str, Any], refused: str) -> None:
    pins = Settings(namespace_owners=PINS).pins
    ((_, valid, problem),) = ownership.pinned([(group, spec(**changes), "")], pins)
    if not refused:
        assert valid is not None and problem == ""
        return
    assert valid is None
    assert refused in problem and "GRS_NAMESPACE_OWNERS" in problem, problem


def test_no_pin_refuses_nothing() -> None:
    views = [(Group("anywhere"), spec(**GLOBAL), "")]
    assert ownership.pinned(views, Settings().pins) == views
    assert ownership.pinned(views, Settings(namespace_owners="").pins) == views


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("tenant-a=acme,tenant-a=bob", id="namespace-twice"),
        pytest.param("tenant-a=", id="no-owner"),
        pytest.param("tenant-a", id="no-equals"),
        pytest.param("Tenant=acme", id="not-a-namespace"),
        pytest.param("tenant-a=acme|", id="empty-owner"),
    ],
)
def test_a_malformed_pin_refuses_to_start(text: str) -> None:
    with pytest.raises(ValidationError, match=r"namespace_owners|GRS_NAMESPACE_OWNERS"):
        Settings(namespace_owners=text)
