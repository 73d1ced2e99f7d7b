"""An in-process fake of the Gitea Actions API, kept honest against Gitea's own OpenAPI spec.

Every response body it sends is validated against tests/data/gitea/swagger.v1.json (Gitea 1.25.5;
the runner `PATCH` of 1.26 against swagger.v1.1.26.0-dev.json, request body included), so it cannot
drift from what Gitea really sends. A failed check is recorded, not answered as a 500 (which the
product would retry as transient): the autouse fixture in tests/conftest.py fails the test.
The runner `Register` RPC (connect over HTTP, JSON; not in the OpenAPI spec) answers as Gitea 1.26's
handler does, plain errors included. It reproduces the quirks the poller must survive:
`limit` capped at 50, every row when `page` is omitted, repeatable `status`, 400 on an unknown
status, and `steps: null` in lists.
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
from tests.redis_server import free_port

DATA = Path(__file__).parent / "data" / "gitea"
REGISTRATION_TOKEN = "fake-registration-token"  # what a new FakeGitea registers runners with
_STATUS_QUERY = {
    "queued": {"queued"},
    "in_progress": {"in_progress"},
    "waiting": {"waiting"},
    "pending": {"waiting"},
    "requested": {"waiting"},
    "action_required": {"waiting"},
    "completed": {"completed"},
}


def _allow_null_arrays(node: Any) -> Any:
    # Go renders nil slices as null and Swagger 2.0 cannot say "nullable": accept null for arrays.
    if isinstance(node, dict):
        out = {k: _allow_null_arrays(v) for k, v in node.items()}
        if out.get("type") == "array":
            out["type"] = ["array", "null"]
        return out
    if isinstance(node, list):
        return [_allow_null_arrays(v) for v in node]
    return node


class SwaggerValidator:
    """Validates bodies against a definition or a path's 200 response in Gitea's spec."""

    def __init__(self, path: Path = DATA / "swagger.v1.json") -> None:
        self.spec = _allow_null_arrays(json.loads(path.read_text()))

    def _check(self, schema: dict[str, Any], body: Any) -> None:
        root: dict[str, Any] = {**self.spec, **schema}
        jsonschema.Draft4Validator(root).validate(body)

    def response(self, path: str, body: Any, *, method: str = "get") -> None:
        """Raise jsonschema.ValidationError unless `body` fits `method path`'s 200 response."""
        ref = self.spec["paths"][path][method]["responses"]["200"]["$ref"]
        if ref.startswith("#/definitions/"):  # the runners lists point at a definition, not a response
            self._check({"$ref": ref}, body)
        else:
            self._check(self.spec["responses"][ref.rsplit("/", 1)[1]]["schema"], body)

    def has(self, method: str, path: str, status: int) -> bool:
        """Whether Gitea's spec documents this answer to `method path`."""
        return str(status) in self.spec["paths"][path][method.lower()]["responses"]

    def request(self, method: str, path: str, body: Any) -> None:
        """Raise jsonschema.ValidationError unless `body` fits `method path`'s body parameter."""
        (param,) = [p for p in self.spec["paths"][path][method.lower()]["parameters"] if p["in"] == "body"]
        self._check(param["schema"], body)


LIVE: list[FakeGitea] = []  # every fake made, for the check that fails the test it answered badly in


class FakeGitea:
    """Jobs by repository, served the way Gitea 1.25 serves them."""

    def __init__(self, *, token: str, registration_token: str = REGISTRATION_TOKEN) -> None:
        self.token = token
        # registration token -> the scope its runners register in, as Gitea keeps them
        self.registration_tokens: dict[str, tuple[str, str]] = {registration_token: ("org", "acme")}
        self.validator = SwaggerValidator()
        self.validator_126 = SwaggerValidator(DATA / "swagger.v1.1.26.0-dev.json")
        self.errors: list[str] = []  # failed checks against Gitea's spec
        # called after an answer to the endpoint is made, before it is sent: a test's interleaving
        self.after: dict[str, Callable[[], None]] = {}
        self.disable_supported = True  # False: answer PATCH as Gitea 1.25 does (405)
        self.refused: set[str] = set()  # endpoints the token may not use (403), e.g. "global_runners"
        self.version = "1.25.0"  # before 1.25, Gitea has no jobs API: its paths answer 404
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

    def add_job(
        self, job_id: int, *, repo: str, status: str = "queued", labels: list[str] | None = None, attempt: int = 0
    ) -> dict[str, Any]:
        """Add or replace a job."""
        owner, name = repo.split("/")
        job: dict[str, Any] = copy.deepcopy(self._job_template)
        job.update(
            id=job_id,
            url=f"https://gitea.example.com/api/v1/repos/{owner}/{name}/actions/jobs/{job_id}",
            status=status,
            labels=labels if labels is not None else ["ubuntu-latest"],
            run_attempt=attempt,
        )
        self.jobs[job_id] = job
        if repo not in self.repos:
            r = copy.deepcopy(self._repo_template)
            r.update(id=len(self.repos) + 1, name=name, full_name=repo)
            r["owner"] = {**r["owner"], "login": owner, "username": owner}
            self.repos[repo] = r
        return job

    def add_runner(
        self, name: str, *, scope: tuple[str, str] = ("org", "acme"), status: str = "online", busy: bool = False
    ) -> int:
        """Register a runner row in a scope (("repo", "o/r"), ("org", o), ("user", u) or ("global", ""))."""
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
                {k: v for k, v in r.items() if k != "_scope"}
                for r in self.runners.values()
                if kind == "global" or r["_scope"] == scope  # the instance's listing has every runner
            ]
            rows.sort(key=lambda r: r["status"] == "offline")  # Gitea's order: the last seen online first
            body = {"runners": self._page(request, rows), "total_count": len(rows)}
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
                return web.json_response({"message": "runner not found"}, status=404)
            body = {k: v for k, v in row.items() if k != "_scope"}
            self._valid(self.validator_126.response, path, body)
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
            self._valid(self.validator_126.request, "PATCH", path, form)
            row = self.runners.get(int(request.match_info["runner_id"]))
            if row is None or not self._editable(row, request, kind):
                self._valid(self._documented, "PATCH", path, 404)
                return web.json_response({"message": "runner not found"}, status=404)
            row["disabled"] = bool(form.get("disabled"))
            body = {k: v for k, v in row.items() if k != "_scope"}
            self._valid(self.validator_126.response, path, body, method="patch")
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

    def _documented(self, method: str, path: str, status: int) -> None:
        if not self.validator_126.has(method, path, status):
            raise AssertionError(f"{method} {path} answered {status}, which Gitea's spec does not document")

    def _valid(self, check: Callable[..., None], *args: Any, **kwargs: Any) -> None:
        try:
            check(*args, **kwargs)
        except Exception as exc:  # recorded for the test to fail on, never answered as a 500
            self.errors.append(f"{getattr(check, '__name__', check)}{args[:2]}: {exc}"[:2000])

    def _answer(self, endpoint: str, body: Any) -> web.Response:
        hook = self.after.get(endpoint)
        if hook is not None:
            hook()
        return web.json_response(body)

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
                return web.json_response({"message": "runner not found"}, status=404)
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
            return web.json_response({"message": "token is required"}, status=401)
        if endpoint in self.refused:
            return web.json_response({"message": "token does not have at least one of required scope(s)"}, status=403)
        if endpoint.endswith("_jobs") and tuple(int(p) for p in self.version.split(".")[:2]) < (1, 25):
            return web.json_response({"errors": None, "message": "not found", "url": ""}, status=404)
        if self.fail_with:
            return web.json_response({"message": "injected"}, status=self.fail_with)
        return None

    async def _version(self, request: web.Request) -> web.Response:
        self.requests["version"] += 1
        body = {"version": self.version}
        self._valid(self.validator.response, "/version", body)
        return web.json_response(body)

    def _page(self, request: web.Request, rows: list[Any]) -> list[Any]:
        limit = min(int(request.query.get("limit", "30")), 50)
        if "page" not in request.query:  # Gitea 1.25's FindAndCount applies LIMIT only when page >= 1
            return rows
        page = max(int(request.query["page"]), 1)
        return rows[(page - 1) * limit : page * limit]

    def _jobs_response(
        self, request: web.Request, swagger_path: str, repo_filter: Any, *, endpoint: str
    ) -> web.Response:
        wanted: set[str] = set()
        for value in request.query.getall("status", []):
            if value not in _STATUS_QUERY:
                return web.json_response({"message": f"Invalid status {value}", "url": ""}, status=400)
            wanted |= _STATUS_QUERY[value]
        rows = [j for j in self.jobs.values() if repo_filter(self.repo_of(j)) and (not wanted or j["status"] in wanted)]
        body = {"jobs": self._page(request, rows), "total_count": len(rows)}
        self._valid(self.validator.response, swagger_path, body)
        return self._answer(endpoint, body)

    async def _repo_jobs(self, request: web.Request) -> web.Response:
        denied = self._auth(request, "repo_jobs")
        if denied:
            return denied
        full = f"{request.match_info['owner']}/{request.match_info['repo']}".lower()
        if full in {p.lower() for p in self.private}:
            return web.json_response({"errors": None, "message": "not found", "url": ""}, status=404)
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
        rows = [r for full, r in owned if full not in hidden]
        body = self._page(request, rows)
        self._valid(self.validator.response, "/users/{username}/repos", body)
        return self._answer("user_repos", body)

    async def _user_orgs(self, request: web.Request) -> web.Response:
        denied = self._auth(request, "user_orgs")
        if denied:
            return denied
        fields = {"full_name": "", "email": "", "avatar_url": "", "description": "", "website": "", "location": ""}
        fields |= {"visibility": "public"}
        rows = [{"id": i + 1, "name": o, "username": o, **fields} for i, o in enumerate(self.orgs)]
        body = self._page(request, rows)
        self._valid(self.validator.response, "/user/orgs", body)
        return self._answer("user_orgs", body)


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
