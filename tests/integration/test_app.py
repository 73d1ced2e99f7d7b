"""The receiver through aiohttp's test client, on fakeredis and on a real redis-server."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

from tests.conftest import SECRET, RecordedDelivery
from tests.jobs import gitea_time, model, payload, signed, stored
from tests.redis_server import RedisServer
from webhook_scaler import hook_keys
from webhook_scaler.app import create_app
from webhook_scaler.settings import Settings
from webhook_scaler.store.jobs.model import ALL, JobUpdate, Scope
from webhook_scaler.store.jobs.records import JobStore

Client = TestClient[web.Request, web.Application]
MakeClient = Callable[[web.Application], Awaitable[Client]]


def settings(**kw: Any) -> Settings:
    return Settings(webhook_secrets=[SECRET], **kw)


@pytest.fixture
async def client(aiohttp_client: MakeClient, redis: Redis) -> Client:
    return await aiohttp_client(create_app(settings(), redis=redis, registry=CollectorRegistry()))


async def post(client: Client, body: dict[str, Any], **kw: Any) -> Any:
    raw, headers = signed(body, secret=SECRET, **kw)
    return await client.post("/webhook", data=raw, headers=headers)


async def test_real_deliveries_are_recorded(
    client: Client, redis: Redis, deliveries: dict[str, RecordedDelivery]
) -> None:
    d = deliveries["01-queued.json"]
    resp = await client.post("/webhook", data=d.body, headers=d.headers)
    assert resp.status == 200
    # recorded from a real Gitea long ago, so past the replay window: doubted until a poll lists it
    assert await resp.json() == {"outcome": "applied", "job_id": 101, "state": "queued", "aged": True}
    assert [j.job_id for j in await JobStore(redis).queued(ALL)] == [101]
    again = await client.post("/webhook", data=d.body, headers=d.headers)
    assert (again.status, (await again.json())["outcome"]) == (200, "duplicate")


async def metric(client: Client, sample: str, **labels: str) -> float:
    """The sum of /metrics samples with this name that carry these labels (0 when there are none)."""
    text = await (await client.get("/metrics")).text()
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == sample and labels.items() <= s.labels.items()
    )


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        pytest.param({"X-Gitea-Event": "workflow_job"}, "missing_signature", id="missing"),
        pytest.param({"X-Gitea-Event": "workflow_job", "X-Gitea-Signature": "00" * 32}, "bad_signature", id="bad"),
        pytest.param(
            {"X-Gitea-Event": "workflow_job", "X-Hub-Signature": "sha1=00"}, "missing_signature", id="sha1-only"
        ),
    ],
)
async def test_bad_signature_is_401_and_writes_nothing(
    client: Client, redis: Redis, headers: dict[str, str], reason: str
) -> None:
    failures = "grs_webhook_signature_failures_total"
    assert await metric(client, failures) == 0
    resp = await client.post("/webhook", data=json.dumps(payload("queued")).encode(), headers=headers)
    assert resp.status == 401
    assert await redis.dbsize() == 0
    assert await metric(client, failures, reason=reason) == 1
    assert await metric(client, failures) == 1


async def test_malformed_json_is_400_and_writes_nothing(client: Client, redis: Redis) -> None:
    body = b'{"action": "queued", '
    import hashlib
    import hmac

    sig = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    resp = await client.post("/webhook", data=body, headers={"X-Gitea-Event": "workflow_job", "X-Gitea-Signature": sig})
    assert resp.status == 400
    assert "error" in await resp.json()
    assert await redis.dbsize() == 0


async def test_payload_that_does_not_fit_is_400(client: Client, redis: Redis) -> None:
    body = payload("queued")
    del body["workflow_job"]["id"]
    resp = await post(client, body)
    assert resp.status == 400
    assert await redis.dbsize() == 0


def changed(status: str, path: str, value: Any) -> dict[str, Any]:
    """The example payload with the field at a dotted `path` (list indexes as numbers) set to `value`."""
    body = payload(status)
    *parents, last = [int(k) if k.isdigit() else k for k in path.split(".")]
    node: Any = body
    for key in parents:
        node = node[key]
    node[last] = value
    return body


INT64_MAX = 2**63 - 1
_OUT_OF_RANGE = [
    *(
        pytest.param(path, value, id=f"{path}={value!r}"[:60])
        for path in ("workflow_job.id", "workflow_job.run_id", "repository.id", "repository.owner.id")
        for value in (0, -1, INT64_MAX + 1, "101", 101.0, True, None)
    ),
    *(
        pytest.param("workflow_job.run_attempt", value, id=f"run_attempt={value!r}")
        for value in (-1, INT64_MAX + 1, "1", 1.0, False)
    ),
    pytest.param("workflow_job.runner_id", "12", id="runner_id-string"),
    pytest.param("workflow_job.status", "running", id="status-not-in-enum"),
    pytest.param("action", "requested", id="action-not-in-enum"),
    pytest.param("workflow_job.labels", "ubuntu-latest", id="labels-not-a-list"),
    pytest.param("workflow_job.labels", [""], id="label-empty"),
    pytest.param("workflow_job.labels", ["x" * 256], id="label-256-chars"),
    pytest.param("workflow_job.labels", [f"l{i}" for i in range(65)], id="65-labels"),
    pytest.param("workflow_job.labels", [7], id="label-a-number"),
    pytest.param("workflow_job.name", "x" * 256, id="name-256-chars"),
    pytest.param("workflow_job.name", 7, id="name-a-number"),
    pytest.param("workflow_job.runner_name", "x" * 256, id="runner_name-256-chars"),
    pytest.param("workflow_job.head_branch", "x" * 256, id="head_branch-256-chars"),
    pytest.param("workflow_job.conclusion", "x" * 256, id="conclusion-256-chars"),
    pytest.param("workflow_job.steps.0.number", "0", id="step-number-string"),
    *(
        pytest.param("repository.full_name", value, id=f"full_name={value[:20]!r}")
        for value in (
            "widgets",
            "acme/widgets/x",
            "acme/",
            "/widgets",
            "acme/wid gets",
            "ac%me/widgets",
            "acme/wïdgets",
            "x" * 256 + "/widgets",
            "acme/" + "x" * 256,
        )
    ),
    pytest.param("repository.name", "a/b", id="repo-name-slash"),
    pytest.param("repository.owner.login", "ac me", id="owner-login-space"),
]


@pytest.mark.parametrize(("path", "value"), _OUT_OF_RANGE)
async def test_field_out_of_gitea_range_is_400_naming_it(client: Client, redis: Redis, path: str, value: Any) -> None:
    resp = await post(client, changed("in_progress", path, value))
    assert resp.status == 400
    error = (await resp.json())["error"]
    assert re.search(rf"does not fit the model: {re.escape(path)}[.:]", error), error
    assert await redis.dbsize() == 0


@pytest.mark.parametrize(
    ("path", "value"),
    [
        pytest.param("workflow_job.id", INT64_MAX, id="id-int64-max"),
        pytest.param("workflow_job.run_id", 1, id="run_id-1"),
        pytest.param("repository.id", INT64_MAX, id="repository-id-int64-max"),
        pytest.param("workflow_job.run_attempt", INT64_MAX, id="run_attempt-int64-max"),
        pytest.param("workflow_job.labels", ["x" * 255], id="label-255-chars"),
        pytest.param("workflow_job.labels", [f"l{i}" for i in range(64)], id="64-labels"),
        pytest.param("workflow_job.labels", None, id="labels-null"),
        pytest.param("workflow_job.labels", [], id="labels-empty"),
        pytest.param("workflow_job.name", "x" * 255, id="name-255-chars"),
        pytest.param("workflow_job.runner_name", "r" * 255, id="runner_name-255-chars"),
        pytest.param("repository.full_name", "A-b_c.9/R.e-p_o", id="full_name-every-character-class"),
        pytest.param("repository.full_name", "o" * 255 + "/" + "r" * 255, id="full_name-255-each"),
    ],
)
async def test_field_at_the_edge_of_gitea_range_is_recorded(client: Client, path: str, value: Any) -> None:
    resp = await post(client, changed("in_progress", path, value))
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["outcome"] == "applied"


async def test_oversized_body_is_413_before_reading(aiohttp_client: MakeClient, redis: Redis) -> None:
    client = await aiohttp_client(create_app(settings(max_body_bytes=2048), redis=redis, registry=CollectorRegistry()))
    big = b"x" * 10_000
    resp = await client.post("/webhook", data=big, headers={"X-Gitea-Event": "workflow_job"})
    assert resp.status == 413

    async def chunks() -> Any:  # no Content-Length: the limit holds while streaming
        for _ in range(10):
            yield b"y" * 1000

    resp = await client.post("/webhook", data=chunks(), headers={"X-Gitea-Event": "workflow_job"})
    assert resp.status == 413
    assert await redis.dbsize() == 0


async def test_ping_and_other_events_are_acknowledged(client: Client, redis: Redis) -> None:
    import hashlib
    import hmac

    body = b'{"hook_id": 1}'
    sig = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    for event in ("ping", "push"):
        resp = await client.post("/webhook", data=body, headers={"X-Gitea-Event": event, "X-Gitea-Signature": sig})
        assert resp.status == 200 and (await resp.json())["outcome"] == "ignored"
    assert await redis.dbsize() == 0


async def test_completed_before_queued(client: Client, redis: Redis) -> None:
    assert (await post(client, payload("completed"))).status == 200
    resp = await post(client, payload("queued"))
    assert (await resp.json())["outcome"] == "stale"
    assert await JobStore(redis).queued(ALL) == []


async def test_200_concurrent_deliveries_leave_200_queued(client: Client, redis: Redis) -> None:
    bodies = [payload("queued", job_id=1000 + i) for i in range(200)]
    responses = await asyncio.gather(*(post(client, b) for b in bodies))
    assert [r.status for r in responses] == [200] * 200
    queued = await JobStore(redis).queued(ALL)
    assert sorted(j.job_id for j in queued) == list(range(1000, 1200))


async def test_health_readiness_and_metrics(client: Client) -> None:
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/readyz")).status == 200
    await post(client, payload("queued"))
    assert await metric(client, "grs_webhook_deliveries_total", event="workflow_job", outcome="applied") == 1
    assert await metric(client, "grs_webhook_jobs_recorded_total", state="queued") == 1
    assert await metric(client, "grs_webhook_redis_write_duration_seconds_count") == 1
    assert await metric(client, "grs_webhook_request_duration_seconds_count") == 1


async def test_redis_down_gives_503_then_recovers(aiohttp_client: MakeClient, tmp_path: Path) -> None:
    server = RedisServer(tmp_path)
    server.start()
    redis = Redis.from_url(server.url, socket_timeout=1, socket_connect_timeout=1)
    try:
        client = await aiohttp_client(
            create_app(settings(redis_timeout=1.0), redis=redis, registry=CollectorRegistry())
        )
        assert (await post(client, payload("queued", job_id=1))).status == 200
        server.stop()
        down = await post(client, payload("queued", job_id=2))
        assert down.status == 503
        assert down.headers["Retry-After"]
        assert (await client.get("/readyz")).status == 503
        server.start()  # same port, same AOF: what was acknowledged is still there
        assert (await post(client, payload("queued", job_id=3))).status == 200
        assert (await client.get("/readyz")).status == 200
        assert sorted(j.job_id for j in await JobStore(redis).queued(ALL)) == [1, 3]
    finally:
        await redis.aclose()
        server.stop()


async def test_custom_webhook_path(aiohttp_client: MakeClient, redis: Redis) -> None:
    app = create_app(settings(webhook_path="/hooks/gitea"), redis=redis, registry=CollectorRegistry())
    client = await aiohttp_client(app)
    raw, headers = signed(payload("queued"), secret=SECRET)
    assert (await client.post("/hooks/gitea", data=raw, headers=headers)).status == 200
    assert (await client.post("/webhook", data=raw, headers=headers)).status in (404, 405)


async def two_tenants(
    aiohttp_client: MakeClient, redis: Redis
) -> tuple[Client, Callable[[dict[str, Any], str], Awaitable[Any]]]:
    """A receiver with one secret per org (acme, evil): its client, and a function that delivers a body
    signed with one of the secrets."""
    app = create_app(
        Settings(webhook_secrets=["@acme acme-secret", "@evil evil-secret"]), redis=redis, registry=CollectorRegistry()
    )
    client = await aiohttp_client(app)

    async def deliver(body: dict[str, Any], secret: str) -> Any:
        raw, headers = signed(body, secret=secret)
        return await client.post("/webhook", data=raw, headers=headers)

    return client, deliver


async def test_a_managed_webhooks_secret_records_its_owners_jobs_and_nobody_elses(
    aiohttp_client: MakeClient, redis: Redis
) -> None:
    """A receiver with the webhook key only (GRS_WEBHOOK_KEY, no secret line): a delivery signed with the
    secret the reconciler gave acme's webhook is recorded; the same secret about another owner's job is
    refused 401 and writes nothing."""
    key = "k" * 32
    app = create_app(Settings(webhook_key=key), redis=redis, registry=CollectorRegistry())
    client = await aiohttp_client(app)
    acme = hook_keys.secret(key.encode(), instance="", kind="owner", target="acme")
    raw, headers = signed(payload("queued", job_id=5, repo="acme/widgets"), secret=acme)
    assert (await client.post("/webhook", data=raw, headers=headers)).status == 200
    raw, headers = signed(payload("queued", job_id=6, repo="evil/tools"), secret=acme)
    assert (await client.post("/webhook", data=raw, headers=headers)).status == 401
    assert [j.job_id for j in await JobStore(redis).queued(ALL)] == [5]


async def test_a_secret_bound_to_owners_speaks_for_theirs_only_and_no_delivery_moves_anothers_job(
    aiohttp_client: MakeClient, redis: Redis
) -> None:
    """One webhook secret per org: a delivery signed with evil's secret about acme's repository gets 403;
    about evil's own repository but naming acme's job id (to finish it, naming acme's busy runner) it
    gets 409. Neither writes anything; acme's job stays as acme's deliveries left it."""
    client, deliver = await two_tenants(aiohttp_client, redis)

    assert (await deliver(payload("queued", job_id=7, repo="acme/widgets"), "acme-secret")).status == 200
    assert (await deliver(payload("in_progress", job_id=7, repo="acme/widgets"), "acme-secret")).status == 200
    before = await redis.hgetall("{grs}:job:7")
    foreign = await deliver(payload("completed", job_id=7, repo="acme/widgets"), "evil-secret")
    assert foreign.status == 403
    assert (await foreign.json())["error"] == "this webhook secret may not speak for the repositories of acme"
    hijack = await deliver(payload("completed", job_id=7, repo="evil/tools"), "evil-secret")
    assert hijack.status == 409, await hijack.text()
    assert (await hijack.json())["error"] == (
        "job 7 is recorded for another repository, and only a job's first delivery (queued or waiting) "
        "may move it there; not recorded"
    )
    assert await redis.hgetall("{grs}:job:7") == before
    assert await redis.zcard("{grs}:done") == 0, "no runner was reported done"
    assert (await deliver(payload("queued", job_id=8, repo="evil/tools"), "evil-secret")).status == 200
    assert await metric(client, "grs_webhook_signature_failures_total", reason="foreign_owner") == 1
    # evil squats a job id with `queued` before acme's job exists, and acme's own delivery is lost:
    # Gitea's listing (the poller's) is the truth and takes the job back for acme.
    assert (await deliver(payload("queued", job_id=9, repo="evil/tools", attempt=3), "evil-secret")).status == 200
    store = JobStore(redis)
    polled = JobUpdate.from_payload(model("queued", job_id=9, repo="acme/widgets"))
    since = await store.now_ms()
    assert await store.sync_polled(Scope("owner", "acme"), [polled], polled_since_ms=since, complete=True) == (1, 0)
    assert [(j.job_id, j.repo) for j in await store.queued(ALL)] == [(8, "evil/tools"), (9, "acme/widgets")]
    assert [j.job_id for j in await store.queued(Scope("owner", "evil"))] == [8]


async def test_a_squat_blocks_no_job_and_a_poll_settles_whose_id_it_is(
    aiohttp_client: MakeClient, redis: Redis
) -> None:
    """evil squats job id 9 with `queued` in its own repository. acme's job 9 is created: its `queued`
    takes the id (200, `"moved": true`, counted), without naming evil's repository. Once acme's poll
    listed 9, evil's `queued` about it is refused 409 and changes nothing."""
    client, deliver = await two_tenants(aiohttp_client, redis)

    assert (await deliver(payload("queued", job_id=9, repo="evil/tools", attempt=3), "evil-secret")).status == 200
    taken = await deliver(payload("queued", job_id=9, repo="acme/widgets"), "acme-secret")
    body = await taken.json()
    assert (taken.status, body) == (200, {"outcome": "applied", "job_id": 9, "state": "queued", "moved": True})
    assert await metric(client, "grs_webhook_deliveries_total", outcome="moved") == 1
    store = JobStore(redis)
    assert [(j.job_id, j.repo) for j in await store.queued(ALL)] == [(9, "acme/widgets")]
    listed = [JobUpdate.from_payload(model("queued", job_id=9, repo="acme/widgets"))]
    await store.sync_polled(Scope("owner", "acme"), listed, polled_since_ms=await store.now_ms(), complete=True)
    before = await stored(redis, 9)
    again = await deliver(payload("queued", job_id=9, repo="evil/tools", attempt=4), "evil-secret")
    assert again.status == 409
    assert (await again.json())[
        "error"
    ] == "job 9 belongs to another repository, as Gitea's own listing shows; not recorded"
    assert await stored(redis, 9) == before
    assert await metric(client, "grs_webhook_deliveries_total", outcome="conflict") == 1


@pytest.mark.parametrize(
    ("ahead_s", "skew", "status"),
    [
        pytest.param(-60, None, 200, id="a-minute-ago"),
        pytest.param(290, None, 200, id="within-the-default-skew"),
        pytest.param(310, None, 400, id="beyond-the-default-skew"),
        pytest.param(30, 0, 400, id="no-skew-allowed"),
        pytest.param(3000, 3600, 200, id="a-wide-skew"),
    ],
)
async def test_a_delivery_about_a_job_created_in_the_future_is_refused(
    aiohttp_client: MakeClient, redis: Redis, ahead_s: int, skew: int | None, status: int
) -> None:
    """No job is delivered before Gitea created it: a `created_at` further ahead of the receiver's clock
    than GRS_CLOCK_SKEW (5 minutes) is refused 400, whatever the state, and writes nothing."""
    now = 1_800_000_000
    kw = {} if skew is None else {"clock_skew": skew}
    app = create_app(settings(**kw), redis=redis, registry=CollectorRegistry(), clock=lambda: now)
    client = await aiohttp_client(app)
    for state in ("queued", "in_progress"):
        resp = await post(client, payload(state, job_id=7, created_at=gitea_time(now + ahead_s)))
        assert resp.status == status, await resp.text()
        if status == 400:
            error = (await resp.json())["error"]
            assert error == (
                f"job 7's created_at is {ahead_s} s ahead of this receiver's clock, more than GRS_CLOCK_SKEW "
                f"({0 if skew == 0 else 300} s) allows: no job is delivered before Gitea created it (check "
                "Gitea's and this host's clocks); not recorded"
            )
    if status == 400:
        assert await redis.keys("*") == []
        assert await metric(client, "grs_webhook_deliveries_total", outcome="from_future") == 2
    else:
        assert (await stored(redis, 7))["state"] == "in_progress"


async def test_a_delivery_about_a_job_older_than_the_window_is_doubted(
    aiohttp_client: MakeClient, redis: Redis
) -> None:
    """By default the replay window is a day (the records' TTLs). A `waiting` about a job Gitea created
    before then is answered 200 `too_old` with nothing written; a `queued` one is recorded `aged`, for the
    reconciler to start only once its poll lists it (a re-run keeps its job's `created_at`). The same job's
    `in_progress` and `completed` are recorded as ever (they start nothing)."""
    created = 1_800_000_000
    two_days_later = created + 2 * 24 * 3600
    app = create_app(settings(), redis=redis, registry=CollectorRegistry(), clock=lambda: two_days_later)
    client = await aiohttp_client(app)
    two_days_ago = gitea_time(created)
    resp = await post(client, payload("waiting", job_id=7, created_at=two_days_ago))
    assert (resp.status, await resp.json()) == (200, {"outcome": "too_old", "job_id": 7})
    assert await redis.keys("*") == []
    assert await metric(client, "grs_webhook_deliveries_total", outcome="too_old") == 1
    resp = await post(client, payload("queued", job_id=7, created_at=two_days_ago))
    assert (resp.status, await resp.json()) == (
        200,
        {"outcome": "applied", "job_id": 7, "state": "queued", "aged": True},
    )
    fresh = await post(client, payload("queued", job_id=8, created_at=gitea_time(two_days_later - 60)))
    assert (fresh.status, "aged" in await fresh.json()) == (200, False)
    assert [(j.job_id, j.unconfirmed) for j in await JobStore(redis).queued(ALL)] == [(7, True), (8, False)]
    resp = await post(client, payload("completed", job_id=7, created_at=two_days_ago))
    assert (resp.status, (await resp.json())["outcome"]) == (200, "applied")
    assert "aged" not in await stored(redis, 7)


async def test_with_the_replay_window_off_an_old_jobs_queued_is_recorded_as_any(
    aiohttp_client: MakeClient, redis: Redis
) -> None:
    """GRS_REPLAY_WINDOW=0: nothing is doubted (for a Gitea whose jobs' times cannot be trusted)."""
    app = create_app(settings(replay_window=0), redis=redis, registry=CollectorRegistry())
    client = await aiohttp_client(app)
    month_ago = gitea_time(time.time() - 30 * 24 * 3600)
    for status, job_id in (("waiting", 8), ("queued", 9)):
        resp = await post(client, payload(status, job_id=job_id, created_at=month_ago))
        assert (resp.status, (await resp.json())["outcome"]) == (200, "applied")
    assert [(j.job_id, j.aged) for j in await JobStore(redis).queued(ALL)] == [(9, False)]


def test_the_replay_window_follows_the_records_ttls_unless_set() -> None:
    assert settings().window_s == 24 * 3600
    assert settings(job_ttl=7200, completed_ttl=3600).window_s == 3600
    assert settings(replay_window=600).window_s == 600


async def test_each_gitea_instance_s_deliveries_go_to_its_own_jobs(aiohttp_client: MakeClient, redis: Redis) -> None:
    """Job 7 of the default Gitea and job 7 of the instance named `second` are two jobs: the secret that
    signs a delivery says whose, and neither instance's deliveries touch the other's record."""
    instances = "second=https://gitea-b.example"
    lines = ["@acme default-secret", "[second] @acme second-secret"]
    app = create_app(
        Settings(webhook_secrets=lines, gitea_instances=instances), redis=redis, registry=CollectorRegistry()
    )
    client = await aiohttp_client(app)

    async def deliver(body: dict[str, Any], secret: str) -> Any:
        raw, headers = signed(body, secret=secret)
        return await client.post("/webhook", data=raw, headers=headers)

    assert (await deliver(payload("queued", job_id=7, labels=["a"]), "default-secret")).status == 200
    assert (await deliver(payload("queued", job_id=7, labels=["b"]), "second-secret")).status == 200
    assert (await deliver(payload("completed", job_id=7), "second-secret")).status == 200
    store = JobStore(redis)
    assert [j.labels for j in await store.queued(ALL)] == [("a",)]
    assert await store.of("second").queued(ALL) == []
    assert (await stored(redis, 7))["state"] == "queued"


@pytest.mark.parametrize(
    ("lines", "problem"),
    [
        (["[third] s3"], r"line 1: \[third\] is no instance GRS_GITEA_INSTANCES names"),
        (["s1", "[second] s1"], "line 2: one secret may speak for one Gitea instance only"),
        (["[Second] s2"], r"line 1: a secret of a named instance is `\[name\] SECRET`"),
        (["@acme [second] s2"], r"line 1: the instance comes first: `\[name\] @owner1,owner2 SECRET`"),
    ],
)
def test_a_secret_line_of_an_unknown_instance_or_of_two_is_refused(lines: list[str], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        Settings(webhook_secrets=lines, gitea_instances="second=https://gitea-b.example")


def test_one_gitea_is_named_once_however_its_url_is_spelt() -> None:
    with pytest.raises(ValueError, match="each Gitea instance is named once, and each name is one instance's"):
        Settings(webhook_secrets=["s"], gitea_instances="a=https://g.example,b=https://G.example:443/")


def test_a_replay_window_past_the_records_is_refused() -> None:
    with pytest.raises(ValueError, match="GRS_REPLAY_WINDOW"):
        settings(replay_window=30 * 3600)  # the job TTL is 25 h
