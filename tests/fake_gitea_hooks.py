"""Gitea's webhook endpoints, for a FakeGitea (`{scope}/hooks`): list, create, edit, delete, each request
and answer held to Gitea 1.26's spec. TEST HARNESS ONLY.

Like Gitea, it never answers a webhook's secret back (`config` holds `url`, `content_type`, `http_method`,
and `is_system_webhook` for the instance's); the test reads `secrets` instead.
"""

from __future__ import annotations

import itertools
from typing import Any

from aiohttp import web

from tests.fake_gitea import FakeGitea, error_body
from tests.gitea_spec import validator

SCOPES = (
    ("/repos/{owner}/{repo}", "repo"),
    ("/orgs/{org}", "org"),
    ("/user", "user"),
    ("/admin", "global"),
)
HOOK_ANSWERED = ("url", "content_type", "http_method", "is_system_webhook")


class FakeHooks:
    """The webhooks of one FakeGitea, by id; each with the scope it was made in."""

    def __init__(self, fake: FakeGitea) -> None:
        self.fake = fake
        self.hooks: dict[int, dict[str, Any]] = {}  # id -> Gitea's row, with "_scope": (kind, target)
        self.secrets: dict[int, str] = {}  # id -> its secret, which Gitea never answers
        self._ids = itertools.count(1)
        self.owned: set[tuple[str, str]] | None = None  # the scopes the token administers; None: every one

    def add_to(self, app: web.Application) -> web.Application:
        """Add the endpoints to the fake's app (before it starts)."""
        for prefix, kind in SCOPES:
            app.router.add_get(f"/api/v1{prefix}/hooks", self._list(prefix, kind))
            app.router.add_post(f"/api/v1{prefix}/hooks", self._create(prefix, kind))
            app.router.add_patch(f"/api/v1{prefix}/hooks/{{id}}", self._edit(prefix, kind))
            app.router.add_delete(f"/api/v1{prefix}/hooks/{{id}}", self._delete(prefix, kind))
        return app

    def add(self, kind: str, target: str, *, url: str, secret: str = "") -> int:
        """A webhook made by someone else (the admin, another replica)."""
        hook_id = next(self._ids)
        self.hooks[hook_id] = self._row(hook_id, kind, target, {"url": url, "content_type": "json"}, ["workflow_job"])
        self.secrets[hook_id] = secret
        return hook_id

    def of(self, kind: str, target: str) -> list[dict[str, Any]]:
        """The scope's webhooks, as Gitea keeps them."""
        return [h for h in self.hooks.values() if h["_scope"] == (kind, target.lower())]

    @staticmethod
    def _target(request: web.Request, kind: str) -> str:
        info = request.match_info
        return {"repo": f"{info.get('owner')}/{info.get('repo')}", "org": info.get("org", "")}.get(kind, "").lower()

    def _row(self, hook_id: int, kind: str, target: str, config: dict[str, str], events: list[str]) -> dict[str, Any]:
        shown = {k: v for k, v in config.items() if k in HOOK_ANSWERED}
        now = "2026-11-27T12:00:00Z"
        return {
            "id": hook_id, "type": "gitea", "branch_filter": "", "config": shown, "events": events,
            "authorization_header": "", "active": True, "updated_at": now, "created_at": now,
            "_scope": (kind, target),
        }  # fmt: skip

    def _denied(self, request: web.Request, endpoint: str, kind: str) -> web.Response | None:
        denied = self.fake._auth(request, endpoint)
        if denied is None and self.owned is not None and (kind, self._target(request, kind)) not in self.owned:
            return web.json_response(error_body("token is not an owner of this scope"), status=403)
        return denied

    def _answer(self, template: str, method: str, body: Any, status: int) -> web.Response:
        self.fake._documented(method, template, status)
        if status == 200:
            self.fake._valid(validator("1.26").response, template, body, method=method.lower())
        return web.json_response(body, status=status)

    @staticmethod
    def _shown(row: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in row.items() if k != "_scope"}

    def _list(self, prefix: str, kind: str) -> Any:
        async def handle(request: web.Request) -> web.Response:
            denied = self._denied(request, f"{kind}_hooks", kind)
            if denied:
                return denied
            rows = [self._shown(h) for h in self.of(kind, self._target(request, kind))]
            if kind == "global" and request.query.get("type") == "system":
                rows = [r for r in rows if r["config"].get("is_system_webhook") == "true"]
            page, limit = int(request.query.get("page", "1")), int(request.query.get("limit", "50"))
            return self._answer(f"{prefix}/hooks", "GET", rows[(page - 1) * limit : page * limit], 200)

        return handle

    def _create(self, prefix: str, kind: str) -> Any:
        async def handle(request: web.Request) -> web.Response:
            denied = self._denied(request, f"{kind}_hook_create", kind)
            if denied:
                return denied
            body = await request.json()
            self.fake._valid(validator("1.26").request, "POST", f"{prefix}/hooks", body)
            hook_id = next(self._ids)
            row = self._row(hook_id, kind, self._target(request, kind), body["config"], body.get("events") or [])
            row["active"] = body.get("active") is True
            self.hooks[hook_id], self.secrets[hook_id] = row, body["config"].get("secret", "")
            return self._answer(f"{prefix}/hooks", "POST", self._shown(row), 201)

        return handle

    def _found(self, request: web.Request, kind: str) -> dict[str, Any] | None:
        row = self.hooks.get(int(request.match_info["id"]))
        return row if row is not None and row["_scope"] == (kind, self._target(request, kind)) else None

    def _edit(self, prefix: str, kind: str) -> Any:
        async def handle(request: web.Request) -> web.Response:
            denied = self._denied(request, f"{kind}_hook_edit", kind)
            if denied:
                return denied
            body = await request.json()
            self.fake._valid(validator("1.26").request, "PATCH", f"{prefix}/hooks/{{id}}", body)
            row = self._found(request, kind)
            if row is None:
                return web.json_response(error_body("Not Found", errors=True), status=404)
            config = body.get("config") or {}
            row["config"] |= {k: v for k, v in config.items() if k in HOOK_ANSWERED}
            if "secret" in config:
                self.secrets[row["id"]] = config["secret"]
            row["active"] = body.get("active", row["active"])
            row["events"] = body.get("events", row["events"])
            return self._answer(f"{prefix}/hooks/{{id}}", "PATCH", self._shown(row), 200)

        return handle

    def _delete(self, prefix: str, kind: str) -> Any:
        async def handle(request: web.Request) -> web.Response:
            denied = self._denied(request, f"{kind}_hook_delete", kind)
            if denied:
                return denied
            row = self._found(request, kind)
            if row is None:
                return web.json_response(error_body("Not Found", errors=True), status=404)
            del self.hooks[row["id"]]
            self.fake._documented("DELETE", f"{prefix}/hooks/{{id}}", 204)
            return web.Response(status=204)

        return handle
