"""Settings: refuse to start without a secret, read secrets from files, never print them."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from reconciler.settings import Settings as ReconcilerSettings
from webhook_scaler.config import ConfigError, load, unknown
from webhook_scaler.delivery import SigningKey
from webhook_scaler.settings import Settings


def from_env(environ: dict[str, str]) -> Settings:
    return load(Settings, environ)


def test_no_secret_refuses_to_start() -> None:
    with pytest.raises(ConfigError, match="GRS_WEBHOOK_SECRET"):
        from_env({})


def test_explicit_insecure_mode_starts_without_secret() -> None:
    s = from_env({"GRS_INSECURE_ACCEPT_UNSIGNED_WEBHOOKS": "true"})
    assert s.signing_keys == ()


def test_secrets_from_a_mounted_file_one_per_line(tmp_path: Path) -> None:
    f = tmp_path / "secrets"
    f.write_text("first-secret\n\nsecond-secret\n")
    s = from_env({"GRS_WEBHOOK_SECRET_FILE": str(f), "GRS_REDIS_PASSWORD": "pw"})
    assert s.signing_keys == (SigningKey(b"first-secret"), SigningKey(b"second-secret"))
    assert "first-secret" not in repr(s) and "pw" not in repr(s)


def test_a_secret_line_may_bind_the_secret_to_owners(tmp_path: Path) -> None:
    f = tmp_path / "secrets"
    f.write_text("@Acme,beta  s3cret-acme\nany-owner\n")
    keys = from_env({"GRS_WEBHOOK_SECRET_FILE": str(f)}).signing_keys
    assert keys == (SigningKey(b"s3cret-acme", frozenset({"acme", "beta"})), SigningKey(b"any-owner"))
    assert "s3cret" not in repr(keys)


@pytest.mark.parametrize("line", ["@acme", "@ s3cret", "@, s3cret"])
def test_a_bound_line_without_owners_or_secret_is_refused_without_echoing_it(tmp_path: Path, line: str) -> None:
    f = tmp_path / "secrets"
    f.write_text(f"ok-secret\n{line}\n")
    with pytest.raises(ConfigError, match="line 2: a bound secret is `@owner1,owner2 SECRET`") as refused:
        from_env({"GRS_WEBHOOK_SECRET_FILE": str(f)})
    assert "s3cret" not in str(refused.value)


def test_redis_password_from_a_file_for_both_processes(tmp_path: Path) -> None:
    f = tmp_path / "password"
    f.write_text("pw\n")
    env = {"GRS_REDIS_PASSWORD_FILE": str(f), "GRS_INSECURE_ACCEPT_UNSIGNED_WEBHOOKS": "true"}
    for model in (Settings, ReconcilerSettings):
        password = load(model, env).redis_password
        assert password is not None and password.get_secret_value() == "pw"


def test_unreadable_secret_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="GRS_WEBHOOK_SECRET_FILE"):
        from_env({"GRS_WEBHOOK_SECRET_FILE": str(tmp_path / "missing")})


@pytest.mark.parametrize(
    ("env", "names"),
    [
        pytest.param({"GRS_LISTEN_PORT": "0"}, "GRS_LISTEN_PORT", id="port"),
        pytest.param({"GRS_MAX_BODY_BYTES": "lots"}, "GRS_MAX_BODY_BYTES", id="body-limit"),
        pytest.param({"GRS_REDIS_PREFIX": "a b"}, "GRS_REDIS_PREFIX", id="prefix"),
        pytest.param({"GRS_WEBHOOK_PATH": "nope"}, "GRS_WEBHOOK_PATH", id="path"),
    ],
)
def test_bad_values_name_their_variable(env: dict[str, str], names: str) -> None:
    with pytest.raises(ConfigError, match=names) as err:
        from_env({"GRS_WEBHOOK_SECRET": "s3cret-value", **env})
    assert "s3cret-value" not in str(err.value)


def test_reconciler_serves_a_list_of_namespaces_or_all() -> None:
    assert ReconcilerSettings(watch_namespace="ci-a,ci-b,ci-a").namespaces == ("ci-a", "ci-b")
    assert ReconcilerSettings(watch_namespace="ci").namespaces == ("ci",)
    assert ReconcilerSettings().namespaces == ()
    for bad in ("CI", "ci a", "ci,,b", ","):
        with pytest.raises(ValidationError):
            ReconcilerSettings(watch_namespace=bad)


def test_choices_are_read_in_any_case() -> None:
    env = {"GRS_LOG_LEVEL": "info", "GRS_LOG_FORMAT": "Text", "GRS_INSECURE_ACCEPT_UNSIGNED_WEBHOOKS": "true"}
    receiver, reconciler = load(Settings, env), load(ReconcilerSettings, env)
    assert (
        (receiver.log_level, receiver.log_format) == (reconciler.log_level, reconciler.log_format) == ("INFO", "text")
    )


def test_each_bad_setting_is_one_plain_line_naming_its_variable(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    secrets.write_text("@acme\n")
    with pytest.raises(ConfigError) as refused:
        load(ReconcilerSettings, {"GRS_POLL_INTERVAL": "soon", "GRS_LOG_LEVEL": "loud"})
    lines = str(refused.value).splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith("GRS_POLL_INTERVAL: Input should be a valid number")
    assert lines[1] == "GRS_LOG_LEVEL: Input should be 'DEBUG', 'INFO', 'WARNING' or 'ERROR'"
    with pytest.raises(ConfigError) as refused:
        from_env({"GRS_WEBHOOK_SECRET_FILE": str(secrets)})
    assert str(refused.value).startswith("GRS_WEBHOOK_SECRET or GRS_WEBHOOK_SECRET_FILE: line 1: a bound secret")
    assert "Value error" not in str(refused.value)


def test_a_grs_variable_no_setting_reads_is_named_with_the_closest_one() -> None:
    env = {"GRS_POL_INTERVAL": "3", "GRS_REDIS_PASSWORD_FILE": "/x", "GRS_POLL_INTERVAL": "3", "OTHER": "1"}
    assert unknown(ReconcilerSettings, env) == [
        "GRS_POL_INTERVAL is not a setting of this program and is ignored; did you mean GRS_POLL_INTERVAL?"
    ]
    assert unknown(Settings, {"GRS_ZZZZ": "1"}) == ["GRS_ZZZZ is not a setting of this program and is ignored"]
