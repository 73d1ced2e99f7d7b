"""The Gitea REST client: the polling fallback (Gitea >= 1.25 for `/actions/jobs`) and runner rows
(`/actions/runners`, 1.24+).

Owns: the jobs endpoints per scope, status filters (`queued` and `in_progress` only; `waiting` and
`pending` mean blocked and are never demand), listing, disabling and deleting runners, whether a token
administers a scope (`administers`, `login`), Gitea's version, a user's repositories, and the
transient/permanent error split with Retry-After on 429 (for every call of the Gitea side: `_call`).
Must not touch Redis or Kubernetes, and never logs or raises the token. Paging, and whether a listing
holds every row, is `paging`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

import aiohttp
from pydantic import ValidationError

from reconciler.gitea.paging import PAGE_SIZE, Pages, walk
from webhook_scaler.gitea import ActionRunner, ActionRunnersResponse, RepositoryRef, WorkflowJob, WorkflowJobsResponse

log = logging.getLogger(__name__)


class GiteaError(Exception):
    """A failed Gitea call, with the HTTP status if there was an answer. Callers retry every kind later
    (the poll backs off, at least as long as Retry-After asks); `status` tells a refused token apart."""

    def __init__(self, message: str, *, status: int | None = None, retry_after: float = 0):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class PollScope:
    """One distinct thing to poll: a Gitea instance, a scope, and the token used for it."""

    url: str
    kind: Literal["global", "org", "user", "repo"]
    target: str  # org, user or owner/repo; "" for global
    token: str

    def __repr__(self) -> str:  # never show the token
        return f"PollScope({self.url!r}, {self.kind!r}, {self.target!r})"


@dataclass(frozen=True, slots=True)
class PolledJob:
    """A job Gitea lists, with the repository it belongs to."""

    job: WorkflowJob
    repo: str  # owner/name


@dataclass(frozen=True, slots=True)
class JobsListing:
    """A scope's queued and running jobs; `complete`: every row Gitea had was read (`paging`), so a
    job missing here was not queued or running while the listing was taken. `repos`: where the
    listing read only some repositories of its scope (a user's, those its token can see), which
    (`owner/name`, lower-case): it says nothing of the jobs of any other; None: the whole scope."""

    jobs: list[PolledJob]
    complete: bool
    repos: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class RunnersListing:
    """A scope's runner rows; `complete` as in JobsListing."""

    runners: list[ActionRunner]
    complete: bool


class GiteaClient:
    """Polls Gitea's Actions API over one aiohttp session."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        timeout: float = 10.0,
        on_request: Callable[[str, str], None] | None = None,
    ) -> None:
        self.session = session
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self.on_request = on_request or (lambda endpoint, outcome: None)

    async def _get(
        self, scope: PollScope, path: str, params: list[tuple[str, str]], endpoint: str
    ) -> tuple[Any, Mapping[str, str]]:
        return await self._call("GET", scope, path, params, endpoint, ok=(200,))

    async def _call(
        self,
        method: str,
        scope: PollScope,
        path: str,
        params: list[tuple[str, str]],
        endpoint: str,
        *,
        ok: tuple[int, ...],
        body: Any = None,
    ) -> tuple[Any, Mapping[str, str]]:
        """The decoded body (None unless 200 or 201) and the response headers; `body` is sent as JSON."""
        url = scope.url.rstrip("/") + "/api/v1" + path
        headers = {"Authorization": f"token {scope.token}", "Accept": "application/json"}
        try:
            async with self.session.request(
                method, url, params=params, headers=headers, json=body, timeout=self.timeout
            ) as resp:
                if resp.status in ok:
                    self.on_request(endpoint, "ok")
                    body = await resp.json(content_type=None) if resp.status in (200, 201) else None
                    return body, resp.headers
                self.on_request(endpoint, str(resp.status))
                retry_after = _retry_after(resp.headers.get("Retry-After"))
                raise GiteaError(
                    f"{method} {path}: HTTP {resp.status}",
                    status=resp.status,
                    retry_after=retry_after,
                )
        except (TimeoutError, aiohttp.ClientError) as exc:
            self.on_request(endpoint, "error")
            raise GiteaError(f"{method} {path}: {type(exc).__name__}") from None

    async def _pages(
        self, scope: PollScope, path: str, params: list[tuple[str, str]], endpoint: str, *, key: str | None
    ) -> Pages:
        """Every page of a list endpoint, and whether they hold every row (`paging`)."""

        async def fetch(page: int) -> tuple[Any, Mapping[str, str]]:
            return await self._get(scope, path, [*params, ("page", str(page)), ("limit", str(PAGE_SIZE))], endpoint)

        return await walk(fetch, key=key)

    async def jobs(self, scope: PollScope) -> JobsListing:
        """The scope's jobs that are queued or in progress, over all pages. A user scope lists each
        repository of the user the token can see (a private one it cannot is not listed at all), so
        the listing is of those repositories only (`JobsListing.repos`), and complete only if every
        one of their listings and the list of them are."""
        if scope.kind == "user":
            repos, complete = await self.user_repos(scope)
            out: list[PolledJob] = []
            for repo in repos:
                listing = await self._repo_jobs(scope, repo)
                out.extend(listing.jobs)
                complete = complete and listing.complete
            return JobsListing(out, complete, frozenset(r.lower() for r in repos))
        if scope.kind == "repo":
            return await self._repo_jobs(scope, scope.target)
        path = "/admin/actions/jobs" if scope.kind == "global" else f"/orgs/{quote(scope.target)}/actions/jobs"
        return self._parse_jobs(await self._jobs_pages(scope, path, scope.kind), repo=None)

    async def _repo_jobs(self, scope: PollScope, repo: str) -> JobsListing:
        owner, name = repo.split("/", 1)
        path = f"/repos/{quote(owner)}/{quote(name)}/actions/jobs"
        return self._parse_jobs(await self._jobs_pages(scope, path, "repo"), repo=repo)

    async def _jobs_pages(self, scope: PollScope, path: str, endpoint: str) -> Pages:
        params = [("status", "queued"), ("status", "in_progress")]
        return await self._pages(scope, path, params, f"{endpoint}_jobs", key="jobs")

    @staticmethod
    def _parse_jobs(pages: Pages, *, repo: str | None) -> JobsListing:
        out: list[PolledJob] = []
        for body in pages.bodies:
            for job in _fitting_jobs(body):
                full = repo or job.repo_full_name
                if full is None:
                    log.warning("job without repository in its url", extra={"job_id": job.id})
                    continue
                out.append(PolledJob(job=job, repo=full))
        return JobsListing(out, pages.complete)

    def _runners_path(self, scope: PollScope) -> str:
        if scope.kind == "repo":
            owner, name = scope.target.split("/", 1)
            return f"/repos/{quote(owner)}/{quote(name)}/actions/runners"
        if scope.kind == "org":
            return f"/orgs/{quote(scope.target)}/actions/runners"
        return "/user/actions/runners" if scope.kind == "user" else "/admin/actions/runners"

    async def runners(self, scope: PollScope) -> RunnersListing:
        """The runners registered in the scope itself (a repo's list leaves out its owner's runners);
        a user scope lists the token owner's runners."""
        pages = await self._pages(scope, self._runners_path(scope), [], f"{scope.kind}_runners", key="runners")
        out: list[ActionRunner] = []
        for body in pages.bodies:
            try:
                out.extend(ActionRunnersResponse.model_validate(body).runners)
            except ValidationError as exc:
                raise GiteaError("runners list does not fit the model") from exc
        return RunnersListing(out, pages.complete)

    async def administers(self, scope: PollScope) -> None:
        """Return if the token may administer the scope's runners: the first row of their listing answers
        (owners and site admins only); GiteaError otherwise (401, 403: it may not; 404: no such scope)."""
        await self._get(scope, self._runners_path(scope), [("page", "1"), ("limit", "1")], f"{scope.kind}_runners")

    async def login(self, scope: PollScope) -> str:
        """The login of the user the token is of (`GET /user`)."""
        return await self._field(scope, "/user", "login", "user")

    async def _field(self, scope: PollScope, path: str, key: str, endpoint: str) -> str:
        """One string field of a GET's object answer; GiteaError if it has none."""
        body, _ = await self._get(scope, path, [], endpoint)
        value = body.get(key) if isinstance(body, dict) else None
        if not isinstance(value, str):
            raise GiteaError(f"GET {path}: no {key} in the answer")
        return value

    async def delete_runner(self, scope: PollScope, runner_id: int) -> None:
        """Remove a runner's row; one that is gone already (404) counts as removed."""
        path = f"{self._runners_path(scope)}/{runner_id}"
        await self._call("DELETE", scope, path, [], f"{scope.kind}_runner_delete", ok=(204, 404))

    async def disable_runner(self, scope: PollScope, runner_id: int) -> ActionRunner | None:
        """Tell Gitea to hand the runner no job (`PATCH`, Gitea >= 1.26); its row as it is now, or None
        if it is gone (404). A Gitea without the call answers 405: GiteaError with that status."""
        path = f"{self._runners_path(scope)}/{runner_id}"
        body, _ = await self._call(
            "PATCH", scope, path, [], f"{scope.kind}_runner_disable", ok=(200, 404), body={"disabled": True}
        )
        if body is None:
            return None
        try:
            return ActionRunner.model_validate(body)
        except ValidationError as exc:
            raise GiteaError("runner does not fit the model") from exc

    async def version(self, scope: PollScope) -> str:
        """The Gitea's version string (`/version`, e.g. `1.25.2`, or Forgejo's `11.0.1+gitea-1.22.0`)."""
        return await self._field(scope, "/version", "version", "version")

    async def user_repos(self, scope: PollScope) -> tuple[list[str], bool]:
        """`owner/name` of every repository the user owns, and whether the listing is complete."""
        pages = await self._pages(scope, f"/users/{quote(scope.target)}/repos", [], "user_repos", key=None)
        repos: list[str] = []
        for body in pages.bodies:
            for item in body or []:
                try:
                    ref = RepositoryRef.model_validate(item)
                except ValidationError:
                    continue
                if ref.owner.login.lower() == scope.target.lower():
                    repos.append(ref.full_name)
        return repos, pages.complete


def _fitting_jobs(body: Any) -> tuple[WorkflowJob, ...]:
    """The page's jobs. A row out of Gitea's types and ranges is logged and left out, as the receiver
    refuses its webhook; one such row must not stop the poll of every other job in the scope."""
    try:
        return WorkflowJobsResponse.model_validate(body).jobs
    except ValidationError as exc:
        errors = exc.errors(include_input=False)
        bad = {err["loc"][1] for err in errors if len(err["loc"]) >= 2 and err["loc"][0] == "jobs"}
        if not isinstance(body, dict) or not isinstance(body.get("jobs"), list) or len(bad) == 0:
            raise GiteaError("jobs list does not fit the model") from exc
        fields = "; ".join(f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in errors[:5])
        log.warning("jobs left out: they do not fit the model", extra={"rows": len(bad), "fields": fields})
        kept = [row for i, row in enumerate(body["jobs"]) if i not in bad]
    try:
        return WorkflowJobsResponse.model_validate({**body, "jobs": kept}).jobs
    except ValidationError as exc:
        raise GiteaError("jobs list does not fit the model") from exc


def _retry_after(value: str | None) -> float:
    try:
        return max(0.0, float(value)) if value else 0.0
    except ValueError:
        return 0.0
