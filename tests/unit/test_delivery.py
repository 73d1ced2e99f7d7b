"""delivery.py: Gitea's real deliveries verify and parse; anything tampered with is refused."""

from __future__ import annotations

import hashlib
import hmac
import json
from urllib.parse import quote

import pytest

from tests.conftest import SECRET, RecordedDelivery, load_deliveries
from tests.jobs import gitea_time, payload
from webhook_scaler import delivery
from webhook_scaler.gitea import JobStatus, WorkflowJobPayload

KEY = SECRET.encode()
ALL = load_deliveries()
SIG_HEADERS = ("X-Gitea-Signature", "X-Gogs-Signature", "X-Hub-Signature", "X-Hub-Signature-256")


def without(headers: dict[str, str], *names: str) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k not in names}


@pytest.mark.parametrize("d", ALL, ids=lambda d: d.name)
def test_every_real_delivery_verifies_and_parses(d: RecordedDelivery) -> None:
    parsed = delivery.parse(d.body, headers=d.headers, secrets=[KEY])
    assert parsed.event == "workflow_job"
    assert parsed.delivery_id == d.headers["X-Gitea-Delivery"]
    assert parsed.payload is not None
    assert parsed.payload.workflow_job.id == d.json["workflow_job"]["id"]
    assert parsed.payload.action.value == d.json["action"]
    assert parsed.payload.repository.full_name == d.json["repository"]["full_name"]


def test_version_quirks_are_tolerated(deliveries: dict[str, RecordedDelivery]) -> None:
    def job(name: str) -> WorkflowJobPayload:
        d = deliveries[name]
        p = delivery.parse(d.body, headers=d.headers, secrets=[KEY]).payload
        assert p is not None
        return p

    queued = job("01-queued.json").workflow_job
    assert queued.steps == () and queued.started_at is None and queued.completed_at is None
    assert not queued.was_picked
    assert queued.repo_full_name == "acme/widgets"
    done = job("04-completed-success.json").workflow_job
    assert done.runner_name is None and done.runner_id and done.was_picked
    cancelled = job("06-completed-cancelled-never-picked.json")
    assert cancelled.workflow_job.head_branch == "feature/x"
    assert not cancelled.workflow_job.was_picked
    assert job("02-waiting.json").action is JobStatus.WAITING


def test_skipped_job_without_conclusion_as_gitea_1_24_sends(deliveries: dict[str, RecordedDelivery]) -> None:
    d = deliveries["05-completed-skipped.json"]
    body = d.body.replace(b'"conclusion": "skipped",\n', b"")
    assert body != d.body
    headers = {"X-Gitea-Event": "workflow_job", "X-Gitea-Signature": hmac.new(KEY, body, "sha256").hexdigest()}
    parsed = delivery.parse(body, headers=headers, secrets=[KEY])
    assert parsed.payload is not None and parsed.payload.workflow_job.conclusion is None


def sign(body: bytes, key: bytes = KEY) -> str:
    return hmac.new(key, body, hashlib.sha256).hexdigest()


@pytest.mark.parametrize(
    ("mutate", "error"),
    [
        pytest.param(lambda b, h: (b.replace(b"widgets", b"gadgets"), h), delivery.SignatureError, id="tampered-body"),
        pytest.param(lambda b, h: (b[:-10], h), delivery.SignatureError, id="truncated-body"),
        pytest.param(
            lambda b, h: (b, {**without(h, *SIG_HEADERS), "X-Gitea-Signature": sign(b, b"wrong")}),
            delivery.SignatureError,
            id="wrong-secret",
        ),
        pytest.param(lambda b, h: (b, without(h, *SIG_HEADERS)), delivery.MissingSignatureError, id="no-signature"),
        pytest.param(
            lambda b, h: (b, without(h, "X-Gitea-Signature", "X-Gogs-Signature", "X-Hub-Signature-256")),
            delivery.MissingSignatureError,
            id="sha1-only",
        ),
        pytest.param(
            lambda b, h: (b, {**h, "X-Gitea-Signature": "", "X-Hub-Signature-256": "sha256="}),
            delivery.MissingSignatureError,
            id="empty-signatures-as-sent-without-secret",
        ),
        pytest.param(lambda b, h: (b, {**h, "X-Gitea-Signature": "zz" * 32}), delivery.SignatureError, id="not-hex"),
        pytest.param(
            lambda b, h: (b, {**without(h, "X-Gitea-Signature"), "X-Hub-Signature-256": sign(b)}),
            delivery.SignatureError,
            id="hub-signature-without-prefix",
        ),
    ],
)
def test_bad_signatures_are_refused(
    mutate: object, error: type[Exception], deliveries: dict[str, RecordedDelivery]
) -> None:
    d = deliveries["01-queued.json"]
    body, headers = mutate(d.body, dict(d.headers))  # type: ignore[operator]
    with pytest.raises(error):
        delivery.parse(body, headers=headers, secrets=[KEY])


def test_hub_signature_256_alone_is_accepted(deliveries: dict[str, RecordedDelivery]) -> None:
    d = deliveries["03-in_progress.json"]
    headers = without(d.headers, "X-Gitea-Signature", "X-Gogs-Signature", "X-Hub-Signature")
    assert delivery.parse(d.body, headers=headers, secrets=[KEY]).payload is not None


def test_any_of_several_secrets_verifies(deliveries: dict[str, RecordedDelivery]) -> None:
    d = deliveries["01-queued.json"]
    assert delivery.parse(d.body, headers=d.headers, secrets=[b"old", KEY]).payload is not None
    with pytest.raises(delivery.SignatureError):
        delivery.parse(d.body, headers=d.headers, secrets=[b"old", b"other"])


def test_header_names_are_case_insensitive(deliveries: dict[str, RecordedDelivery]) -> None:
    d = deliveries["01-queued.json"]
    lowered = {k.lower(): v for k, v in d.headers.items()}
    assert delivery.parse(d.body, headers=lowered, secrets=[KEY]).delivery_id == d.headers["X-Gitea-Delivery"]


def test_form_content_type_is_verified_over_the_json(deliveries: dict[str, RecordedDelivery]) -> None:
    d = deliveries["01-queued.json"]
    form = b"payload=" + quote(d.body.decode(), safe="").encode()
    headers = {**d.headers, "Content-Type": "application/x-www-form-urlencoded"}
    parsed = delivery.parse(form, headers=headers, secrets=[KEY])
    assert parsed.payload is not None and parsed.payload.workflow_job.id == 101
    with pytest.raises(delivery.PayloadError):
        delivery.parse(b"nopayload=1", headers=headers, secrets=[KEY])


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"{not json", id="not-json"),
        pytest.param(b'{"action": "queued"}', id="missing-fields"),
        pytest.param(b'{"action": "exploded", "workflow_job": {}, "repository": {}}', id="unknown-action"),
        pytest.param(b"\xff\xfe", id="not-utf8"),
    ],
)
def test_malformed_payloads_are_payload_errors(body: bytes) -> None:
    headers = {"X-Gitea-Event": "workflow_job", "X-Gitea-Signature": sign(body)}
    with pytest.raises(delivery.PayloadError):
        delivery.parse(body, headers=headers, secrets=[KEY])


def test_other_events_are_verified_but_carry_no_payload() -> None:
    body = b'{"zen": "hi"}'
    parsed = delivery.parse(body, headers={"X-Gitea-Event": "ping", "X-Gitea-Signature": sign(body)}, secrets=[KEY])
    assert parsed.event == "ping" and parsed.payload is None
    with pytest.raises(delivery.SignatureError):
        delivery.parse(body, headers={"X-Gitea-Event": "ping", "X-Gitea-Signature": sign(b"x")}, secrets=[KEY])


def test_missing_event_header_is_a_payload_error(deliveries: dict[str, RecordedDelivery]) -> None:
    d = deliveries["01-queued.json"]
    headers = {"X-Gitea-Signature": d.headers["X-Gitea-Signature"]}
    with pytest.raises(delivery.PayloadError):
        delivery.parse(d.body, headers=headers, secrets=[KEY])


def test_no_secrets_configured_accepts_unsigned(deliveries: dict[str, RecordedDelivery]) -> None:
    d = deliveries["01-queued.json"]
    headers = without(d.headers, *SIG_HEADERS)
    assert delivery.parse(d.body, headers=headers, secrets=[]).payload is not None


def test_a_secret_on_several_bound_lines_speaks_for_all_their_owners() -> None:
    body = json.dumps(payload("queued", repo="beta/tools")).encode()
    headers = {"X-Gitea-Signature": sign(body, b"shared"), "X-Gitea-Event": "workflow_job"}
    keys = [delivery.SigningKey(b"shared", frozenset({"acme"})), delivery.SigningKey(b"shared", frozenset({"beta"}))]
    assert delivery.parse(body, headers=headers, secrets=keys).payload is not None
    with pytest.raises(delivery.OwnerError, match="may not speak for the repositories of beta"):
        delivery.parse(body, headers=headers, secrets=keys[:1])


DAY = 24 * 3600


@pytest.mark.parametrize(
    ("status", "age_s", "outside"),
    [
        pytest.param("queued", DAY + 1, True, id="queued-a-day-old"),
        pytest.param("waiting", DAY + 1, True, id="waiting-a-day-old"),
        pytest.param("queued", DAY - 60, False, id="queued-within"),
        pytest.param("in_progress", 7 * DAY, False, id="in_progress-never"),
        pytest.param("completed", 7 * DAY, False, id="completed-never"),
    ],
)
def test_a_queued_or_waiting_delivery_about_an_old_job_is_outside_the_replay_window(
    status: str, age_s: int, outside: bool
) -> None:
    created = 1_800_000_000
    body = payload(status, created_at=gitea_time(created))
    parsed = WorkflowJobPayload.model_validate(body)
    assert delivery.outside_window(parsed, now_s=created + age_s, window_s=DAY) is outside


def test_a_delivery_without_created_at_is_not_judged() -> None:
    body = payload("queued")
    body["workflow_job"].pop("created_at")
    parsed = WorkflowJobPayload.model_validate(body)
    assert delivery.outside_window(parsed, now_s=4_000_000_000, window_s=60) is False


@pytest.mark.parametrize(
    ("status", "ahead_s", "refused"),
    [
        pytest.param("queued", -DAY, False, id="a-day-ago"),
        pytest.param("queued", 0, False, id="now"),
        pytest.param("waiting", 300, False, id="at-the-skew"),
        pytest.param("queued", 301, True, id="past-the-skew"),
        pytest.param("in_progress", 301, True, id="in_progress-too"),
        pytest.param("completed", DAY, True, id="completed-a-day-ahead"),
    ],
)
def test_a_job_created_further_ahead_than_the_skew_is_refused(status: str, ahead_s: int, refused: bool) -> None:
    now = 1_800_000_000
    parsed = WorkflowJobPayload.model_validate(payload(status, job_id=5, created_at=gitea_time(now + ahead_s)))
    if not refused:
        delivery.not_from_future(parsed, now_s=now, skew_s=300)
        return
    with pytest.raises(delivery.FromFutureError, match=rf"^job 5's created_at is {ahead_s} s ahead") as caught:
        delivery.not_from_future(parsed, now_s=now, skew_s=300)
    assert caught.value.reason == "from_future"
    assert isinstance(caught.value, delivery.PayloadError)  # answered 400, like any payload that cannot be true


def test_a_delivery_without_created_at_is_not_judged_for_the_future() -> None:
    body = payload("queued")
    body["workflow_job"].pop("created_at")
    delivery.not_from_future(WorkflowJobPayload.model_validate(body), now_s=0, skew_s=0)
