"""How the reconciler reaches Gitea: the CA file it is given (`GRS_GITEA_CA_FILE`) and its proxies."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from reconciler.__main__ import egress
from reconciler.kube.egress import Egress
from reconciler.kube.runner_cache import RunnerCache
from reconciler.settings import Settings
from tests.node.pki import Authority


def test_the_ca_file_is_trusted_besides_the_systems_and_given_to_runners(tmp_path: Path) -> None:
    ca = Authority(tmp_path / "pki").ca.cert
    way_out, context = egress(Settings(gitea_ca_file=str(ca)))
    assert way_out.ca_pem == ca.read_text().strip()
    subjects = [rdn[0][1] for c in context.get_ca_certs() for rdn in c["subject"] if rdn[0][0] == "commonName"]
    assert "grs-test-ca" in subjects
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "No such file or directory"),
        ("not a certificate\n", "no PEM certificate in it"),
        ("", "no PEM certificate in it"),
    ],
)
def test_a_ca_file_that_cannot_serve_stops_the_start_saying_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, said: str
) -> None:
    path = tmp_path / "ca.crt"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SystemExit) as stopped:
        egress(Settings(gitea_ca_file=str(path)))
    assert stopped.value.code == 2
    assert capsys.readouterr().err.strip() == f"reconciler: GRS_GITEA_CA_FILE={path}: {said}"


def test_proxies_come_from_the_usual_variables_in_either_case() -> None:
    way_out = Egress.of(environ={"http_proxy": "http://p:3128", "HTTPS_PROXY": "http://q:3128", "PATH": "/bin"})
    assert way_out.proxy == (("HTTP_PROXY", "http://p:3128"), ("HTTPS_PROXY", "http://q:3128"))
    assert not Egress.of(environ={}) and Egress.of(environ={}).digest == ""


def test_the_runner_cache_comes_with_its_secret_from_a_file(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("shared-secret\n")
    settings = Settings(
        runner_cache_url="http://cache:8088/", runner_cache_secret_file=str(secret), runner_cache_secret_name="c"
    )
    way_out, _ = egress(settings)
    assert way_out.cache is not None and way_out.cache.secret == "shared-secret" and way_out.cache.secret_name == "c"
    assert egress(Settings(runner_cache_url="http://cache:8088/"))[0].cache == RunnerCache("http://cache:8088/")
    assert egress(Settings())[0].cache is None


def test_a_cache_secret_file_that_cannot_be_read_stops_the_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "secret"
    with pytest.raises(SystemExit) as stopped:
        egress(Settings(runner_cache_url="http://cache:8088/", runner_cache_secret_file=str(missing)))
    assert stopped.value.code == 2
    assert (
        capsys.readouterr().err.strip()
        == f"reconciler: GRS_RUNNER_CACHE_SECRET_FILE={missing}: No such file or directory"
    )
