"""Verifies and parses one Gitea webhook delivery: bytes and headers in, a typed event or a typed error out.

Owns: the signature check (hex HMAC-SHA256 of the raw body in `X-Gitea-Signature`, or `sha256=` in
`X-Hub-Signature-256`; SHA-1 is never accepted), which owners the secret that signed may speak for,
the event and delivery-id headers, the form-encoded variant, parsing into `gitea` models, telling
a replay that no delivery id or record can tell any more (`outside_window`), and refusing a job
created in the future (`not_from_future`). Must
not do I/O, log, or know about HTTP status codes: the aiohttp handler maps the errors raised here to
statuses.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC
from urllib.parse import parse_qs

from pydantic import ValidationError

from webhook_scaler.gitea import JobStatus, WorkflowJobPayload

WORKFLOW_JOB = "workflow_job"
_FORM = "application/x-www-form-urlencoded"


class DeliveryError(Exception):
    """A delivery that must be refused; `reason` is a short constant safe to log and count."""

    reason = "invalid"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class SignatureError(DeliveryError):
    """The signature is missing, malformed, SHA-1 only, or made with none of our secrets."""

    reason = "bad_signature"


class MissingSignatureError(SignatureError):
    """No SHA-256 signature header at all (an empty one counts as missing)."""

    reason = "missing_signature"


class OwnerError(DeliveryError):
    """Signed with a secret bound to other owners than the delivery's repository's."""

    reason = "foreign_owner"


class PayloadError(DeliveryError):
    """The body is not JSON, or not a payload of the shape its event promises."""

    reason = "bad_payload"


class FromFutureError(PayloadError):
    """About a job Gitea created later than now, by more than the clocks may disagree: not Gitea's."""

    reason = "from_future"


@dataclass(frozen=True, slots=True)
class SigningKey:
    """A webhook secret, and the owners (lower-case) whose repositories it may speak for; None: any."""

    secret: bytes = field(repr=False)
    owners: frozenset[str] | None = None
    instance: str = ""  # the Gitea instance whose deliveries it signs ("": the default one)
    repo: str | None = None  # the one repository (`owner/name`, lower-case) it may speak for; None: any of `owners`


@dataclass(frozen=True, slots=True)
class Delivery:
    """A verified delivery of any event; `payload` is set for `workflow_job` only."""

    event: str
    delivery_id: str | None
    payload: WorkflowJobPayload | None
    instance: str = ""  # the Gitea instance its secret speaks for ("": the default one)


def header(headers: Mapping[str, str], name: str) -> str:
    """The header's value, matching names case-insensitively ('' when absent)."""
    value = headers.get(name)
    if value is not None:
        return value.strip()
    lower = name.lower()
    for key, val in headers.items():
        if key.lower() == lower:
            return val.strip()
    return ""


def signed_bytes(body: bytes, *, content_type: str) -> bytes:
    """The bytes Gitea signs: the raw JSON, which the form content type wraps as `payload=`."""
    if content_type.split(";", 1)[0].strip().lower() != _FORM:
        return body
    try:
        form = parse_qs(body.decode("utf-8"), strict_parsing=True, max_num_fields=8)
        (payload,) = form["payload"]
    except (UnicodeDecodeError, ValueError, KeyError) as exc:
        raise PayloadError("form body without a single payload field") from exc
    return payload.encode("utf-8")


def verify(payload: bytes, *, headers: Mapping[str, str], secrets: Sequence[bytes | SigningKey]) -> SigningKey | None:
    """The key whose secret made the SHA-256 signature over `payload` (with the owners of every line
    holding that secret); SignatureError if none did.

    With no secrets configured (the explicitly insecure mode) every delivery is accepted (None).
    """
    if not secrets:
        return None
    given = header(headers, "X-Gitea-Signature")
    if not given:
        hub = header(headers, "X-Hub-Signature-256")
        if hub and not hub.startswith("sha256="):
            raise SignatureError("X-Hub-Signature-256 must start with sha256=")
        given = hub.removeprefix("sha256=")
    if not given:
        raise MissingSignatureError("no X-Gitea-Signature or X-Hub-Signature-256 (SHA-1 is not accepted)")
    try:
        given_bytes = bytes.fromhex(given)
    except ValueError as exc:
        raise SignatureError("signature is not hex") from exc
    matched = []
    for key in secrets:
        key = key if isinstance(key, SigningKey) else SigningKey(key)
        expected = hmac.new(key.secret, payload, hashlib.sha256).digest()
        if hmac.compare_digest(expected, given_bytes):
            matched.append(key)
    if not matched:
        raise SignatureError("signature does not match")
    if len(matched) == 1:
        return matched[0]
    # One secret on several lines speaks for all their owners (any, if one line is bare).
    # (`Settings` refuses one secret on lines of two instances.)
    if any(k.owners is None for k in matched):
        return SigningKey(matched[0].secret, instance=matched[0].instance)
    return SigningKey(matched[0].secret, frozenset(o for k in matched for o in k.owners or ()), matched[0].instance)


def parse(
    body: bytes,
    *,
    headers: Mapping[str, str],
    secrets: Sequence[bytes | SigningKey],
    derived: Callable[[bytes], Sequence[SigningKey]] | None = None,
) -> Delivery:
    """Verify and parse a delivery; raise a DeliveryError subclass for anything to refuse (OwnerError:
    a `workflow_job` about a repository whose owner the signing secret may not speak for). `derived`:
    the secrets of the webhooks the reconciler installed (`hook_keys`), tried when no secret line signed."""
    payload = signed_bytes(body, content_type=header(headers, "Content-Type"))
    key = _signer(payload, headers, secrets, derived)
    event = header(headers, "X-Gitea-Event-Type") or header(headers, "X-Gitea-Event")
    if not event:
        raise PayloadError("no X-Gitea-Event or X-Gitea-Event-Type header")
    delivery_id = header(headers, "X-Gitea-Delivery") or None
    if event != WORKFLOW_JOB:
        return Delivery(event=event, delivery_id=delivery_id, payload=None)
    try:
        # pydantic-core parses the JSON itself and builds Python objects only for the fields we read.
        parsed = WorkflowJobPayload.model_validate_json(payload)
    except ValidationError as exc:
        errors = exc.errors(include_input=False)
        if any(err["type"] == "json_invalid" for err in errors):
            raise PayloadError("body is not valid JSON") from exc
        fields = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in errors[:5])
        raise PayloadError(f"workflow_job payload does not fit the model: {fields}") from exc
    owner = parsed.repository.full_name.split("/", 1)[0].lower()
    if key is not None and key.owners is not None and owner not in key.owners:
        raise OwnerError(f"this webhook secret may not speak for the repositories of {owner}")
    if key is not None and key.repo is not None and parsed.repository.full_name.lower() != key.repo:
        raise OwnerError(f"this webhook secret may speak for the repository {key.repo} only")
    return Delivery(event=event, delivery_id=delivery_id, payload=parsed, instance=key.instance if key else "")


def _signer(
    payload: bytes,
    headers: Mapping[str, str],
    secrets: Sequence[bytes | SigningKey],
    derived: Callable[[bytes], Sequence[SigningKey]] | None,
) -> SigningKey | None:
    """The key that signed (`verify`): a secret line's, else a managed webhook's. With neither secret
    lines nor managed webhooks, every delivery is accepted (None: the explicitly insecure mode)."""
    if derived is None:
        return verify(payload, headers=headers, secrets=secrets)
    if secrets:
        try:
            return verify(payload, headers=headers, secrets=secrets)
        except MissingSignatureError:
            raise
        except SignatureError:
            pass
    # No repository named (not a job's delivery): no managed webhook signed it. A random key that matches
    # nothing still says what is wrong with the signature header itself.
    return verify(payload, headers=headers, secrets=derived(payload) or [SigningKey(os.urandom(32))])


def outside_window(payload: WorkflowJobPayload, *, now_s: float, window_s: float) -> bool:
    """Whether this is a `queued` or `waiting` delivery about a job Gitea created more than `window_s`
    seconds before `now_s`: taken for a replay (`GRS_REPLAY_WINDOW`).

    While a job's record lives, its ranks make a replay change nothing; past it only the job's age
    tells (the delivery id is not signed, so it tells only exact resends). A job held on `needs:` or
    an approval turns `queued` long after its `created_at`, and a re-run keeps it: so the receiver
    records such a `queued` as `aged`, for the reconciler to start once its poll lists the job, rather
    than drop it. A delivery without `created_at` (not Gitea's) is not judged.
    """
    job = payload.workflow_job
    if job.status not in (JobStatus.QUEUED, JobStatus.WAITING) or job.created_at is None:
        return False
    created = job.created_at if job.created_at.tzinfo else job.created_at.replace(tzinfo=UTC)
    return now_s - created.timestamp() > window_s


def not_from_future(payload: WorkflowJobPayload, *, now_s: float, skew_s: float) -> None:
    """FromFutureError if Gitea created the job more than `skew_s` seconds after `now_s`
    (`GRS_CLOCK_SKEW`): no job is delivered before it exists, so such a delivery is forged, or a clock
    is wrong. It would also never age past the replay window. A delivery without `created_at` is not judged."""
    created = payload.workflow_job.created_at
    if created is None:
        return
    ahead = (created if created.tzinfo else created.replace(tzinfo=UTC)).timestamp() - now_s
    if ahead > skew_s:
        raise FromFutureError(
            f"job {payload.workflow_job.id}'s created_at is {ahead:.0f} s ahead of this receiver's clock, more than "
            f"GRS_CLOCK_SKEW ({skew_s:.0f} s) allows: no job is delivered before Gitea created it (check Gitea's and "
            "this host's clocks); not recorded"
        )
