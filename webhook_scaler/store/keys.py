"""Every Redis key name of the contract, formatted in one place (callers never format a key).

All keys share the hash tag `{prefix}`, so a Redis Cluster keeps them in one slot and every script
that touches several is legal there.

| key                              | type   | holds                                                | expires           |
|----------------------------------|--------|------------------------------------------------------|-------------------|
| `{p}:job:{job_id}`               | hash   | state, rank, labels, owner, repo, times, runner, and | job/completed TTL |
|                                  |        | `confirmed` once a poll listed it under that repo    |                   |
| `{p}:delivery:{delivery_id}`     | string | seen marker for X-Gitea-Delivery                     | delivery TTL      |
| `{p}:queued`                     | zset   | every queued job id, scored by queued time (ms)      | pruned at job TTL |
| `{p}:queued:owner:{owner}`       | zset   | queued job ids of one owner (org or user)            | pruned at job TTL |
| `{p}:queued:repo:{owner}/{repo}` | zset   | queued job ids of one repository                     | pruned at job TTL |
| `{p}:waiting`                    | zset   | job ids Gitea holds `waiting` (needs:, approval)     | pruned at job TTL |
| `{p}:events`                     | stream | `job`, `state` for every applied change (wake-up)    | MAXLEN ~ 10,000   |
| `{p}:observed`                   | list   | picked/completed facts for the metrics (JSON)        | last 10,000 kept  |
| `{p}:busy`                       | zset   | runners running a job (`in_progress`), by start (ms) | pruned at job TTL |
| `{p}:done`                       | zset   | runners whose job completed, by completion (ms)      | pruned at job TTL |
| `{p}:claim:{job_id}`             | string | name of the runner Job started for the job           | claim TTL         |
| `{p}:runner:{runner_name}`       | string | the owner whose jobs a runner of ours may run (`*`)  | a week            |
| `{p}:lock:{name}`                | string | a short lease, e.g. one group's reconcile pass       | lease TTL         |
| `{p}:seats:{group_uid}`          | zset   | runner Jobs that may be active, by seat time (ms)    | a week idle       |
| `{p}:epoch`                      | string | `{id}:{start ms}` of the seats' current epoch        | never             |
| `{p}:taker:{group_uid}:{name}`   | string | the replica process that took a runner Job's seat    | reclaim bound     |
| `{p}:alive:{process}`            | string | a reconciler process is alive (its heartbeat)        | liveness TTL      |
| `{p}:incarnation:{replica}`      | string | the latest process of a replica (its Pod's name)     | liveness TTL      |

Each key above `{p}:events`, and `observed`, `busy`, `done`, `claim` and `runner`, is one Gitea instance's: for an
instance the admin names (`GRS_GITEA_INSTANCES`) it is under `{p}:i:{name}:` (`{p}:i:{name}:job:{job_id}`).
The first ten are the receiver's job records (`jobs.records`); the rest are the reconciler's
coordination (`seats.coordination`). Times are Redis' own clock (`TIME`, read by `NOW`).
"""

from __future__ import annotations

from webhook_scaler.store.jobs.model import ALL, Scope

# Redis' clock in milliseconds; every script of either half that orders or expires anything starts with it.
NOW = """
local _t = redis.call('TIME')
local now = tonumber(_t[1]) * 1000 + math.floor(tonumber(_t[2]) / 1000)
"""


class Keys:
    """The key names under one prefix, for the jobs of one Gitea instance.

    Job ids are numbered per Gitea instance, so every key about jobs and the runners that run them (a
    job, a delivery, the indexes, `waiting`, the facts for the metrics, `busy`, `done`, a claim, a
    runner's binding) carries the instance: `{p}:i:{instance}:…`. The default instance ("") keeps the
    bare names. The wake-up stream and the reconciler's leases, seats, epoch and heartbeats are the
    install's.
    """

    def __init__(self, prefix: str = "grs", instance: str = "") -> None:
        self.p = "{" + prefix + "}"
        self.instance = instance
        self.j = f"{self.p}:i:{instance}" if instance else self.p  # where this instance's job keys live
        self.stream = f"{self.p}:events"
        self.observed = f"{self.j}:observed"
        self.busy = f"{self.j}:busy"
        self.waiting = f"{self.j}:waiting"
        self.done = f"{self.j}:done"
        self.epoch = f"{self.p}:epoch"

    def job(self, job_id: int | str) -> str:
        """One job's record."""
        return f"{self.j}:job:{job_id}"

    def delivery(self, delivery_id: str) -> str:
        """The seen marker of one webhook delivery."""
        return f"{self.j}:delivery:{delivery_id}"

    def claim(self, job_id: int | str) -> str:
        """Who started a runner for one job."""
        return f"{self.j}:claim:{job_id}"

    def runner(self, runner_name: str) -> str:
        """Whose jobs a runner of ours may run: webhooks naming it about another owner's job are not
        believed about it."""
        return f"{self.j}:runner:{runner_name or '-'}"

    def lock(self, name: str) -> str:
        """One lease."""
        return f"{self.p}:lock:{name}"

    def taker(self, group_uid: str, name: str) -> str:
        """Which replica process took the seat of runner Job `name` of group `group_uid`."""
        return f"{self.p}:taker:{group_uid}:{name}"

    def alive(self, process: str) -> str:
        """A reconciler process's heartbeat."""
        return f"{self.p}:alive:{process}"

    def incarnation(self, replica: str) -> str:
        """The latest process of a reconciler replica (a Pod: one process at a time)."""
        return f"{self.p}:incarnation:{replica}"

    def seats(self, group_uid: str) -> str:
        """One group's seats."""
        return f"{self.p}:seats:{group_uid}"

    def index(self, scope: Scope) -> str:
        """The queued-jobs index of one scope."""
        if scope.kind == "all":
            return f"{self.j}:queued"
        return f"{self.j}:queued:{scope.kind}:{scope.name.lower()}"

    def indexes(self, owner: str, repo: str) -> list[str]:
        """The three indexes a job of this repository is in."""
        return [self.index(ALL), self.index(Scope("owner", owner)), self.index(Scope("repo", repo))]


def text(value: bytes | str | int) -> str:
    """A Redis reply value as text."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return str(value)
