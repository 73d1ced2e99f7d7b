"""Record the answers of a real Gitea to every call the reconciler makes, for the fake to be checked against.

TEST TOOL ONLY: `python -m tests.gitea_record [OUT]` (default tests/data/gitea-<major.minor>/). It starts the
Gitea the node tests run (tests/e2e/harness.py, the cached peer binary; no node, no cluster), makes an
org `acme` with a repository `acme/app`, a user repository `root/solo`, a workflow in each, and a
runner of its own (`recorder`, non-ephemeral, label `grs-record`) that takes three jobs over Gitea's
runner RPC: one it finishes with success, one with failure, one it keeps running. The rest stay
queued (a label nobody serves) or waiting (`needs:` a queued job). It also registers an ephemeral
runner that never comes online, as the reconciler does. Then it records, one JSON file per answer:
the jobs lists (repo, org, admin; with each status filter Gitea takes, an unknown one, pages), the
runner lists, rows, PATCH and DELETE, registration tokens, /version, /user, /user/orgs, the user's
repositories, the Register RPC, and the 401, 403 and 404 answers; and the OpenAPI spec this Gitea
serves (swagger.v1.json). Each file holds the request, the
status, the headers that matter (`X-Total-Count`, `Link`, `Content-Type`) and the body as sent.

Redacted: every token and runner uuid (`REDACTED`); the Gitea's own address is written as
https://gitea.example.com. The tests read the files; they never start Gitea.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.e2e.harness import ADMIN, Gitea

ROOT_URL = "https://gitea.example.com"
LABEL = "grs-record"
WORKFLOW = """on: push
jobs:
  done-ok:
    runs-on: grs-record
    steps: [{run: "true"}]
  done-failed:
    runs-on: grs-record
    steps: [{run: "false"}]
  running:
    runs-on: grs-record
    steps: [{run: "true"}]
  queued:
    runs-on: nobody-serves-this
    steps: [{run: "true"}]
  waiting:
    needs: queued
    runs-on: nobody-serves-this
    steps: [{run: "true"}]
"""
SOLO_WORKFLOW = """on: push
jobs:
  solo:
    runs-on: nobody-serves-this
    steps: [{run: "true"}]
"""
JOB_STATUSES = [
    "queued", "in_progress", "waiting", "pending", "requested", "action_required", "completed",
    "success", "failure", "skipped", "neutral", "cancelled", "timed_out",
]  # fmt: skip
KEPT_HEADERS = ("Content-Type", "X-Total-Count", "Link")


class Recorder:
    """Calls one Gitea and writes each answer to a file of its own."""

    def __init__(self, gitea: Gitea, out: Path) -> None:
        self.gitea = gitea
        self.out = out
        self.secrets: set[str] = {gitea.token}

    def call(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        token: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], bytes]:
        """One request; its status, headers and body, whatever the status."""
        sent = {"Content-Type": "application/json", **(headers or {})}
        if token is None:
            token = self.gitea.token
        if token:
            sent["Authorization"] = f"token {token}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.gitea.url + path, method=method, data=data, headers=sent)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, dict(resp.headers.items()), resp.read()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers.items()), err.read()

    def record(self, name: str, method: str, path: str, **kwargs: Any) -> Any:
        """Make the call, write `name`.json, and return the decoded body (None if empty)."""
        status, headers, raw = self.call(method, path, **kwargs)
        body = json.loads(raw) if raw.strip() else None
        entry = {
            "request": {"method": method, "path": path.split("?")[0], "query": path.partition("?")[2]},
            "status": status,
            "headers": {k: self._clean(headers[k]) for k in KEPT_HEADERS if k in headers},
            "body": self._redact(body),
        }
        if kwargs.get("body") is not None:
            entry["request"]["body"] = self._redact(kwargs["body"])
        (self.out / f"{name}.json").write_text(json.dumps(entry, indent=2) + "\n")
        return body

    def _clean(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "REDACTED")
        return re.sub(r"https?://127\.0\.0\.1:\d+", ROOT_URL, text)

    def _redact(self, node: Any) -> Any:
        if isinstance(node, dict):
            return {k: "REDACTED" if k in ("token", "uuid") else self._redact(v) for k, v in node.items()}
        if isinstance(node, list):
            return [self._redact(v) for v in node]
        return self._clean(node) if isinstance(node, str) else node


def rpc(rec: Recorder, method: str, body: Any, *, runner: dict[str, str] | None = None) -> tuple[int, Any]:
    """One call of Gitea's runner service (connect, JSON), as act_runner makes it."""
    headers = {"Connect-Protocol-Version": "1"}
    if runner:
        headers |= {"x-runner-uuid": runner["uuid"], "x-runner-token": runner["token"]}
    status, _, raw = rec.call("POST", f"/api/actions/runner.v1.RunnerService/{method}", body=body, token="",
                              headers=headers)  # fmt: skip
    return status, json.loads(raw) if raw.strip() else None


def wait_for(what: str, check: Any, timeout: float = 60) -> Any:
    """Poll `check` until it returns something true; its value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise RuntimeError(f"timed out waiting for {what}")


def setup(rec: Recorder) -> dict[str, Any]:
    """The org, the repositories, the workflows and the runners; what the recording needs of them."""
    g = rec.gitea
    g.api("POST", "/orgs", {"username": "acme"})
    g.api("POST", "/orgs/acme/repos", {"name": "app", "auto_init": True})
    g.api("POST", "/user/repos", {"name": "solo", "auto_init": True})
    g.api("POST", "/user/repos", {"name": "quiet", "private": True})  # a second page of the user's repositories
    g.push_file("acme/app", ".gitea/workflows/ci.yml", WORKFLOW, message="ci")
    g.push_file(f"{ADMIN}/solo", ".gitea/workflows/ci.yml", SOLO_WORKFLOW, message="ci")
    reg = rec.record("org-registration-token", "POST", "/api/v1/orgs/acme/actions/runners/registration-token")
    rec.secrets.add(reg["token"])
    status, answer = rpc(rec, "Register", {"name": "recorder", "token": reg["token"], "version": "record",
                                           "labels": [LABEL]})  # fmt: skip
    assert status == 200, answer
    runner = answer["runner"]
    rec.secrets |= {runner["token"], runner["uuid"]}
    rpc(rec, "Declare", {"version": "record", "labels": [LABEL]}, runner=runner)
    wait_for("five jobs", lambda: len(g.api("GET", "/repos/acme/app/actions/jobs")["jobs"]) == 5)
    tasks = []
    for _ in range(3):
        status, fetched = wait_for(
            "a task", lambda: (r := rpc(rec, "FetchTask", {}, runner=runner))[1].get("task") and r
        )
        tasks.append(fetched["task"])
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    # Gitea hands the waiting jobs out in id order (PickTask): done-ok, done-failed, then running.
    for task, result in zip(tasks, ("RESULT_SUCCESS", "RESULT_FAILURE"), strict=False):
        state = {"id": task["id"], "result": result, "startedAt": now, "stoppedAt": now}
        assert rpc(rec, "UpdateTask", {"state": state}, runner=runner)[0] == 200
    running = {"id": tasks[2]["id"], "startedAt": now}
    return {"runner": runner, "running": running, "registration_token": reg["token"]}


def record_jobs(rec: Recorder) -> None:
    """The jobs lists of each scope, with each status filter, pages, and the refusals of a bad filter."""
    for scope, path in (("repo", "/repos/acme/app"), ("org", "/orgs/acme"), ("admin", "/admin")):
        base = f"/api/v1{path}/actions/jobs"
        rec.record(f"{scope}-jobs", "GET", base)
        rec.record(f"{scope}-jobs.status-queued+in_progress", "GET", f"{base}?status=queued&status=in_progress")
        for page in (1, 2, 3):  # two rows, one a page: the first, the last, and one past it
            query = f"status=queued&status=in_progress&page={page}&limit=1"
            rec.record(f"{scope}-jobs.page-{page}.limit-1", "GET", f"{base}?{query}")
    for status in JOB_STATUSES:
        rec.record(f"repo-jobs.status-{status}", "GET", f"/api/v1/repos/acme/app/actions/jobs?status={status}")
    rec.record("repo-jobs.status-unknown", "GET", "/api/v1/repos/acme/app/actions/jobs?status=bogus")
    rec.record("repo-jobs.limit-100", "GET", "/api/v1/repos/acme/app/actions/jobs?page=1&limit=100")
    rec.record("repo-jobs.limit-2.no-page", "GET", "/api/v1/repos/acme/app/actions/jobs?limit=2")
    rec.record("user-repo-jobs", "GET", f"/api/v1/repos/{ADMIN}/solo/actions/jobs?status=queued&page=1&limit=50")
    rec.record("repo-jobs.no-such-repo", "GET", "/api/v1/repos/acme/nothing/actions/jobs")


def record_runners(rec: Recorder, made: dict[str, Any]) -> None:
    """Runner lists, rows, PATCH and DELETE, in each scope; the ephemeral row the reconciler would make."""
    status, answer = rpc(rec, "Register", {"name": "ephemeral", "token": made["registration_token"],
                                           "version": "record", "labels": [LABEL], "ephemeral": True})  # fmt: skip
    (rec.out / "register.json").write_text(json.dumps({"status": status, "body": rec._redact(answer)}, indent=2) + "\n")
    ephemeral = int(answer["runner"]["id"])
    refused = rpc(rec, "Register", {"name": "x", "token": "not-a-token", "version": "record", "labels": []})
    (rec.out / "register.refused.json").write_text(
        json.dumps({"status": refused[0], "body": refused[1]}, indent=2) + "\n"
    )
    recorder = int(made["runner"]["id"])
    rpc(rec, "UpdateTask", {"state": made["running"]}, runner=made["runner"])  # busy for Gitea's next 10 s
    rec.record("org-runners", "GET", "/api/v1/orgs/acme/actions/runners")
    rec.record("org-runners.page-1.limit-1", "GET", "/api/v1/orgs/acme/actions/runners?page=1&limit=1")
    rec.record("admin-runners", "GET", "/api/v1/admin/actions/runners?page=1&limit=50")
    rec.record("repo-runners", "GET", "/api/v1/repos/acme/app/actions/runners?page=1&limit=50")
    rec.record("user-runners", "GET", "/api/v1/user/actions/runners?page=1&limit=50")
    rec.record("org-runner", "GET", f"/api/v1/orgs/acme/actions/runners/{recorder}")
    rec.record("admin-runner", "GET", f"/api/v1/admin/actions/runners/{ephemeral}")
    rec.record("repo-runner.other-scope", "GET", f"/api/v1/repos/acme/app/actions/runners/{recorder}")
    rec.record("org-runner.no-such-runner", "GET", "/api/v1/orgs/acme/actions/runners/999999")
    disable = {"disabled": True}
    rec.record("org-runner.disable", "PATCH", f"/api/v1/orgs/acme/actions/runners/{ephemeral}", body=disable)
    rec.record("org-runner.disable.empty", "PATCH", f"/api/v1/orgs/acme/actions/runners/{ephemeral}", body={})
    rec.record("org-runner.disable.no-such-runner", "PATCH", "/api/v1/orgs/acme/actions/runners/999999", body=disable)
    for scope, path in (("repo", "/repos/acme/app"), ("user", "/user"), ("admin", "/admin")):
        token = rec.record(f"{scope}-registration-token", "POST", f"/api/v1{path}/actions/runners/registration-token")
        rec.secrets.add(token["token"])
    rec.record("org-runner.delete", "DELETE", f"/api/v1/orgs/acme/actions/runners/{ephemeral}")
    rec.record("org-runner.delete.gone", "DELETE", f"/api/v1/orgs/acme/actions/runners/{ephemeral}")


def record_account(rec: Recorder) -> None:
    """/version, the token's user, its orgs and repositories; the answers to a token that may not."""
    g = rec.gitea
    rec.record("version", "GET", "/api/v1/version")
    rec.record("user", "GET", "/api/v1/user")
    rec.record("user-orgs", "GET", "/api/v1/user/orgs?page=1&limit=50")
    rec.record("users-repos", "GET", f"/api/v1/users/{ADMIN}/repos?page=1&limit=50")
    rec.record("users-repos.page-1.limit-1", "GET", f"/api/v1/users/{ADMIN}/repos?page=1&limit=1")
    rec.record("users-repos.page-2.limit-1", "GET", f"/api/v1/users/{ADMIN}/repos?page=2&limit=1")
    rec.record("user-repos", "GET", "/api/v1/user/repos?page=1&limit=50")
    rec.record("error-401", "GET", "/api/v1/orgs/acme/actions/jobs", token="not-a-token")
    narrow = g._cli("admin", "user", "generate-access-token", "--username", ADMIN, "--token-name", "narrow",
                    "--scopes", "read:user", "--raw").splitlines()[-1]  # fmt: skip
    rec.secrets.add(narrow)
    rec.record("error-403.scope", "GET", "/api/v1/orgs/acme/actions/runners", token=narrow)
    g._cli("admin", "user", "create", "--username", "alice", "--password", "Passw0rd-Passw0rd",
           "--email", "alice@example.com", "--must-change-password=false")  # fmt: skip
    alice = g._cli("admin", "user", "generate-access-token", "--username", "alice", "--token-name", "all",
                   "--scopes", "all", "--raw").splitlines()[-1]  # fmt: skip
    rec.secrets.add(alice)
    rec.record("error-403.admin", "GET", "/api/v1/admin/actions/jobs", token=alice)
    rec.record("error-403.org-runners", "GET", "/api/v1/orgs/acme/actions/runners", token=alice)
    rec.record("error-404.org", "GET", "/api/v1/orgs/nobody/actions/jobs")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="gitea-record-") as tmp:
        gitea = Gitea(Path(tmp) / "gitea")
        gitea.start()
        try:
            version = gitea.api("GET", "/version")["version"]
            out = (
                Path(sys.argv[1])
                if len(sys.argv) > 1
                else Path(__file__).parent / "data" / f"gitea-{'.'.join(version.split('.')[:2])}"
            )
            out.mkdir(parents=True, exist_ok=True)
            rec = Recorder(gitea, out)
            (out / "swagger.v1.json").write_bytes(rec.call("GET", "/swagger.v1.json", token="")[2])
            made = setup(rec)
            record_jobs(rec)
            record_runners(rec, made)
            record_account(rec)
        finally:
            gitea.stop()
    print(f"recorded Gitea {version} into {out}")


if __name__ == "__main__":
    main()
