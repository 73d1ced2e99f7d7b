"""hook_keys.py: a managed webhook's secret speaks for its own scope only, beside the secret lines."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest

from tests.jobs import payload
from webhook_scaler import delivery, hook_keys
from webhook_scaler.hook_keys import Deriver

KEY = b"the-webhook-key-of-this-install"
DERIVER = Deriver(KEY, ("", "b"))


def signed(body: bytes, secret: str | bytes) -> dict[str, str]:
    raw = secret.encode() if isinstance(secret, str) else secret
    return {"X-Gitea-Event": "workflow_job", "X-Gitea-Signature": hmac.new(raw, body, hashlib.sha256).hexdigest()}


def about(repo: str) -> bytes:
    return json.dumps(payload("queued", repo=repo)).encode()


def parse(body: bytes, headers: dict[str, str], *, lines: tuple[bytes, ...] = ()) -> delivery.Delivery:
    return delivery.parse(body, headers=headers, secrets=lines, derived=DERIVER.keys)


def test_an_orgs_managed_secret_signs_its_own_repositories() -> None:
    body = about("Acme/widgets")
    parsed = parse(body, signed(body, hook_keys.secret(KEY, instance="", kind="owner", target="acme")))
    assert parsed.payload is not None and parsed.instance == ""


def test_an_orgs_managed_secret_cannot_speak_for_another_owner() -> None:
    """An org owner reads their webhook's secret in Gitea; a delivery about another owner's job, signed
    with it, is refused, whatever the body claims."""
    body = about("globex/app")
    with pytest.raises(delivery.SignatureError):
        parse(body, signed(body, hook_keys.secret(KEY, instance="", kind="owner", target="acme")))


def test_a_repositorys_managed_secret_speaks_for_that_repository_only() -> None:
    secret = hook_keys.secret(KEY, instance="", kind="repo", target="acme/widgets")
    ours = about("acme/widgets")
    assert parse(ours, signed(ours, secret)).payload is not None
    sibling = about("acme/gadgets")
    with pytest.raises(delivery.SignatureError):
        parse(sibling, signed(sibling, secret))


def test_a_system_webhooks_secret_speaks_for_every_owner_of_its_instance_only() -> None:
    body = about("globex/app")
    parsed = parse(body, signed(body, hook_keys.secret(KEY, instance="b", kind="instance")))
    assert parsed.payload is not None and parsed.instance == "b"
    with pytest.raises(delivery.SignatureError):  # an instance the receiver does not serve
        parse(body, signed(body, hook_keys.secret(KEY, instance="c", kind="instance")))


def test_another_installs_key_signs_nothing() -> None:
    body = about("acme/widgets")
    with pytest.raises(delivery.SignatureError):
        parse(body, signed(body, hook_keys.secret(b"another-install-key", instance="", kind="owner", target="acme")))


def test_secret_lines_still_sign_and_still_bind_beside_managed_webhooks() -> None:
    body = about("globex/app")
    assert parse(body, signed(body, "line-secret"), lines=(b"line-secret",)).payload is not None
    bound = delivery.SigningKey(b"acme-line", frozenset({"acme"}))
    with pytest.raises(delivery.OwnerError):
        delivery.parse(body, headers=signed(body, "acme-line"), secrets=(bound,), derived=DERIVER.keys)


def test_with_managed_webhooks_alone_an_unsigned_or_unrelated_delivery_is_refused() -> None:
    """No secret line at all is not the insecure mode once a key is set: nothing goes unsigned."""
    body = about("acme/widgets")
    with pytest.raises(delivery.MissingSignatureError):
        parse(body, {"X-Gitea-Event": "workflow_job"})
    ping = b'{"zen": "no repository here"}'
    with pytest.raises(delivery.SignatureError):
        parse(ping, signed(ping, hook_keys.secret(KEY, instance="", kind="instance")))
