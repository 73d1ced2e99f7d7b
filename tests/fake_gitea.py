"""An in-process fake of the Gitea Actions API, kept honest against Gitea's own answers.

It answers as the Gitea of its `version` does (default 1.26.0, the one the node tests run; 1.25 where a
test sets an earlier one). Every response body it sends is validated against that Gitea's OpenAPI spec
made strict by recorded answers (`tests.gitea_spec`: required fields, no extra ones, arrays null only
where Gitea sends null), and tests/integration/test_fake_gitea_answers.py compares its answers field by
field with those Gitea 1.26 gave (tests/data/gitea-1.26/, recorded by tests/gitea_record.py). A failed
check is recorded, not answered as a 500 (which the product would retry as transient): the autouse
fixture in tests/conftest.py fails the test. The runner `Register` RPC (connect over HTTP, JSON; not in
the OpenAPI spec) answers as Gitea 1.26's handler does, plain errors included. It reproduces what the
poller must survive: `limit` capped at 50 (30 when not given), every status filter Gitea takes
(repeatable; 400 on an unknown one), the paging headers (`X-Total-Count`, `Link` from Gitea's ROOT_URL:
1.26's jobs lists, every release's repository and org lists; never the runners lists), and 1.25's
quirks: every row when `page` is omitted, `steps: null` in lists.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import secrets
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import jsonschema
from aiohttp import web

from reconciler.gitea.api import GiteaError, PollScope
from reconciler.gitea.register import Registrar, Registration, RegistrationRefused
from tests.gitea_spec import RECORDED, ROOT_URL, SwaggerValidator, paging_headers, validator
from tests.redis_server import free_port

DATA = Path(__file__).parent / "data" / "gitea"
REGISTRATION_TOKEN = "fake-registration-token"  # what a new FakeGitea registers runners with
__all__ = ["REGISTRATION_TOKEN", "STATUS_FILTERS", "FakeGitea", "FakeRegistrar", "SwaggerValidator", "served"]
# Gitea's status filters (`convertToInternal`, routers/api/v1/shared/action.go): the (status,
# conclusion) rows each takes, None for any conclusion.
STATUS_FILTERS: dict[str, set[tuple[str, str | None]]] = {
    **{key: {("waiting", None)} for key in ("pending", "waiting", "requested", "action_required")},
    "queued": {("queued", None)},
    "in_progress": {("in_progress", None)},
    "completed": {("completed", None)},
    "success": {("completed", "success")},
    "failure": {("completed", "failure")},
    **{key: {("completed", "skipped")} for key in ("skipped", "neutral")},
    **{key: {("completed", "cancelled")} for key in ("cancelled", "timed_out")},
}
RUNNER_STATES = ("online", "offline")  # all `ToActionRunner` sends; busy only when online (an active runner)
CONCLUSIONS = ("success", "failure", "skipped", "cancelled")  # of a completed job (`ToActionsStatus`)


def error_body(message: str, *, errors: bool = False) -> dict[str, Any]:
    """Gitea's API error (`APIError`): its message, the swagger URL, and `errors: null` where Gitea adds it
    (`APIErrorNotFound`)."""
    return ({"errors": None} if errors else {}) | {"message": message, "url": f"{ROOT_URL}api/swagger"}


def user_row(login: str, *, user_id: int = 1) -> dict[str, Any]:
    """A user as Gitea 1.26 answers `GET /user` (its recorded answer, renamed)."""
    row: dict[str, Any] = json.loads((RECORDED / "user.json").read_text())["body"]
    return row | {"id": user_id, "login": login, "email": f"{login}@example.com", "html_url": f"{ROOT_URL}{login}"}


LIVE: list[FakeGitea] = []  # every fake made, for the check that fails the test it answered badly in


def _listable(job: dict[str, Any]) -> None:
    """Raise unless Gitea could list the job (`ToActionWorkflowJob`): a conclusion exactly when completed
    (one of Gitea's), a runner when in progress (a task has one)."""
    if ("conclusion" in job) != (job["status"] == "completed") or job.get("conclusion", "success") not in CONCLUSIONS:
        raise ValueError(f"job {job['id']} {job['status']} with conclusion {job.get('conclusion')!r}")
    if job["status"] == "in_progress" and not job.get("runner_id"):
        raise ValueError(f"job {job['id']} in_progress without the runner_id of its task's runner")


class FakeGitea:
    """Jobs, runners and repositories, served the way the Gitea of `version` serves them."""

    def __init__(self, *, token: str, registration_token: str = REGISTRATION_TOKEN) -> None:
        self.token = token
        # registration token -> the scope its runners register in, as Gitea keeps them
        self.registration_tokens: dict[str, tuple[str, str]] = {registration_token: ("org", "acme")}
        self.errors: list[str] = []  # failed checks against Gitea's spec
        # called after an answer to the endpoint is made, before it is sent: a test's interleaving
        self.after: dict[str, Callable[[], None]] = {}
        self.disable_supported = True  # False: answer PATCH as Gitea 1.25 does (405)
        self.refused: set[str] = set()  # endpoints the token may not use (403), e.g. "global_runners"
        self.version = "1.26.0"  # 1.25: its answers; before 1.25, Gitea has no jobs API: its paths answer 404
        LIVE.append(self)
        self.jobs: dict[int, dict[str, Any]] = {}
        self.repos: dict[str, dict[str, Any]] = {}
        self.requests: Counter[str] = Counter()
        self.runners: dict[int, dict[str, Any]] = {}  # id -> row, with "_scope": ("org", "acme") etc.
        self.deleted: list[int] = []
        self.fail_with: int | None = None
        self.register_held: asyncio.Event | None = None  # a Register answers once it is set (a Gitea kept busy)
        self.orgs: list[str] = ["acme"]  # the orgs the API token's user is in
        self.private: set[str] = set()  # repositories (owner/name) the API token cannot see: unlisted, their jobs 404
        template = json.loads((DATA / "api-examples" / "repo-actions-jobs.status-queued.v1.25.json").read_text())
        self._job_template = template["jobs"][0]
        self._repo_template = json.loads((DATA / "webhooks" / "01-queued.json").read_text())["repository"]

    @property
    def validator(self) -> SwaggerValidator:
        """The strict check of the Gitea this fake answers as (`version`)."""
        return validator(self.version)

    def at_least(self, major: int, minor: int) -> bool:
        """Whether the fake answers as Gitea `major.minor` or later."""
        return tuple(int(p) for p in self.version.split(".")[:2]) >= (major, minor)

    def add_job(
        self,
        job_id: int,
        *,
        repo: str,
        status: str = "queued",
        labels: list[str] | None = None,
        attempt: int = 0,
        conclusion: str | None = None,
        runner: tuple[int, str] | None = None,
    ) -> dict[str, Any]:
        """Add or replace a job; a completed one has a conclusion (default success), no other has one;
        `runner`: the (id, name) of the runner that took it."""
        if status == "completed":
            conclusion = conclusion or "success"
        if (conclusion is None) != (status != "completed") or (conclusion and conclusion not in CONCLUSIONS):
            raise ValueError(f"Gitea never lists a job {status} with conclusion {conclusion!r}")
        owner, name = repo.split("/")
        job: dict[str, Any] = copy.deepcopy(self._job_template)
        job.update(
            id=job_id,
            url=f"{ROOT_URL}api/v1/repos/{owner}/{name}/actions/jobs/{job_id}",
            status=status,
            labels=labels if labels is not None else ["ubuntu-latest"],
            run_attempt=attempt,
        )
        if conclusion:
            job["conclusion"] = conclusion
        if runner:  # a task: its runner, and its step (each step reports the job's status: `ToActionWorkflowJob`)
            job |= {"runner_id": runner[0], "runner_name": runner[1]}
            step = {"name": "Run true", "number": 0, "status": status} | (
                {"conclusion": conclusion} if conclusion else {}
            )
            job["steps"] = [step | {"started_at": "1970-01-01T00:00:00Z", "completed_at": "1970-01-01T00:00:00Z"}]
        self.jobs[job_id] = job
        self.add_repo(repo)
        return job

    def add_repo(self, repo: str) -> dict[str, Any]:
        """The repository `owner/name`, added if it is new."""
        if repo not in self.repos:
            owner, name = repo.split("/")
            r = copy.deepcopy(self._repo_template)
            r.update(id=len(self.repos) + 1, name=name, full_name=repo)
            r["owner"] = {**r["owner"], "login": owner, "username": owner}
            self.repos[repo] = r
        return self.repos[repo]

    def add_runner(
        self, name: str, *, scope: tuple[str, str] = ("org", "acme"), status: str = "online", busy: bool = False
    ) -> int:
        """Register a runner row in a scope (("repo", "o/r"), ("org", o), ("user", u) or ("global", ""));
        `status` online or offline, `busy` only online, as Gitea sends them."""
        if status not in RUNNER_STATES or (busy and status != "online"):
            raise ValueError(
                f"Gitea never sends a runner {status!r} with busy={busy}: {RUNNER_STATES}, busy only online"
            )
        runner_id = max(self.runners, default=0) + 1
        self.runners[runner_id] = {
            "id": runner_id,
            "name": name,
            "status": status,
            "busy": busy,
            "ephemeral": True,
            "disabled": False,
            "labels": [{"id": 0, "name": "k8s", "type": "custom"}],
            "_scope": scope,
        }
        return runner_id

    def repo_of(self, job: dict[str, Any]) -> str:
        """The `owner/name` of a job's repository."""
        parts = job["url"].split("/repos/", 1)[1].split("/")
        return f"{parts[0]}/{parts[1]}"

    def app(self) -> web.Application:
        """The aiohttp application."""
        app = web.Application()
        app.router.add_get("/api/v1/repos/{owner}/{repo}/actions/jobs", self._repo_jobs)
        app.router.add_get("/api/v1/orgs/{org}/actions/jobs", self._org_jobs)
        app.router.add_get("/api/v1/admin/actions/jobs", self._admin_jobs)
        app.router.add_get("/api/v1/users/{username}/repos", self._user_repos)
        app.router.add_get("/api/v1/user/orgs", self._user_orgs)
        app.router.add_post("/api/actions/runner.v1.RunnerService/Register", self._register)
        app.router.add_get("/api/v1/version", self._version)
        for prefix, kind in (
            ("/repos/{owner}/{repo}", "repo"),
            ("/orgs/{org}", "org"),
            ("/user", "user"),
            ("/admin", "global"),
        ):
            app.router.add_get(f"/api/v1{prefix}/actions/runners", self._list_runners(prefix, kind))
            app.router.add_get(f"/api/v1{prefix}/actions/runners/{{runner_id}}", self._get_runner(prefix, kind))
            token_path = f"/api/v1{prefix}/actions/runners/registration-token"
            app.router.add_post(token_path, self._registration_token(prefix, kind))
            app.router.add_delete(f"/api/v1{prefix}/actions/runners/{{runner_id}}", self._delete_runner(prefix, kind))
            app.router.add_patch(f"/api/v1{prefix}/actions/runners/{{runner_id}}", self._patch_runner(prefix, kind))
        return app

    @staticmethod
    def _scope_of(request: web.Request, kind: str) -> tuple[str, str]:
        info = request.match_info
        target = {"repo": f"{info.get('owner')}/{info.get('repo')}", "org": info.get("org", ""), "user": "acme"}
        return kind, target.get(kind, "")

    def _editable(self, row: dict[str, Any], request: web.Request, kind: str) -> bool:
        """Whether a row may be changed through this scope's endpoint: its own, or the instance's (Gitea's
        `EditableInContext`: the admin endpoints reach every runner)."""
        return kind == "global" or row["_scope"] == self._scope_of(request, kind)

    def _list_runners(self, prefix: str, kind: str) -> Any:
        async def handle(request: web.Request) -> web.Response:
            denied = self._auth(request, f"{kind}_runners")
            if denied:
                return denied
            scope = self._scope_of(request, kind)
            rows = [
                self._runner_row(r)
                for r in self.runners.values()
                if kind == "global" or r["_scope"] == scope  # the instance's listing has every runner
            ]
            rows.sort(key=lambda r: r["status"] == "offline")  # Gitea's order: the last seen online first
            body = {"runners": self._page(request, rows)[0], "total_count": len(rows)}  # no paging headers
            self._valid(self.validator.response, f"{prefix}/actions/runners", body)
            return self._answer(f"{kind}_runners", body)

        return handle

    def _get_runner(self, prefix: str, kind: str) -> Any:
        async def handle(request: web.Request) -> web.Response:
            denied = self._auth(request, f"{kind}_runner")
            if denied:
                return denied
            path = f"{prefix}/actions/runners/{{runner_id}}"
            row = self.runners.get(int(request.match_info["runner_id"]))
            if row is None or not self._editable(row, request, kind):  # Gitea's GetRunner: its own scope only
                self._valid(self._documented, "GET", path, 404)
                return self._not_found(row)
            body = self._runner_row(row)
            self._valid(self.validator.response, path, body)
            return self._answer(f"{kind}_runner", body)

        return handle

    def _registration_token(self, prefix: str, kind: str) -> Any:
        """The scope's registration token (Gitea's `GetRegistrationToken`: the latest one, made if there is
        none; never rotated by the call). Gitea answers it in the body, `{"token": …}`: the spec documents a
        header, wrongly (tests/data/gitea/README.md), so only the path, method and status are checked."""

        async def handle(request: web.Request) -> web.Response:
            denied = self._auth(request, f"{kind}_registration_token")
            if denied:
                return denied
            path = f"{prefix}/actions/runners/registration-token"
            self._valid(self._documented, "POST", path, 200)  # 1.26 kept POST alone (1.24+ have it)
            scope = self._scope_of(request, kind)
            token = next((t for t, s in self.registration_tokens.items() if s == scope), None)
            if token is None:
                token = secrets.token_hex(20)
                self.registration_tokens[token] = scope
            return self._answer(f"{kind}_registration_token", {"token": token})

        return handle

    def _patch_runner(self, prefix: str, kind: str) -> Any:
        async def handle(request: web.Request) -> web.Response:
            if not self.disable_supported:
                return web.Response(status=405)
            denied = self._auth(request, f"{kind}_runner_disable")
            if denied:
                return denied
            path = f"{prefix}/actions/runners/{{runner_id}}"
            form = await request.json()
            self._valid(validator("1.26").request, "PATCH", path, form)
            row = self.runners.get(int(request.match_info["runner_id"]))
            if row is None or not self._editable(row, request, kind):
                self._valid(self._documented, "PATCH", path, 404)
                return self._not_found(row)
            if not isinstance(form.get("disabled"), bool):
                return web.json_response(error_body("[Disabled]: Required"), status=422)
            row["disabled"] = form["disabled"]
            body = self._runner_row(row)
            self._valid(validator("1.26").response, path, body, method="patch")
            return self._answer(f"{kind}_runner_disable", body)

        return handle

    async def _register(self, request: web.Request) -> web.Response:
        """Gitea's runner `Register` RPC (connect, JSON): a new offline row in the token's scope, and its
        credential; Gitea's own plain errors (connect code `unknown`, HTTP 500) otherwise."""
        self.requests["register"] += 1
        if self.register_held is not None:
            await self.register_held.wait()
        if self.fail_with:
            return web.json_response({"code": "unavailable", "message": "injected"}, status=self.fail_with)
        form = await request.json()
        scope = self.registration_tokens.get(form.get("token") or "")
        if not form.get("token") or not form.get("name"):
            return web.json_response({"code": "unknown", "message": "missing runner token, name"}, status=500)
        if scope is None:
            return web.json_response({"code": "unknown", "message": "runner registration token not found"}, status=500)
        runner_id = self.add_runner(form["name"], scope=scope, status="offline")
        row = self.runners[runner_id]
        row["labels"] = [{"id": i, "name": n, "type": "custom"} for i, n in enumerate(form.get("labels") or [])]
        row["ephemeral"] = bool(form.get("ephemeral"))
        runner = {"id": str(runner_id), "uuid": str(uuid.uuid4()), "token": secrets.token_hex(20), "name": form["name"]}
        runner |= {"version": form.get("version", ""), "labels": form.get("labels") or []}
        if row["ephemeral"]:
            runner["ephemeral"] = True  # connect's JSON leaves out a false
        return self._answer("register", {"runner": runner})

    def _runner_row(self, row: dict[str, Any]) -> dict[str, Any]:
        """A runner row as this Gitea sends it (`disabled` from 1.26)."""
        return {k: v for k, v in row.items() if k != "_scope" and (k != "disabled" or self.at_least(1, 26))}

    @staticmethod
    def _not_found(row: dict[str, Any] | None) -> web.Response:
        """Gitea's 404 for a runner: none by that id, or one outside the scope asked through."""
        message = "Runner not found" if row is None else "No permission to access this runner"
        return web.json_response(error_body(message, errors=True), status=404)

    def _documented(self, method: str, path: str, status: int) -> None:
        if not validator("1.26").has(method, path, status):
            raise AssertionError(f"{method} {path} answered {status}, which Gitea's spec does not document")

    def _valid(self, check: Callable[..., None], *args: Any, **kwargs: Any) -> None:
        try:
            check(*args, **kwargs)
        except Exception as exc:  # recorded for the test to fail on, never answered as a 500
            said = str(exc)
            if isinstance(exc, jsonschema.ValidationError):  # where in the body, not the whole body
                said = f"{exc.message[:500]} at /{'/'.join(str(p) for p in exc.absolute_path)}"
            what = f"({args[0]!r})" if isinstance(args[0], str) else ""
            self.errors.append(f"{getattr(check, '__name__', check)}{what}: {said}"[:2000])

    def _answer(self, endpoint: str, body: Any, headers: dict[str, str] | None = None) -> web.Response:
        hook = self.after.get(endpoint)
        if hook is not None:
            hook()
        return web.json_response(body, headers=headers)

    def _delete_runner(self, prefix: str, kind: str) -> Any:
        async def handle(request: web.Request) -> web.Response:
            denied = self._auth(request, f"{kind}_runner_delete")
            if denied:
                return denied
            runner_id = int(request.match_info["runner_id"])
            row = self.runners.get(runner_id)
            path = f"{prefix}/actions/runners/{{runner_id}}"
            if row is None or not self._editable(row, request, kind):  # unknown or outside the scope
                self._valid(self._documented, "DELETE", path, 404)
                return self._not_found(row)
            del self.runners[runner_id]
            self.deleted.append(runner_id)
            self._valid(self._documented, "DELETE", path, 204)
            hook = self.after.get(f"{kind}_runner_delete")
            if hook is not None:
                hook()
            return web.Response(status=204)

        return handle

    def _auth(self, request: web.Request, endpoint: str) -> web.Response | None:
        self.requests[endpoint] += 1
        if request.headers.get("Authorization") not in (f"token {self.token}", f"Bearer {self.token}"):
            return web.json_response(error_body("invalid username, password or token"), status=401)
        if endpoint in self.refused:
            said = "token does not have at least one of required scope(s), required=[write:organization]"
            return web.json_response(error_body(said), status=403)
        if endpoint.endswith("_jobs") and not self.at_least(1, 25):
            return web.json_response(error_body("not found", errors=True), status=404)
        if self.fail_with:
            return web.json_response(error_body("injected"), status=self.fail_with)
        return None

    async def _version(self, request: web.Request) -> web.Response:
        self.requests["version"] += 1
        body = {"version": self.version}
        self._valid(self.validator.response, "/version", body)
        return web.json_response(body)

    def _page(self, request: web.Request, rows: list[Any]) -> tuple[list[Any], dict[str, str]]:
        """The page of `rows` asked for (`GetListOptions`: limit 30 unless given, at most 50) and the paging
        headers Gitea's `SetLinkHeader` and `SetTotalCountHeader` write for it (for the lists that send them)."""
        limit = int(request.query.get("limit", "0") or 0)
        limit = 30 if limit <= 0 else min(limit, 50)
        page = int(request.query.get("page", "0") or 0)
        headers = paging_headers(request.path, list(request.query.items()), total=len(rows), page_size=limit, page=page)
        if "page" not in request.query and not self.at_least(1, 26):  # 1.25's FindAndCount: LIMIT only if page >= 1
            return rows, headers
        page = max(page, 1)
        return rows[(page - 1) * limit : page * limit], headers

    def _jobs_response(
        self, request: web.Request, swagger_path: str, repo_filter: Any, *, endpoint: str
    ) -> web.Response:
        wanted: set[tuple[str, str | None]] = set()
        for value in request.query.getall("status", []):
            if value not in STATUS_FILTERS:
                return web.json_response(error_body(f"Invalid status {value}"), status=400)
            wanted |= STATUS_FILTERS[value]
        rows = [
            self._job_row(j) for j in self.jobs.values() if repo_filter(self.repo_of(j)) and self._wanted(j, wanted)
        ]
        page, headers = self._page(request, rows)
        body = {"jobs": page, "total_count": len(rows)}
        self._valid(self.validator.response, swagger_path, body)
        return self._answer(endpoint, body, headers if self.at_least(1, 26) else {})  # 1.26 added them (#36521)

    @staticmethod
    def _wanted(job: dict[str, Any], wanted: set[tuple[str, str | None]]) -> bool:
        return not wanted or any(job["status"] == s and c in (None, job.get("conclusion")) for s, c in wanted)

    def _job_row(self, job: dict[str, Any]) -> dict[str, Any]:
        """A job as this Gitea lists it: `steps` null before 1.26 (never loaded), a list from 1.26."""
        self._valid(_listable, job)
        steps = (job["steps"] or []) if self.at_least(1, 26) else None
        return job | {"steps": steps}

    async def _repo_jobs(self, request: web.Request) -> web.Response:
        denied = self._auth(request, "repo_jobs")
        if denied:
            return denied
        full = f"{request.match_info['owner']}/{request.match_info['repo']}".lower()
        if full in {p.lower() for p in self.private}:
            return web.json_response(error_body("not found", errors=True), status=404)
        return self._jobs_response(
            request, "/repos/{owner}/{repo}/actions/jobs", lambda r: r.lower() == full, endpoint="repo_jobs"
        )

    async def _org_jobs(self, request: web.Request) -> web.Response:
        denied = self._auth(request, "org_jobs")
        if denied:
            return denied
        org = request.match_info["org"].lower()
        return self._jobs_response(
            request, "/orgs/{org}/actions/jobs", lambda r: r.split("/")[0].lower() == org, endpoint="org_jobs"
        )

    async def _admin_jobs(self, request: web.Request) -> web.Response:
        denied = self._auth(request, "admin_jobs")
        if denied:
            return denied
        return self._jobs_response(request, "/admin/actions/jobs", lambda r: True, endpoint="admin_jobs")

    async def _user_repos(self, request: web.Request) -> web.Response:
        denied = self._auth(request, "user_repos")
        if denied:
            return denied
        user = request.match_info["username"].lower()
        hidden = {p.lower() for p in self.private}
        owned = [(full.lower(), r) for full, r in self.repos.items() if full.split("/")[0].lower() == user]
        rows = [self._repo_row(r) for full, r in owned if full not in hidden]
        body, headers = self._page(request, rows)
        self._valid(self.validator.response, "/users/{username}/repos", body)
        return self._answer("user_repos", body, headers)

    def _repo_row(self, repo: dict[str, Any]) -> dict[str, Any]:
        """A repository as this Gitea sends it (`branch_count` from 1.26)."""
        return repo | {"branch_count": 1} if self.at_least(1, 26) else repo

    async def _user_orgs(self, request: web.Request) -> web.Response:
        denied = self._auth(request, "user_orgs")
        if denied:
            return denied
        fields: dict[str, Any] = {"full_name": "", "email": "", "description": "", "website": "", "location": ""}
        fields |= {"visibility": "public", "repo_admin_change_team_access": False}
        rows = [
            {"id": i + 2, "name": o, **fields, "avatar_url": f"{ROOT_URL}avatars/{i + 2}", "username": o}
            for i, o in enumerate(self.orgs)
        ]
        body, headers = self._page(request, rows)
        self._valid(self.validator.response, "/user/orgs", body)
        return self._answer("user_orgs", body, headers)


class FakeRegistrar(Registrar):
    """Registers runners in-process, as Gitea's `Register` would, for tests whose Gitea is not served:
    `tokens` are the registration tokens it knows, each registering in the scope it is asked about
    (`holds`); `issued` the registration token each scope ((kind, target)) gives an API token (403
    for any other); `registered` what it was asked, in order."""

    def __init__(self, *, tokens: Iterable[str]) -> None:
        super().__init__(cast(Any, None), version="test")
        self.tokens = set(tokens)
        self.issued: dict[tuple[str, str], str] = {}
        self.registered: list[tuple[str, str, tuple[str, ...]]] = []  # (Gitea URL, runner name, label names)

    async def registration_token(self, scope: PollScope) -> str:
        token = self.issued.get((scope.kind, scope.target))
        if token is None:
            raise GiteaError(f"POST /{scope.kind}/actions/runners/registration-token: HTTP 403", status=403)
        return token

    async def holds(self, scope: PollScope, runner_id: int) -> bool:
        return 0 < runner_id <= len(self.registered)

    async def orgs(self, scope: PollScope) -> list[str]:
        return []

    async def unregister(self, scope: PollScope, runner_id: int) -> bool:
        return False

    async def register(self, url: str, token: str, *, name: str, labels: Sequence[str]) -> Registration:
        if token not in self.tokens:
            said = f"registering runner {name} at {url}: HTTP 500 unknown: runner registration token not found"
            raise RegistrationRefused(said, status=500)
        self.registered.append((url, name, tuple(labels)))
        return Registration(id=len(self.registered), uuid=str(uuid.uuid4()), name=name, token=secrets.token_hex(20))


@contextlib.contextmanager
def served(fake: FakeGitea) -> Iterator[str]:
    """`fake` served on loopback from a thread and event loop of its own, for peers in other processes
    (the benchmarks' reconciler): its URL. Stopped on exit."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="fake-gitea", daemon=True)
    thread.start()
    runner = web.AppRunner(fake.app(), access_log=None)
    port = free_port()

    async def start() -> None:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()

    try:
        asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=30)
        yield f"http://127.0.0.1:{port}"
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()
