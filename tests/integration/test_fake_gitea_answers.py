"""The fake Gitea (tests/fake_gitea.py) answers as the real one: each answer Gitea 1.26 gave
(tests/data/gitea-1.26/, recorded by tests/gitea_record.py) is asked of a fake set up as that Gitea was,
and the two are compared field by field: the same keys, the same JSON types (null included), the same
values but for those that differ by nature (ids and names Gitea made, times, URLs, tokens, messages),
the same status and paging headers. The 1.25 examples are compared by keys and types. And the strict
spec check (`tests.gitea_spec`) refuses what Gitea never sends.

Integration, not unit: the fake is asked over loopback HTTP, as the reconciler asks it."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import jsonschema
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.bench.stack import SpecDrift, checked
from tests.fake_gitea import REGISTRATION_TOKEN, STATUS_FILTERS, FakeGitea, served
from tests.gitea_spec import DATA, EXAMPLES_125, RECORDED, recorded_answers, validator

MakeServer = Callable[[web.Application], Awaitable[TestServer]]
TOKEN = "api-token-value"
# Values that differ by nature between two Gitea instances: made by Gitea (hashes, times, avatars,
# tokens) or worded by it (messages); their keys and types are still compared.
VARIES = {"head_sha", "created_at", "started_at", "completed_at", "created", "last_login", "updated_at"}
VARIES |= {"avatar_url", "token", "message", "html_url"}
# Answers whose values are a profile the reconciler never reads (a repository's sizes and settings, a
# user's): keys and types only.
SHAPE_ONLY = {"users-repos", "users-repos.page-1.limit-1", "users-repos.page-2.limit-1", "user-orgs"}
# Recorded answers the fake does not give, and why.
NOT_SERVED = {
    "user": "GET /user is tests/fake_tenants.py's, whose body is this answer renamed (user_row)",
    "user-repos": "GET /user/repos: the reconciler lists /users/{u}/repos",
    "error-404.org": "the fake has no unknown orgs: every org's list answers",
    "error-403.admin": "the fake's 403s are by endpoint (`refused`); error-403.scope is compared",
    "error-403.org-runners": "the fake's 403s are by endpoint (`refused`); error-403.scope is compared",
}
ANSWERS = {name: entry for name, entry in recorded_answers() if name not in NOT_SERVED}


def as_recorded(version: str = "1.26.0") -> FakeGitea:
    """A fake holding what the recorded Gitea held (tests/gitea_record.py's `setup`)."""
    fake = FakeGitea(token=TOKEN)
    fake.version = version
    done = {"labels": ["grs-record"], "attempt": 1, "runner": (1, "recorder")}
    fake.add_job(1, repo="acme/app", status="completed", conclusion="success", **done)  # type: ignore[arg-type]
    fake.add_job(2, repo="acme/app", status="completed", conclusion="failure", **done)  # type: ignore[arg-type]
    fake.add_job(3, repo="acme/app", status="in_progress", **done)  # type: ignore[arg-type]
    fake.add_job(4, repo="acme/app", labels=["nobody-serves-this"])
    fake.add_job(5, repo="acme/app", status="waiting", labels=["nobody-serves-this"])
    fake.add_job(6, repo="root/solo", labels=["nobody-serves-this"])
    fake.add_repo("root/quiet")
    names = {1: "done-ok", 2: "done-failed", 3: "running", 4: "queued", 5: "waiting", 6: "solo"}
    for job_id, job in fake.jobs.items():
        repo = fake.repo_of(job)
        run = 2 if repo == "root/solo" else 1
        job.update(
            name=names[job_id], run_id=run, run_url=f"https://gitea.example.com/api/v1/repos/{repo}/actions/runs/{run}"
        )
    recorder = fake.add_runner("recorder", status="online", busy=True)
    ephemeral = fake.add_runner("ephemeral", status="offline")
    for runner_id, ephemeral_row in ((recorder, False), (ephemeral, True)):
        fake.runners[runner_id] |= {
            "ephemeral": ephemeral_row,
            "labels": [{"id": 0, "name": "grs-record", "type": "custom"}],
        }
    fake.jobs[2]["steps"][0]["name"] = "Run false"
    fake.private = {"acme/nothing"}
    return fake


def kind(value: Any) -> str:
    """The JSON type of a decoded value."""
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array", dict: "object"}.get(
        type(value), "null"
    )


def _alike(rows: list[Any], row: Any) -> Any:
    """The row of `rows` to compare `row` with by shape: one in the same status (Gitea leaves fields out
    by status: `omitempty`), else the first."""
    same = [r for r in rows if isinstance(r, dict) and isinstance(row, dict) and r.get("status") == row.get("status")]
    return (same or rows)[0]


def differences(want: Any, got: Any, where: str = "", *, values: bool = True) -> list[str]:
    """Where `got` (the fake's) differs from `want` (Gitea's): keys, JSON types, and values if `values`."""
    if kind(want) != kind(got):
        return [f"{where or '/'}: {kind(got)} where Gitea sends {kind(want)}"]
    if isinstance(want, dict):
        out = [f"{where}/{k}: missing" for k in want if k not in got]
        out += [f"{where}/{k}: Gitea never sends it" for k in got if k not in want]
        for k in want.keys() & got.keys():
            out += differences(want[k], got[k], f"{where}/{k}", values=values and k not in VARIES)
        return out
    if isinstance(want, list):
        if all(isinstance(r, dict) and "id" in r for r in [*want, *got]):  # rows: in no promised order
            want, got = sorted(want, key=lambda r: r["id"]), sorted(got, key=lambda r: r["id"])
        if values and len(want) != len(got):
            return [f"{where or '/'}: {len(got)} items where Gitea sends {len(want)}"]
        pairs = zip(want, got, strict=False) if values or not want else ((_alike(want, g), g) for g in got)
        return [d for i, (w, g) in enumerate(pairs) for d in differences(w, g, f"{where}/{i}", values=values)]
    return [f"{where}: {got!r} where Gitea sends {want!r}"] if values and want != got else []


async def ask(fake: FakeGitea, aiohttp_server: MakeServer, name: str, entry: dict[str, Any]) -> tuple[int, Any, Any]:
    """The fake's answer to the recorded request: status, headers, decoded body."""
    request = entry["request"]
    token = {"error-401": "not-a-token"}.get(name, TOKEN)
    if name == "error-403.scope":
        fake.refused = {"org_runners"}
    server = await aiohttp_server(fake.app())
    url = str(server.make_url(request["path"])) + (f"?{request['query']}" if request["query"] else "")
    async with aiohttp.ClientSession() as session:
        headers = {"Authorization": f"token {token}"}
        async with session.request(request["method"], url, headers=headers, json=request.get("body")) as resp:
            raw = await resp.read()
            return resp.status, resp.headers, json.loads(raw) if raw.strip() else None


@pytest.mark.parametrize("name", sorted(ANSWERS))
async def test_the_fake_answers_as_gitea_1_26_did(aiohttp_server: MakeServer, name: str) -> None:
    entry = ANSWERS[name]
    fake = as_recorded()
    if name == "org-runner.delete.gone":
        del fake.runners[2]  # deleted once already
    status, headers, body = await ask(fake, aiohttp_server, name, entry)
    assert status == entry["status"], f"{name}: HTTP {status} where Gitea answered {entry['status']}"
    for header in ("X-Total-Count", "Link"):
        assert headers.get(header) == entry["headers"].get(header), f"{name}: {header}"
    if name == "org-runner.disable.empty":
        fake_errors = fake.errors[:]
        fake.errors.clear()  # the body Gitea refuses is refused by the check too
        assert fake_errors and "'disabled' is a required property" in fake_errors[0]
    want = entry["body"]
    if ".page-" in name:  # Gitea promises no order (SQLite's index order): which rows a page holds is its own,
        # so each row the fake's page holds is compared with that row in Gitea's listing of them all
        rows, listing = ("runners", "org-runners") if "runners" in name else ("jobs", name.split(".")[0])
        listing += ".status-queued+in_progress" if rows == "jobs" else ""
        if name.startswith("users-repos"):
            rows, listing = "", "users-repos"
        every = {r["id"]: r for r in (ANSWERS[listing]["body"][rows] if rows else ANSWERS[listing]["body"])}
        assert len(body[rows] if rows else body) == len(want[rows] if rows else want), name
        want = want | {rows: [every[r["id"]] for r in body[rows]]} if rows else [every[r["id"]] for r in body]
    diffs = differences(want, body, values=name not in SHAPE_ONLY)
    assert not diffs, f"{name}: the fake's answer differs from Gitea's:\n" + "\n".join(diffs)


@pytest.mark.parametrize("example", sorted(EXAMPLES_125))
async def test_the_fake_at_1_25_answers_in_the_shape_of_1_25(aiohttp_server: MakeServer, example: str) -> None:
    want = json.loads((DATA / "gitea" / "api-examples" / example).read_text())
    fake = as_recorded("1.25.0")
    fake.add_job(7, repo="acme/app", status="in_progress", runner=(1, "recorder"))
    path = EXAMPLES_125[example].replace("{owner}/{repo}", "acme/app").replace("{org}", "acme")
    query = example.split(".")[1].replace("status-", "status=").replace("+", "&status=") if "jobs" in path else ""
    entry = {"request": {"method": "GET", "path": f"/api/v1{path}", "query": query}}
    status, headers, body = await ask(fake, aiohttp_server, example, entry)
    assert status == 200 and "X-Total-Count" not in headers and "Link" not in headers  # 1.26 added them to jobs
    diffs = differences(want, body, values=False)
    assert not diffs, f"{example}: the fake at 1.25 differs from Gitea 1.25's shape:\n" + "\n".join(diffs)


def test_every_call_of_the_reconciler_has_a_recorded_answer() -> None:
    recorded = {entry["request"]["path"].split("/api/v1", 1)[1] for _, entry in recorded_answers()}
    for path in ("/repos/acme/app/actions/jobs", "/orgs/acme/actions/jobs", "/admin/actions/jobs", "/version"):
        assert path in recorded
    for scope in ("/repos/acme/app", "/orgs/acme", "/user", "/admin"):
        assert f"{scope}/actions/runners" in recorded and f"{scope}/actions/runners/registration-token" in recorded
    assert {"/user", "/user/orgs", "/users/root/repos", "/orgs/acme/actions/runners/2"} <= recorded
    assert not (RECORDED / "register.json").read_text().count('"token": "') - 1, "one token, redacted"
    assert all("REDACTED" in (RECORDED / f"{s}-registration-token.json").read_text() for s in ("org", "repo", "user"))


JOB = {"id": 1, "url": "u", "html_url": "u", "run_id": 1, "run_url": "u", "name": "n", "labels": ["l"]}
JOB |= {"run_attempt": 0, "head_sha": "s", "head_branch": "main", "status": "queued", "steps": []}
JOB |= {
    "created_at": "2026-01-01T00:00:00Z",
    "started_at": "2026-01-01T00:00:00Z",
    "completed_at": "2026-01-01T00:00:00Z",
}


@pytest.mark.parametrize(
    ("version", "job", "refused"),
    [
        pytest.param("1.26", JOB, False, id="a recorded shape"),
        pytest.param("1.26", {k: v for k, v in JOB.items() if k != "status"}, True, id="a required field missing"),
        pytest.param("1.26", JOB | {"runner": "x"}, True, id="a field Gitea never sends"),
        pytest.param("1.26", JOB | {"steps": None}, True, id="steps null in 1.26"),
        pytest.param("1.26", JOB | {"labels": None}, True, id="labels null"),
        pytest.param("1.25", JOB | {"steps": None}, False, id="steps null in 1.25"),
        pytest.param("1.26", JOB | {"run_id": "1"}, True, id="a wrong type"),
    ],
)
def test_the_strict_spec_check_refuses_what_gitea_never_sends(version: str, job: dict[str, Any], refused: bool) -> None:
    check = validator(version)
    body = {"jobs": [job], "total_count": 1}
    if refused:
        with pytest.raises(jsonschema.ValidationError):
            check.response("/repos/{owner}/{repo}/actions/jobs", body)
    else:
        check.response("/repos/{owner}/{repo}/actions/jobs", body)


@pytest.mark.parametrize(
    "row",
    [
        pytest.param({"status": "idle"}, id="idle"),
        pytest.param({"status": "active", "busy": True}, id="active"),
        pytest.param({"status": "offline", "busy": True}, id="busy offline"),
    ],
)
def test_the_fake_takes_no_runner_state_gitea_never_sends(row: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="Gitea never sends a runner"):
        FakeGitea(token=TOKEN).add_runner("r", **row)


def test_the_fake_takes_no_job_state_gitea_never_lists() -> None:
    fake = FakeGitea(token=TOKEN)
    with pytest.raises(ValueError, match="Gitea never lists a job"):
        fake.add_job(1, repo="acme/app", status="queued", conclusion="success")
    with pytest.raises(ValueError, match="Gitea never lists a job"):
        fake.add_job(1, repo="acme/app", status="completed", conclusion="neutral")


def test_a_benchmark_whose_fake_answered_outside_the_spec_fails() -> None:
    fake = FakeGitea(token=TOKEN)
    checked(fake)  # nothing recorded: the run stands
    fake.runners[fake.add_runner("r")]["token"] = "a field Gitea never sends"
    with served(fake) as url:
        request = urllib.request.Request(
            f"{url}/api/v1/orgs/acme/actions/runners", headers={"Authorization": f"token {TOKEN}"}
        )
        with urllib.request.urlopen(request, timeout=10) as resp:
            assert resp.status == 200  # answered; the check is recorded, not a 500
    with pytest.raises(SpecDrift, match="'token' was unexpected"):
        checked(fake)
    fake.errors.clear()  # seen: not this test's failure


def test_the_fake_takes_the_status_filters_gitea_took_and_no_other() -> None:
    taken = {n.split("status-", 1)[1] for n, e in ANSWERS.items() if "jobs.status-" in n and e["status"] == 200}
    assert set(STATUS_FILTERS) == {s for s in taken if "+" not in s}
    assert ANSWERS["repo-jobs.status-unknown"]["status"] == 400


@pytest.mark.parametrize(("recorded", "token"), [("register", REGISTRATION_TOKEN), ("register.refused", "not-a-token")])
async def test_the_fakes_register_answers_as_gitea_1_26s(aiohttp_server: MakeServer, recorded: str, token: str) -> None:
    want = json.loads((RECORDED / f"{recorded}.json").read_text())
    server = await aiohttp_server(FakeGitea(token=TOKEN).app())
    form = {"name": "ephemeral", "token": token, "version": "record", "labels": ["grs-record"], "ephemeral": True}
    url = server.make_url("/api/actions/runner.v1.RunnerService/Register")
    async with aiohttp.ClientSession() as session, session.post(url, json=form) as resp:
        status, body = resp.status, await resp.json()
    assert status == want["status"]
    diffs = differences(want["body"], body, values=False) + differences(
        {k: v for k, v in want["body"].get("runner", {}).items() if k not in ("id", "uuid", "token")},
        {k: v for k, v in body.get("runner", {}).items() if k not in ("id", "uuid", "token")},
    )
    assert not diffs, f"{recorded}: the fake's Register differs from Gitea's:\n" + "\n".join(diffs)


@pytest.mark.parametrize(
    ("status", "change", "said"),
    [
        pytest.param("in_progress", {}, "in_progress without the runner_id", id="taken without a runner"),
        pytest.param("queued", {"status": "completed"}, "completed with conclusion None", id="done without conclusion"),
        pytest.param("queued", {"conclusion": "success"}, "queued with conclusion 'success'", id="queued concluded"),
    ],
)
async def test_a_job_changed_into_one_gitea_never_lists_is_caught_when_listed(
    aiohttp_server: MakeServer, status: str, change: dict[str, Any], said: str
) -> None:
    fake = FakeGitea(token=TOKEN)
    fake.add_job(1, repo="acme/app", status=status).update(change)
    entry = {"request": {"method": "GET", "path": "/api/v1/repos/acme/app/actions/jobs", "query": ""}}
    assert (await ask(fake, aiohttp_server, "jobs", entry))[0] == 200
    errors, fake.errors[:] = fake.errors[:], []
    assert len(errors) == 1 and said in errors[0]
