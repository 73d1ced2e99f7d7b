"""plan(): a table of situations, and properties over random ones."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.decide.phases import ACTIVE, POD_GONE, Phase, Runner, classify
from reconciler.decide.plan import Create, Delete, plan
from reconciler.model.spec import RunnerGroupSpec
from tests.groups import spec
from webhook_scaler.store.jobs.model import QueuedJob

NOW = 1_000_000


def job(
    job_id: int,
    *,
    claimed_by: str | None = None,
    queued_ms: int | None = None,
    listed_ms: int | None = None,
    missed: bool = False,
) -> QueuedJob:
    return QueuedJob(
        job_id=job_id,
        labels=(),
        owner="acme",
        repo="acme/w",
        name="build",
        run_id=1,
        attempt=0,
        queued_ms=queued_ms if queued_ms is not None else job_id,
        claimed_by=claimed_by,
        listed_ms=listed_ms,
        missed=missed,
    )


def runner(name: str, phase: Phase, *, since: int = NOW - 1000, job_id: int | None = None) -> Runner:
    return Runner(name=name, phase=phase, since_ms=since, job_id=job_id)


@pytest.mark.parametrize(
    ("queued", "runners", "kw", "creates", "deletes"),
    [
        pytest.param([], [], {}, [], [], id="nothing-queued-nothing-running"),
        pytest.param([job(1), job(2)], [], {}, [Create(1, 1), Create(2, 2)], [], id="one-runner-per-job"),
        pytest.param(
            [job(i) for i in range(1, 6)], [], {}, [Create(1, 1), Create(2, 2), Create(3, 3)], [], id="clamped-to-max"
        ),
        pytest.param(
            [job(1, claimed_by="r1")],
            [runner("r1", Phase.PENDING, job_id=1)],
            {},
            [],
            [],
            id="covered-by-its-pending-runner",
        ),
        pytest.param(
            [job(1, claimed_by="r1")], [], {"in_flight": frozenset({"r1"})}, [], [], id="covered-by-unseen-runner"
        ),
        pytest.param(
            [job(1, claimed_by="r1"), job(2)],
            [runner("r1", Phase.BUSY, job_id=1)],
            {},
            [Create(2, 2), Create(None)],
            [],
            id="runner-took-another-job-so-one-more",
        ),
        pytest.param(
            [job(1, claimed_by="r1")],
            [runner("r1", Phase.FAILED, job_id=1)],
            {},
            [Create(1, 1, stale_claim="r1")],
            [],
            id="failed-runner-frees-slot-and-claim",
        ),
        pytest.param(
            [job(1, claimed_by="r1", listed_ms=NOW - 3000)],
            [Runner("r1", Phase.SUCCEEDED, NOW - 9000, 1, finished_ms=NOW - 2000)],
            {},
            [],
            [],
            id="succeeded-runner-ran-the-job-its-webhooks-were-lost",
        ),
        pytest.param(
            [job(1, claimed_by="r1", listed_ms=NOW - 500)],
            [Runner("r1", Phase.SUCCEEDED, NOW - 9000, 1, finished_ms=NOW - 2000)],
            {},
            [Create(1, 1, stale_claim="r1")],
            [],
            id="succeeded-runner-and-a-later-poll-still-lists-the-job",
        ),
        pytest.param(
            [job(1, claimed_by="r1", listed_ms=NOW - 500), job(2, claimed_by="r2", missed=True)],
            [
                Runner("r1", Phase.SUCCEEDED, NOW - 9000, 1, finished_ms=NOW - 2000),
                runner("r2", Phase.PENDING, job_id=2),
            ],
            {},
            [],
            [],
            id="a-job-the-last-listing-missed-wants-nothing-and-its-runner-serves-another",
        ),
        pytest.param(
            [job(1, claimed_by="r1")],
            [runner("r1", Phase.BUSY, job_id=1), Runner("r2", Phase.SUCCEEDED, NOW - 9000, 2, finished_ms=NOW - 2000)],
            {},
            [],
            [],
            id="a-runner-ran-the-job-whose-own-runner-is-busy-elsewhere-unheard-of",
        ),
        pytest.param(
            [job(1, claimed_by="r1"), job(2, claimed_by="r2", listed_ms=NOW - 4000)],
            [
                runner("r1", Phase.BUSY, job_id=1),
                Runner("r2", Phase.SUCCEEDED, NOW - 9000, 2, finished_ms=NOW - 6000, heard=True),
                Runner("r3", Phase.SUCCEEDED, NOW - 9000, 3, finished_ms=NOW - 2000, heard=True),
            ],
            {},
            [Create(2, 2, stale_claim="r2"), Create(None)],
            [],
            id="runners-that-ran-jobs-we-heard-of-hide-no-job",
        ),
        pytest.param(
            [job(1, claimed_by="r1", queued_ms=NOW - 8000, listed_ms=NOW - 500)],
            [runner("r1", Phase.BUSY, job_id=1), Runner("r2", Phase.SUCCEEDED, NOW - 9000, 2, finished_ms=NOW - 2000)],
            {},
            [Create(None)],
            [],
            id="a-poll-after-a-runner-finished-unheard-of-still-lists-the-job",
        ),
        pytest.param(
            [job(1, claimed_by="r1", queued_ms=NOW - 1000)],
            [runner("r1", Phase.BUSY, job_id=1), Runner("r2", Phase.SUCCEEDED, NOW - 9000, 2, finished_ms=NOW - 2000)],
            {},
            [Create(None)],
            [],
            id="a-job-queued-after-a-runner-finished-unheard-of-is-not-the-one-it-ran",
        ),
        pytest.param(
            [job(1), job(2), job(3)],
            [Runner("r9", Phase.SUCCEEDED, NOW - 9000, 9, finished_ms=NOW - 2000)],
            {},
            [Create(1, 1), Create(2, 2)],
            [],
            id="one-job-per-runner-that-finished-unheard-of",
        ),
        pytest.param(
            [job(1)],
            [runner("b1", Phase.BUSY), runner("b2", Phase.BUSY), runner("b3", Phase.BUSY)],
            {},
            [],
            [],
            id="full-of-busy-runners",
        ),
        pytest.param(
            [job(1)],
            [runner(f"f{i}", Phase.FAILED) for i in range(5)],
            {},
            [Create(1, 1)],
            [],
            id="failed-runners-hold-no-slot",
        ),
        pytest.param(
            [],
            [runner("p", Phase.PENDING, since=NOW - 601_000, job_id=7)],
            {},
            [],
            [Delete("p", "pending_timeout", 7)],
            id="reap-stuck-pending",
        ),
        pytest.param(
            [job(7, claimed_by="p")],
            [runner("p", Phase.PENDING, since=NOW - 601_000, job_id=7)],
            {},
            [Create(7, 7, stale_claim="p")],
            [Delete("p", "pending_timeout", 7)],
            id="reap-and-retry",
        ),
        pytest.param(
            [],
            [runner("i", Phase.IDLE, since=NOW - 61_000)],
            {},
            [],
            [Delete("i", "surplus_idle")],
            id="surplus-idle-deleted-after-grace",
        ),
        pytest.param([], [runner("i", Phase.IDLE, since=NOW - 1_000)], {}, [], [], id="idle-within-grace-kept"),
        pytest.param([], [runner("p", Phase.PENDING)], {}, [], [], id="pending-never-surplus-deleted"),
        pytest.param([], [], {"spec": {"minIdleRunners": 2}}, [Create(None), Create(None)], [], id="warm-pool"),
        pytest.param(
            [], [runner("i", Phase.IDLE, since=0)], {"spec": {"minIdleRunners": 1}}, [], [], id="warm-runner-kept"
        ),
        pytest.param([job(1)], [], {"spec": {"suspend": True}}, [], [], id="suspended"),
        pytest.param(
            [job(1), job(2)],
            [runner("i", Phase.IDLE, since=0)],
            {},
            [Create(1, 1)],
            [],
            id="idle-runner-counts-toward-demand",
        ),
        pytest.param(
            [job(2, queued_ms=5), job(1, queued_ms=9)],
            [],
            {"spec": {"maxActiveRunners": 1}},
            [Create(2, 5)],
            [],
            id="oldest-first",
        ),
    ],
)
def test_plan_table(
    queued: list[QueuedJob], runners: list[Runner], kw: dict[str, Any], creates: list[Create], deletes: list[Delete]
) -> None:
    extra = {k: v for k, v in kw.items() if k != "spec"}
    result = plan(queued=queued, runners=runners, spec=spec(**kw.get("spec", {})), now_ms=NOW, **extra)
    # Every job of the table was queued for its first attempt: the runner is named for attempt 1.
    assert all(c.attempt == (1 if c.job_id is not None else 0) for c in result.create)
    assert [replace(c, attempt=0) for c in result.create] == creates
    assert list(result.delete) == deletes


def test_a_rerun_runner_is_for_the_next_attempt() -> None:
    rerun = replace(job(5), attempt=2)  # a rerun's queued event carries the attempt before it
    assert [c.attempt for c in plan(queued=[rerun], runners=[], spec=spec(), now_ms=NOW).create] == [3]


def test_a_group_shown_its_oldest_jobs_counts_all_and_starts_runners_for_the_oldest() -> None:
    decided = plan(queued=[job(1), job(2)], runners=[], spec=spec(maxActiveRunners=1), now_ms=NOW, queued_total=40)
    assert (decided.counts.queued, [c.job_id for c in decided.create]) == (40, [1])
    assert plan(queued=[job(1), job(2)], runners=[], spec=spec(), now_ms=NOW).counts.queued == 2


def test_a_job_claimed_by_a_runner_this_group_lacks_gets_no_runner_and_no_warm_one() -> None:
    """The job moved to this group from another, whose runner holds the claim (or the cache is behind):
    it is served there; starting a warm runner in its place would leave one runner too many."""
    decided = plan(queued=[job(1, claimed_by="elsewhere-1-1")], runners=[], spec=spec(), now_ms=NOW)
    assert decided.create == ()


def test_a_job_whose_runner_is_up_wants_no_second_one_even_without_its_claim() -> None:
    """The claim expired while its runner waits (say, for a node): the runner still serves the job."""
    decided = plan(queued=[job(1)], runners=[runner("grp-1-1", Phase.PENDING, job_id=1)], spec=spec(), now_ms=NOW)
    assert decided.create == ()


def test_counts() -> None:
    result = plan(
        queued=[job(1), job(2)],
        runners=[runner("a", Phase.IDLE), runner("b", Phase.BUSY), runner("c", Phase.FAILED)],
        spec=spec(),
        now_ms=NOW,
    )
    assert (result.counts.active, result.counts.idle, result.counts.queued) == (3, 1, 2)
    assert [r.name for r in result.failed] == ["c"]


phases = st.sampled_from(list(Phase))


@st.composite
def situations(draw: st.DrawFn) -> tuple[list[QueuedJob], list[Runner], RunnerGroupSpec, frozenset[str]]:
    n_runners = draw(st.integers(0, 8))
    runners = [
        runner(f"r{i}", draw(phases), since=draw(st.integers(0, NOW)), job_id=draw(st.none() | st.integers(1, 12)))
        for i in range(n_runners)
    ]
    in_flight = frozenset(f"new{i}" for i in range(draw(st.integers(0, 3))))
    names = [r.name for r in runners] + ["ghost", *sorted(in_flight)]
    ids = draw(st.lists(st.integers(1, 12), unique=True, max_size=10))
    queued = [job(i, claimed_by=draw(st.none() | st.sampled_from(names))) for i in ids]
    maximum = draw(st.integers(1, 6))
    s = spec(
        maxActiveRunners=maximum,
        minIdleRunners=draw(st.integers(0, maximum)),
        suspend=draw(st.booleans()),
        pendingTimeout=draw(st.sampled_from(["1m", "10m"])),
    )
    return queued, runners, s, in_flight


@settings(max_examples=400, deadline=None)
@given(situation=situations())
def test_properties(situation: tuple[list[QueuedJob], list[Runner], RunnerGroupSpec, frozenset[str]]) -> None:
    queued, runners, s, in_flight = situation
    result = plan(queued=queued, runners=runners, spec=s, now_ms=NOW, in_flight=in_flight)
    active = sum(1 for r in runners if r.phase in ACTIVE) + len(in_flight)
    after = active - len(result.delete) + len(result.create)
    # Never above the max, unless it already was, and then it never grows.
    assert after <= max(s.max_active_runners, active)
    if active >= s.max_active_runners:
        assert after <= active
    # Never two runners for one job, and never one for a job a live runner already claimed.
    job_ids = [c.job_id for c in result.create if c.job_id is not None]
    assert len(job_ids) == len(set(job_ids))
    live = {r.name for r in runners if r.phase in ACTIVE} - {d.name for d in result.delete}
    claimed_live = {j.job_id for j in queued if j.claimed_by in live | in_flight | {"ghost"}}
    assert not claimed_live & set(job_ids)
    started_for = {r.job_id for r in runners if r.name in live}
    assert not started_for & set(job_ids)
    # Only our own runners are deleted, each once; busy ones never.
    deleted = [d.name for d in result.delete]
    assert len(deleted) == len(set(deleted))
    assert all(r.phase is not Phase.BUSY for r in runners if r.name in deleted)
    # Stable: the same input gives the same plan.
    assert plan(queued=queued, runners=runners, spec=s, now_ms=NOW, in_flight=in_flight) == result
    if s.suspend:
        assert not result.create


def view(name: str, ns: str = "ci", labels: tuple[str, ...] = ("k8s",), **kw: Any) -> Any:
    from reconciler.decide.assign import GroupView
    from reconciler.model.labels import effective_labels, names

    s = spec(**kw)
    return GroupView(namespace=ns, name=name, spec=s, label_names=names(effective_labels(labels, s.default_labels)))


def test_assign_prefers_most_specific_scope_then_name() -> None:
    from reconciler.decide.assign import assign

    groups = [
        view("global", scope="global"),
        view("org-b", scope="org", org="acme"),
        view("org-a", scope="org", org="ACME"),
        view("repo", scope="repo", repo="acme/w"),
        view("other-repo", scope="repo", repo="acme/x"),
    ]
    out = assign([job(1)], groups)
    assert {k[1]: [j.job_id for j in v] for k, v in out.items()} == {
        "global": [],
        "org-b": [],
        "org-a": [],
        "repo": [1],
        "other-repo": [],
    }
    out = assign([job(2)], [g for g in groups if g.name != "repo"])
    assert out[("ci", "org-a")] == [job(2)]


def test_the_group_index_is_kept_until_a_spec_changes_or_a_group_comes_or_goes() -> None:
    from reconciler.decide.assign import CachedIndex, assign

    repo, org = spec(scope="repo", repo="acme/w"), spec(scope="org", org="acme")
    cache = CachedIndex()
    first = cache.of([("ci", "a", repo), ("ci", "b", org)])
    assert cache.of([("ci", "a", repo), ("ci", "b", org)]) is first
    assert assign([job(1)], first)[("ci", "a")] == [job(1)]
    moved = cache.of([("ci", "a", spec(scope="repo", repo="acme/x")), ("ci", "b", org)])  # a new generation
    assert moved is not first and assign([job(1)], moved)[("ci", "b")] == [job(1)]
    fewer = cache.of([("ci", "b", org)])
    assert fewer is not moved and list(assign([job(1)], fewer)) == [("ci", "b")]


def test_assign_skips_suspended_and_non_matching_labels() -> None:
    from dataclasses import replace

    from reconciler.decide.assign import assign

    gpu = replace(job(3), labels=("gpu",))
    groups = [
        view("repo", scope="repo", repo="acme/w", suspend=True),
        view("org", scope="org", org="acme"),
        view("gpu", scope="global", labels=("gpu",)),
    ]
    out = assign([job(1), gpu], groups)
    assert [j.job_id for j in out[("ci", "org")]] == [1]
    assert [j.job_id for j in out[("ci", "gpu")]] == [3]
    assert out[("ci", "repo")] == []
    assert assign([replace(job(4), labels=("nothing-has-this",))], groups) == {
        ("ci", "repo"): [],
        ("ci", "org"): [],
        ("ci", "gpu"): [],
    }


@st.composite
def assignments(draw: st.DrawFn) -> tuple[list[QueuedJob], list[Any]]:
    owners = ["acme", "other"]
    groups = []
    for i in range(draw(st.integers(0, 8))):
        scope = draw(st.sampled_from(["global", "org", "user", "repo"]))
        target: dict[str, Any] = {"org": None}  # the base spec is org-scoped: unset its org
        target |= {
            "org": {"org": draw(st.sampled_from(owners))},
            "user": {"user": draw(st.sampled_from(owners))},
            "repo": {"repo": f"{draw(st.sampled_from(owners))}/w"},
        }.get(scope, {})
        groups.append(
            view(
                f"g{i}",
                ns=draw(st.sampled_from(["a", "b"])),
                labels=tuple(draw(st.lists(st.sampled_from(["k8s", "gpu"]), max_size=2))),
                scope=scope,
                suspend=draw(st.booleans()),
                **target,
            )
        )
    from dataclasses import replace

    jobs = [
        replace(job(i), owner=o, repo=f"{o}/{r}", labels=tuple(ls))
        for i, (o, r, ls) in enumerate(
            draw(
                st.lists(
                    st.tuples(
                        st.sampled_from(owners),
                        st.sampled_from(["w", "x"]),
                        st.lists(st.sampled_from(["k8s", "gpu"]), max_size=2),
                    ),
                    max_size=8,
                )
            )
        )
    ]
    return jobs, groups


@given(case=assignments())
def test_assign_matches_its_definition(case: tuple[list[QueuedJob], list[Any]]) -> None:
    from reconciler.decide.assign import _SPECIFICITY, assign, covers

    jobs, groups = case
    expected: dict[tuple[str, str], list[QueuedJob]] = {(g.namespace, g.name): [] for g in groups}
    for j in jobs:  # the definition, by brute force: best rank among all matching groups
        fits = [g for g in groups if not g.spec.suspend and covers(g.spec, j) and set(j.labels) <= g.label_names]
        if fits:
            best = min(fits, key=lambda g: (-_SPECIFICITY[g.spec.scope], g.namespace, g.name))
            expected[(best.namespace, best.name)].append(j)
    assert assign(jobs, groups) == expected


def failed(name: str, at: int) -> Runner:
    return Runner(name=name, phase=Phase.FAILED, since_ms=at - 5000, reason="exit code 1: refused", finished_ms=at)


DISRUPTIONS = ("EvictionByEvictionAPI", "PreemptionByScheduler", "DeletionByTaintManager", "TerminationByKubelet")


def stopped(name: str, at: int, *, busy: bool = False, why: str = "EvictionByEvictionAPI") -> Runner:
    """A runner Kubernetes stopped (evicted, preempted, its node lost); `busy`: during its job."""
    return replace(failed(name, at), reason="BackoffLimitExceeded", heard=busy, disruption=why)


@pytest.mark.parametrize(
    ("runners", "now", "held", "failures"),
    [
        pytest.param([failed("f1", NOW - 5_000)], NOW, True, 1, id="one-failure-waits-10s"),
        pytest.param([failed("f1", NOW - 10_001)], NOW, False, 1, id="one-failure-after-10s-retries"),
        pytest.param([failed("f1", NOW - 30_000), failed("f2", NOW - 15_000)], NOW, True, 2, id="two-wait-20s"),
        pytest.param([failed("f1", NOW - 30_000), failed("f2", NOW - 21_000)], NOW, False, 2, id="two-after-20s"),
        pytest.param(
            [failed(f"f{i}", NOW - 290_000 + i) for i in range(20)], NOW, True, 20, id="capped-at-300s-still-held"
        ),
        pytest.param(
            [failed(f"f{i}", NOW - 301_000 + i) for i in range(20)], NOW, False, 20, id="capped-at-300s-then-retries"
        ),
        pytest.param(
            [failed("f1", NOW - 5_000), Runner("ok", Phase.SUCCEEDED, NOW - 9000, finished_ms=NOW - 1000, heard=True)],
            NOW,
            False,
            0,
            id="a-later-success-ends-the-streak",
        ),
        pytest.param(
            [failed("f1", NOW - 5_000), runner("b", Phase.BUSY, since=NOW - 2000)],
            NOW,
            False,
            0,
            id="a-runner-that-took-a-job-ends-the-streak",
        ),
        pytest.param([stopped("e1", NOW - 5_000)], NOW, False, 0, id="an-evicted-idle-runner-is-no-failure"),
        pytest.param(
            [stopped(f"e{i}", NOW - 5_000 + i, why=why) for i, why in enumerate(DISRUPTIONS)],
            NOW,
            False,
            0,
            id="a-node-drained-preempted-or-lost-holds-nothing-back",
        ),
        pytest.param([stopped("b1", NOW - 5_000, busy=True)], NOW, False, 0, id="a-busy-runner-evicted-neither"),
        pytest.param(
            [failed("f1", NOW - 5_000), stopped("e1", NOW - 1_000)], NOW, True, 1, id="nor-does-it-end-a-streak"
        ),
    ],
)
def test_failed_runners_back_off(runners: list[Runner], now: int, held: bool, failures: int) -> None:
    decided = plan(queued=[job(1)], runners=runners, spec=spec(), now_ms=now, backoff_ms=(10_000, 300_000))
    assert decided.held is held
    assert (decided.backoff.failures if decided.backoff else 0) == failures
    assert (decided.create == ()) is held


def test_a_runner_that_outlives_its_job_is_deleted_after_the_grace() -> None:
    stuck = Runner("r1", Phase.FINISHING, since_ms=NOW - 31_000, job_id=1)
    fresh = Runner("r2", Phase.FINISHING, since_ms=NOW - 1_000, job_id=2)
    decided = plan(queued=[job(3)], runners=[stuck, fresh], spec=spec(maxActiveRunners=2), now_ms=NOW)
    assert decided.delete == (Delete("r1", "job_over", 1),)
    # Both still count against the cap until they are gone, and neither covers the queued job.
    assert decided.create == (Create(3, 3, attempt=1),)


@pytest.mark.parametrize(
    ("runners", "wake_at"),
    [
        pytest.param([runner("i", Phase.IDLE, since=NOW - 50_000)], NOW + 10_000, id="idle-grace-ends"),
        pytest.param([runner("p", Phase.PENDING, since=NOW - 1_000)], NOW + 599_000, id="pending-timeout"),
        pytest.param([runner("f", Phase.FINISHING, since=NOW - 20_000)], NOW + 10_000, id="finish-grace-ends"),
        pytest.param([failed("x", NOW - 4_000)], NOW + 6_000, id="backoff-ends"),
        pytest.param(
            [runner("i", Phase.IDLE, since=NOW - 50_000), runner("f", Phase.FINISHING, since=NOW - 25_000)],
            NOW + 5_000,
            id="the-earliest",
        ),
        pytest.param([runner("b", Phase.BUSY)], None, id="busy-has-none"),
        pytest.param([runner("i", Phase.IDLE, since=NOW - 70_000)], None, id="a-passed-deadline-is-not-waited-for"),
    ],
)
def test_the_plan_says_when_to_look_again(runners: list[Runner], wake_at: int | None) -> None:
    decided = plan(queued=[job(1)], runners=runners, spec=spec(), now_ms=NOW, backoff_ms=(10_000, 300_000))
    assert decided.wake_at_ms == wake_at


@pytest.mark.parametrize(
    ("kw", "phase"),
    [
        pytest.param({"busy": True, "done_ms": None}, Phase.BUSY, id="busy"),
        pytest.param({"busy": False, "done_ms": NOW}, Phase.FINISHING, id="running-after-its-job"),
        pytest.param({"busy": False, "done_ms": None}, Phase.IDLE, id="idle"),
    ],
)
def test_classify_a_running_runner(kw: dict[str, Any], phase: Phase) -> None:
    got = classify("r", job_id=1, created_ms=1, finished="", reason="", pod_phases=[("Running", 5)], **kw)
    assert got.phase is phase


def test_classify_a_runner_whose_pod_exited_after_its_job() -> None:
    got = classify("r", job_id=1, created_ms=1, finished="", reason="", pod_phases=[("Succeeded", None)], busy=False)
    assert (got.phase, got.heard) == (Phase.SUCCEEDED, False)


@pytest.mark.parametrize(
    ("pods", "disruption", "stopped_by"),
    [
        pytest.param([("Failed", None)], "", "", id="failed-on-its-own-keeps-its-pod"),
        pytest.param([("Failed", None)], "Evicted", "Evicted", id="evicted-by-the-kubelet"),
        pytest.param([("Running", 5)], "EvictionByEvictionAPI", "EvictionByEvictionAPI", id="evicted-pod-terminating"),
        pytest.param([], "", POD_GONE, id="its-pod-deleted-and-gone"),
    ],
)
def test_a_failed_runner_kubernetes_stopped_says_so(
    pods: list[tuple[str, int | None]], disruption: str, stopped_by: str
) -> None:
    got = classify("r", job_id=1, created_ms=1, finished="Failed", reason="BackoffLimitExceeded", pod_phases=pods,
                   busy=False, disruption=disruption)  # fmt: skip
    assert (got.phase, got.disruption) == (Phase.FAILED, stopped_by)


def test_a_running_or_finished_runner_is_not_stopped_whatever_its_pod_says() -> None:
    """Only a failed Job is one Kubernetes stopped: a Pod being evicted still runs until its Job fails."""
    for finished, pods in (("", [("Running", 5)]), ("Complete", [])):
        got = classify("r", job_id=1, created_ms=1, finished=finished, reason="", pod_phases=pods, busy=False,
                       disruption="EvictionByEvictionAPI")  # fmt: skip
        assert got.disruption == ""


@pytest.mark.parametrize(("busy", "done_ms", "lost"), [(False, None, False), (True, None, True), (True, 5, False)])
def test_a_failed_runner_died_during_its_job_if_gitea_told_it_took_one_and_no_end(
    busy: bool, done_ms: int | None, lost: bool
) -> None:
    got = classify("r", job_id=1, created_ms=1, finished="Failed", reason="", pod_phases=[], busy=busy, done_ms=done_ms)
    assert (got.phase, got.heard) == (Phase.FAILED, lost)


@pytest.mark.parametrize(("busy", "done_ms", "heard"), [(False, None, False), (True, None, True), (False, 5, True)])
def test_a_finished_runner_is_heard_of_if_gitea_told_of_its_job(busy: bool, done_ms: int | None, heard: bool) -> None:
    got = classify(
        "r", job_id=1, created_ms=1, finished="Complete", reason="", pod_phases=[], busy=busy, done_ms=done_ms
    )
    assert (got.phase, got.heard) == (Phase.SUCCEEDED, heard)


def test_runners_of_a_changed_spec_that_took_no_job_are_replaced_busy_ones_finish() -> None:
    stale = [
        replace(runner("warm", Phase.IDLE), outdated=True),
        replace(runner("for-1", Phase.PENDING, job_id=1), outdated=True),
        replace(runner("busy", Phase.BUSY, job_id=9), outdated=True),
    ]
    decided = plan(queued=[job(1, claimed_by="for-1")], runners=stale, spec=spec(minIdleRunners=1), now_ms=NOW)
    assert sorted(decided.delete, key=lambda d: d.name) == [
        Delete("for-1", "outdated", 1),
        Delete("warm", "outdated", None),
    ]
    assert decided.create == (Create(1, 1, stale_claim="for-1", attempt=1), Create(None)), "each replaced anew"


def test_a_deleted_group_starts_nothing_and_lets_every_runner_that_took_no_job_go() -> None:
    runners = [runner("idle", Phase.IDLE), runner("pending", Phase.PENDING, job_id=2), runner("busy", Phase.BUSY)]
    decided = plan(
        queued=[job(1), job(2, claimed_by="pending")], runners=runners, spec=spec(), now_ms=NOW, draining=True
    )
    assert decided.create == ()
    assert sorted(d.name for d in decided.delete) == ["idle", "pending"]
    assert {d.reason for d in decided.delete} == {"drain"}
    assert decided.counts.active == 1
