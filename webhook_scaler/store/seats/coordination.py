"""The reconciler replicas' coordination in Redis: claims, leases, seats, and Gitea's word on runners.

Owns every key the reconciler writes (the receiver's job records are `jobs.records`'). Two invariants
hold across any number of replicas, whatever their caches show and however their calls interleave:

**One runner per (job, attempt).** A runner Job for a queued job is named from the group, the job id
and the attempt it will run (see `reconciler.model.names.job_name`), so the API server itself refuses
a second Job of that name (409 means "there already is one", never "created"). The claim
(taken by `take`, SET NX on the job's claim key, only while the job is queued) decides which replica
tries first, so replicas do not race on the create at all. A claim lasts the runner's Register (the
caller's `claim_ttl_ms`) plus `CLAIM_PENDING_S` until its create has returned, then the claim TTL
(`confirm`): a replica that dies between claim and create holds up the job for seconds, not minutes.
A claim that expires while its create is still in flight costs nothing: the next replica's Job has
the same name, and its create gets a 409.

**Never more runners than `maxActiveRunners`.** Every runner Job, for a job or warm, holds a *seat*
in its group's seat set from before it is created until it has ended:
- a seat is taken by `take`, one script that grants it only while fewer seats than the maximum
  are held and the epoch is the one the pass read, and claims the job in the same step (nothing is
  taken unless both are); the Job is created only after its seat was granted, and no longer than
  `CREATE_DEADLINE_S` after the take began (the create is dropped otherwise), or, after a slow
  Register, after `renew` granted the seat again from now, which it does only while the replica
  still holds the seat and the job's claim (else the create is dropped). A seat is named as its
  runner Job, which is named from its job, so a replica that takes a job again (its claim lapsed)
  takes a seat that may be held still: the take grants it again *from now*, so its age, which every
  reclaim below reads in the same script that frees it, is always that of the newest create it allows;
- a seat is freed only when its Job was seen Complete or Failed (it never runs again), when a delete
  of it returned, when the replica that took it gives it back (`give_back`: its create was not and
  will not be sent), only while that replica still holds it (not once another took it again), or
  when the API server answered 404 for it and either the seat is older than
  `RECLAIM_AFTER_S` (longer than the create deadline plus the API server's request timeout, so a
  create granted that seat can no longer arrive), or it is older than `ABANDONED_AFTER_S` and the
  replica process that took it is dead for sure: its heartbeat (renewed every `HEARTBEAT_S` and by
  every take) lapsed `ALIVE_TTL_S` ago, and its replica (its Pod, one process at a time) runs a later
  process (`Keys.incarnation`). A killed process sends nothing more: a create still in flight is
  cancelled with its connection (the API server writes nothing for a request whose client went away
  before the write). A heartbeat that lapsed alone proves nothing: a process paused (SIGSTOP, a frozen
  VM) between its deadline check and its create sends that create when it resumes. Such a *silent*
  taker's seat stays, and only its job's claim is released (`release_all`), so the job is taken again
  under the same Job name, in the same seat, and one of the two creates gets a 409. A process that is
  merely slow keeps its heartbeat, so its seats wait out `RECLAIM_AFTER_S`. (What is left: a process
  paused longer than `RECLAIM_AFTER_S` inside that window, whose seat went to a warm runner or a job
  served meanwhile, can still land one create beyond the cap.)
So the seats held are at least the runner Jobs that may be active, and seats never exceed the
maximum (active Jobs made before seats existed are seated by `seats` without a check, and then
block new seats until enough of them end). The per-group lease (taken by `begin`) only spares replicas
duplicate work; it is not what the invariants rest on.

**When Redis loses the seats** (flushed, or restarted without persistence) a new *epoch* starts with
the next reservation. Takes that expect the old epoch are refused; creates granted before are sent
within `CREATE_DEADLINE_S` and visible to every cache within `RECLAIM_AFTER_S`. The controller
therefore waits that long after a new epoch, for groups whose status shows they held seats before,
and seats their active Jobs first.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

from redis.asyncio import Redis

from webhook_scaler.store.keys import Keys, text
from webhook_scaler.store.seats.model import (
    Abandoned,
    Activity,
    Begun,
    Epoch,
    Seats,
    activity_of,
    held_of,
    replica_of,
)
from webhook_scaler.store.seats.scripts import (
    ACTIVITY,
    BEGIN,
    CONFIRM,
    EPOCH,
    GIVE_BACK,
    RELEASE,
    RELEASE_ALL,
    RENEW,
    SEATS,
    TAKE,
)

CREATE_DEADLINE_S = 10.0  # from the start of a reservation to the create being sent
CLAIM_PENDING_S = 30.0  # a claim's life until its create returned (> CREATE_DEADLINE_S + watch lag)
RECLAIM_AFTER_S = 90.0  # > CREATE_DEADLINE_S + the API server's 60 s request timeout + watch lag
HEARTBEAT_S = 2.0  # how often a reconciler process renews its heartbeat
ALIVE_TTL_S = 10.0  # a heartbeat's life: a process not heard of for this long is dead (or paused)
ABANDONED_AFTER_S = CREATE_DEADLINE_S + 5.0  # a dead taker's seat, if its Job does not exist, is free
SEATS_IDLE_TTL_S = 7 * 24 * 3600


class Coordination:
    """Typed async operations over the reconciler's keys."""

    def __init__(self, redis: Redis, *, prefix: str = "grs") -> None:
        self.redis = redis
        self.prefix = prefix
        self.keys = Keys(prefix)
        self._take = redis.register_script(TAKE)
        self._confirm = redis.register_script(CONFIRM)
        self._release = redis.register_script(RELEASE)
        self._release_all = redis.register_script(RELEASE_ALL)
        self._activity = redis.register_script(ACTIVITY)
        self._epoch = redis.register_script(EPOCH)
        self._seats = redis.register_script(SEATS)
        self._begin = redis.register_script(BEGIN)
        self._renew = redis.register_script(RENEW)
        self._give_back = redis.register_script(GIVE_BACK)

    def of(self, instance: str) -> Coordination:
        """The same, for the jobs and runners of another Gitea instance ("": the default one): its claims,
        bindings and Gitea's word on its runners; the seats, leases and heartbeats are the install's."""
        if instance == self.keys.instance:
            return self
        other = copy.copy(self)
        other.keys = Keys(self.prefix, instance)
        return other

    async def take(
        self,
        group_uid: str,
        name: str,
        *,
        maximum: int,
        epoch: str,
        taker: str,
        job_id: int | None = None,
        claim_ttl_ms: int = 0,
        runner: tuple[str, str] = ("", ""),
    ) -> str:
        """Take a seat for runner Job `name` if fewer than `maximum` are held in `epoch` (idempotent per
        name), and for a queued job (`job_id`) the right to start its runner, in one atomic step:
        "granted", or what stopped it, with nothing taken: "full", "epoch" (the epoch is not `epoch` any
        more), "claimed" (somebody claimed the job, or it is not queued). A granted seat records its
        `taker` (this replica process), whose heartbeat it renews, and binds `runner` = (its name in
        Gitea, the owner whose jobs it may run, `*` for any) for the receivers (`Keys.runner`)."""
        runner_name, owner = runner
        keys = [self.keys.seats(group_uid), self.keys.epoch, self.keys.taker(group_uid, name), self.keys.alive(taker)]
        keys.append(self.keys.runner(runner_name))
        if job_id is not None:
            keys += [self.keys.claim(job_id), self.keys.job(job_id)]
        ttls = [int(RECLAIM_AFTER_S * 1000), int(ALIVE_TTL_S * 1000)]
        args: list[str | int] = [maximum, name, epoch, SEATS_IDLE_TTL_S, claim_ttl_ms, taker, *ttls, owner.lower()]
        return text(await self._take(keys=keys, args=args))

    async def renew(self, group_uid: str, name: str, *, taker: str, job_id: int | None = None) -> str:
        """Grant the seat `taker` took for runner Job `name` again from now (its create's deadline starts
        again) and make the job's claim last `CLAIM_PENDING_S`: "granted", or "late" if the seat is not
        `taker`'s any more (freed, or taken again by another replica) or the claim lapsed; then nothing
        changed, and the create must not be sent."""
        keys = [self.keys.seats(group_uid), self.keys.taker(group_uid, name), self.keys.alive(taker)]
        keys += [self.keys.claim(job_id)] if job_id is not None else []
        ttls = [int(RECLAIM_AFTER_S * 1000), int(ALIVE_TTL_S * 1000), int(CLAIM_PENDING_S * 1000)]
        return text(await self._renew(keys=keys, args=[name, taker, *ttls]))

    async def give_back(self, group_uid: str, name: str, *, taker: str, job_id: int | None = None) -> bool:
        """Free the seat `taker` took for runner Job `name`, never created and never to be, and release the
        job's claim; nothing if the seat is not `taker`'s any more (another replica took the job again)."""
        keys = [self.keys.seats(group_uid), self.keys.taker(group_uid, name)]
        keys += [self.keys.claim(job_id)] if job_id is not None else []
        return bool(await self._give_back(keys=keys, args=[name, taker]))

    async def heartbeat(self, process: str) -> None:
        """Say that replica process `process` (`{replica}/{id}`) is alive, and its replica's latest, for
        `ALIVE_TTL_S`."""
        ttl_ms = int(ALIVE_TTL_S * 1000)
        await self.redis.set(self.keys.alive(process), "1", px=ttl_ms)
        await self.redis.set(self.keys.incarnation(replica_of(process)), process, px=ttl_ms)

    async def abandoned(self, group_uid: str, names: Sequence[str]) -> Abandoned:
        """Which of these seats of a group were taken by a replica process not heard of for `ALIVE_TTL_S`:
        dead for sure (its replica runs a later process) or silent. A seat whose taker is unknown
        (adopted, or taken before takers were recorded) is neither."""
        if not names:
            return Abandoned([], [])
        takers = [
            None if t is None else text(t)
            for t in await self.redis.mget([self.keys.taker(group_uid, n) for n in names])
        ]
        processes = sorted({t for t in takers if t})
        if not processes:
            return Abandoned([], [])
        keys = [self.keys.alive(p) for p in processes] + [self.keys.incarnation(replica_of(p)) for p in processes]
        read = await self.redis.mget(keys)
        alive = dict(zip(processes, read[: len(processes)], strict=True))
        latest = {p: None if v is None else text(v) for p, v in zip(processes, read[len(processes) :], strict=True)}
        lapsed = [(n, t) for n, t in zip(names, takers, strict=True) if t and alive[t] is None]
        return Abandoned(
            dead=[n for n, t in lapsed if latest[t] not in (None, t)],
            silent=[n for n, t in lapsed if latest[t] in (None, t)],
        )

    async def confirm(self, claims: Sequence[tuple[int, str]], *, ttl_ms: int) -> None:
        """Make claims (job id, holder) whose runner Jobs exist last `ttl_ms` from now, each only if its
        holder still has it; one round trip for all."""
        if claims:
            keys = [self.keys.claim(job_id) for job_id, _ in claims]
            await self._confirm(keys=keys, args=[ttl_ms, *(holder for _, holder in claims)])

    async def release(self, job_id: int, *, holder: str) -> None:
        """Give a claim back (the runner Job could not be created), only if `holder` still has it."""
        await self._release(keys=[self.keys.claim(job_id)], args=[holder])

    async def release_all(self, claims: Sequence[tuple[int, str]]) -> None:
        """`release` for each (job id, holder), in one round trip."""
        if claims:
            await self._release_all(keys=[self.keys.claim(job) for job, _ in claims], args=[h for _, h in claims])

    async def lock(self, name: str, *, holder: str, ttl_ms: int) -> bool:
        """Take a short exclusive lease (e.g. one failed runner's report across replicas)."""
        return bool(await self.redis.set(self.keys.lock(name), holder, nx=True, px=ttl_ms))

    async def unlock(self, name: str, *, holder: str) -> None:
        """Give a lease back, only if `holder` still has it."""
        await self._release(keys=[self.keys.lock(name)], args=[holder])

    async def epoch(self, *, new_id: str) -> Epoch:
        """The seats' epoch; one with id `new_id` starts now if Redis has none (first use, or lost)."""
        epoch_id, started, now = await self._epoch(keys=[self.keys.epoch], args=[new_id])
        return Epoch(text(epoch_id), int(started), int(now))

    async def begin(
        self,
        group_uid: str,
        *,
        lease: tuple[str, int] | None,
        epoch: str,
        free: Sequence[str] = (),
        seat: Sequence[str] = (),
        runners: Sequence[str] = (),
        jobs: Sequence[int] = (),
    ) -> Begun:
        """Start a group's pass in one round trip: take its lease (holder, ttl ms; None: none), and while
        the seats' epoch is still `epoch`, free the seats of `free`, seat `seat` if unseated (runner
        Jobs that exist), keep the seats from expiring, and read the seats held and
        `activity(runners, jobs=jobs)`, all in one snapshot."""
        keys = [self.keys.lock(group_uid), self.keys.epoch, self.keys.seats(group_uid), self.keys.busy, self.keys.done]
        keys += [self.keys.job(j) for j in jobs]
        holder, ttl_ms = lease or ("", 0)
        args: list[str | int] = [holder, ttl_ms, epoch, SEATS_IDLE_TTL_S, len(free), len(seat), *free, *seat, *runners]
        reply = await self._begin(keys=keys, args=args)
        if text(reply[0]) != "ok":
            return Begun(leased=text(reply[0]) == "epoch")
        now_ms, held, busy, done, states = reply[1:]
        return Begun(True, Seats(int(now_ms), held_of(held)), activity_of(runners, jobs, busy, done, states))

    async def seats(
        self,
        group_uid: str,
        *,
        free: Sequence[str] = (),
        adopt: Sequence[str] = (),
        orphans: Sequence[str] = (),
        orphaned_after_s: float = RECLAIM_AFTER_S,
    ) -> Seats:
        """Free the seats of `free`, seat `adopt` if unseated, free `orphans` seated longer than
        `orphaned_after_s`; return the seats held then."""
        args: list[str | int] = [int(orphaned_after_s * 1000), len(free), len(adopt), *free, *adopt, *orphans]
        reply = await self._seats(keys=[self.keys.seats(group_uid)], args=args)
        return Seats(int(reply[0]), held_of(reply[1:]))

    async def activity(self, runners: Sequence[str], *, jobs: Sequence[int] = ()) -> Activity:
        """What Gitea reported about these runners (which run a job, when the job of others ended) and
        which of these `jobs` are still queued, read in one atomic script.

        One snapshot matters: a runner that takes a job is busy and the job leaves the queue in one
        write, so a caller that read the queue a moment earlier learns here that the job is gone, and
        does not count it as waiting for a runner that is already running it.
        """
        if not runners and not jobs:
            return Activity(set(), {}, set())
        keys = [self.keys.busy, self.keys.done, *(self.keys.job(j) for j in jobs)]
        busy, done, states = await self._activity(keys=keys, args=list(runners))
        return activity_of(runners, jobs, busy, done, states)
