"""One token: `registrationToken` is optional in the spec and the CRD (gitea-runner-operator's form still
reads), and a registration token of another scope is a reason of its own, which Ready says."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from reconciler.decide.status import desired_status
from reconciler.kube.crd import crd
from reconciler.loop.passes.registration_scopes import ScopeChecks, Verdict
from reconciler.model.spec import RunnerGroupSpec
from tests.groups import operator_form, spec, spec_dict

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def test_a_group_needs_no_registration_token_and_the_operators_form_still_reads() -> None:
    body = spec_dict()
    del body["registrationToken"]
    assert spec(registrationToken=None).registration_token is None
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert "registrationToken" not in schema["required"] and "authToken" in schema["required"]
    assert "registrationToken" in schema["properties"]
    assert RunnerGroupSpec.model_validate(body).registration_token is None
    old = RunnerGroupSpec.model_validate(operator_form()).registration_token
    assert old is not None and (old.secret_ref.name, old.secret_ref.key) == ("gitea", "reg")


def conditions(**kw: Any) -> dict[str, dict[str, Any]]:
    status = desired_status(generation=1, previous={}, spec=spec(), now=NOW, counts=None, invalid="", gitea=None,
                            last_poll=None, failed=(), **kw)  # fmt: skip
    return {c["type"]: c for c in status["conditions"]}


def test_a_registration_token_of_another_scope_is_registration_scope_mismatch_and_ready_says_so() -> None:
    verdict = Verdict(False, 0.0, "runner ci-1-0.ab registered in org acme; its row was deleted through org acme")
    group = spec(scope="user", user="alice", org=None)
    refusal = ScopeChecks.refusal(verdict, group, secret="Secret ci/tokens, key reg", refused="registration")
    got = conditions(create_refused=str(refusal))
    admitted, ready = got["RunnersAdmitted"], got["Ready"]
    assert (admitted["status"], admitted["reason"]) == ("False", "RegistrationScopeMismatch")
    assert (ready["status"], ready["reason"]) == ("False", "RegistrationScopeMismatch")
    assert "group's scope (user alice)" in admitted["message"] and "registered in org acme" in admitted["message"]
    assert conditions(create_refused="registration refused: x")["RunnersAdmitted"]["reason"] == "RegistrationRefused"
