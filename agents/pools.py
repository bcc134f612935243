"""Pools: at most ``slots`` runs of a pool's jobs at once, across every agent, with no central
scheduler. Pure, like the rest of the state machine: messages and time in, effects out.

Each pool has a *keeper*, one of its workflow's agents (``PoolDeclaration.keeper``). A run of a job
in a pool, once due, waits in the run queue until its agent (the *holder*) holds a slot:

* **holder** (:func:`check`): sends ``acquire`` to the keeper, again every ``lease / 8`` seconds
  while it waits (a heartbeat), then ``renew`` as often while it holds the slot. Every grant or
  renewal the keeper sends back echoes the holder's clock reading on the request it answers
  (``asked``): the holder's lease runs ``lease / 2`` of its own seconds from there. The run starts
  only inside that window (:func:`may_start`), and a running run whose window closes is killed at
  once (``Stop(kill=True)``): a holder that cannot hear its keeper (partitioned, or the keeper
  down) stops using the slot before the keeper can give it away (self-fencing, as Chubby's
  clients do with their sessions).
* **keeper** (:func:`_request`): queues requests by job priority, then arrival; grants while fewer
  than ``slots`` holds are granted; takes a slot back when the job's final JOBSTATUS comes (the
  keeper follows the statuses of its pools' jobs: no release message of its own can be lost), on
  a ``release`` from the holder (a grant it no longer wants), or when ``lease`` of its own seconds
  pass without a request from the holder (a dead host). The keeper's lease starts when it
  receives a request, after the holder sent it; the holder's, when it sent it: the holder's window
  closes first as long as the two clocks' rates differ by less than a third.

Every decision is the state machine's, on journaled events (deliveries and ticks) with their times,
and the state is in the snapshot: a restarted keeper or holder replays to the same holds. Requests
and answers travel in the brokers' custody, so a keeper that is down only delays them. Every
message is checked to be signed by whom it must be (:meth:`agents.trust.Trust.admit_status`: its
``agentname``, the job's agent for a request, the pool's keeper for an answer; a status by the
job's agent): a forged grant starts nothing, a forged release or status frees no slot.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from agents import refusals, run_queue
from agents.envelope import Registration
from agents.events import Effect, Emit, Register, Run, Stop
from agents.holds import held
from agents.trust import Refusal
from agents.wanted import reconcile
from broker.language import Publication
from workflow_messages import parse_job_status
from workflow_messages.pools import (
    POOL,
    PoolDeclaration,
    PoolMessage,
    parse_pool_message,
    pool_advertisement,
    pool_message,
    pool_subscription,
    release_subscription,
)

if TYPE_CHECKING:
    from agents.state import Agent

__all__ = [
    "KEY",
    "Asking",
    "Hold",
    "check",
    "conflicts",
    "delivered",
    "expire",
    "may_start",
    "next_wakeup",
    "restore",
    "snapshot",
    "sync",
    "windows",
]

log = logging.getLogger(__name__)

KEY = "\0pool "  # the prefix of the registration keys of pools (never a workflow's: names have no NUL)
RENEWS_PER_LEASE = 8  # requests a holder sends per lease: seven may be lost before its window closes
MAX_RELEASED = 10_000  # holds released remembered: a late copy of their requests grants nothing

HoldKey = tuple[str, str, str]  # workflow, gid, job


@dataclass
class Hold:
    """The keeper's record of a request: ``granted`` (its time) or waiting; ``heard`` when the
    holder last asked (the lease runs from there); ``asked`` the holder's clock on that request."""

    agent: str
    version: str
    priority: int
    arrival: int
    asked: float
    heard: float
    granted: float | None = None


@dataclass
class Asking:
    """The holder's record of a run that needs a slot: ``sent`` its last request (its own clock);
    ``confirmed`` the send time of the last request the keeper answered with a grant or renewal
    (None: no slot held), from which its window of ``lease / 2`` runs."""

    pool: str
    keeper: str
    version: str
    priority: int
    lease: float
    sent: float
    confirmed: float | None = None

    def window(self) -> float | None:
        """Until when the run may use the slot (its own clock), or None."""
        return None if self.confirmed is None else self.confirmed + self.lease / 2


# registrations ----------------------------------------------------------------------------------


def sync(agent: Agent) -> list[Effect]:
    """Bring the pool registrations the agent wants in line with its deployments: its POOL
    advertisement and subscription while any deployed pool involves it, and, for the pools it
    keeps, the statuses of their jobs."""
    wanted: dict[str, Registration] = {}
    kept = _kept(agent)
    if kept or any(agent.name in d.jobs.values() for d in _declarations(agent)):
        wanted[KEY + "advertisement"] = Registration("ADVERTISE", filter=pool_advertisement(agent.name))
        wanted[KEY + "requests"] = Registration("SUBSCRIBE", filter=pool_subscription(agent.name))
    for workflow, job in sorted({(w, j) for w, declaration in kept for j in declaration.jobs}):
        wanted[f"{KEY}status {workflow} {job}"] = Registration(
            "SUBSCRIBE", filter=release_subscription(workflow, job)
        )
    effects = reconcile(agent, KEY, wanted)
    effects.sort(key=lambda e: not (isinstance(e, Register) and e.registration.command == "ADVERTISE"))
    return effects


def conflicts(agent: Agent, workflow: str, declared: tuple[PoolDeclaration, ...]) -> None:
    """ValueError (one line) if another workflow deployed here declares one of these pools with
    another keeper, slot count or lease: two keepers would count one pool's slots twice."""
    for (other, _), deployment in agent.deployments.items():
        if other == workflow:
            continue  # a new version of the same workflow may change its pools
        for mine in declared:
            theirs = next((d for d in deployment.pools if d.name == mine.name), None)
            if theirs is not None and not mine.same_limit(theirs):
                raise ValueError(
                    f"pool {mine.name!r} is declared by {other} with {theirs.slots} slots kept by"
                    f" {theirs.keeper} (lease {theirs.lease:g} s), here with {mine.slots} kept by"
                    f" {mine.keeper} (lease {mine.lease:g} s): a pool has one limit and one keeper"
                )


# holder -----------------------------------------------------------------------------------------


def may_start(agent: Agent, run: Run, now: float) -> bool:
    """Whether ``run`` may start: it is in no pool, or its agent holds a slot whose window is open."""
    if _pool_of(agent, run) is None:
        return True
    asking = agent.asking.get((run.workflow, run.gid, run.job))
    window = None if asking is None else asking.window()
    return window is not None and now < window


def expire(agent: Agent, now: float) -> list[Effect]:
    """Before every event: the keeper takes back what lapsed by ``now``, so that an event is
    decided on the same holds whether or not a tick came between (a tick that changed nothing
    visible is not journaled, and a replay must decide the event as the first run did)."""
    return _keep(agent, now) if agent.keeping else []


def check(agent: Agent, now: float) -> list[Effect]:
    """After every event: the holder's requests and fencing, the keeper's expired leases."""
    if not (agent.asking or agent.keeping or any(d.pools for d in agent.deployments.values())):
        return []  # most agents: no scan of their queue at every event
    return _hold(agent, now) + _keep(agent, now)


def windows(agent: Agent) -> dict[Run, float]:
    """The running runs that hold a slot, and until when each may run: what the adapter tells
    their supervisor, which kills them then if the agent cannot (killed or frozen)."""
    return {
        agent.running[key]: window
        for key, asking in agent.asking.items()
        if key in agent.running and (window := asking.window()) is not None
    }


def next_wakeup(agent: Agent) -> float | None:
    """When :func:`check` has something to do next, for the adapter's timer."""
    times: list[float] = []
    for key, asking in agent.asking.items():
        times.append(asking.sent + asking.lease / RENEWS_PER_LEASE)
        window = asking.window()
        if window is not None and key in agent.running:
            times.append(window)
    leases = _leases(agent)
    for pool, holds in agent.keeping.items():
        if pool in leases:
            times.extend(hold.heard + leases[pool] for hold in holds.values())
    return min(times, default=None)


def _hold(agent: Agent, now: float) -> list[Effect]:
    effects: list[Effect] = []
    due = {  # a held run (wfm hold) asks for no slot until it is released
        (p.run.workflow, p.run.gid, p.run.job): p.run
        for p in agent.pending
        if not held(agent, p.run.workflow, p.run.gid, p.run.job)
    }
    for key in [k for k in agent.asking if k not in due and k not in agent.running]:
        del agent.asking[key]  # its run is over (its status gives the slot back) or dropped
    for key, run in due.items():
        if key not in agent.asking and (found := _pool_of(agent, run)) is not None:
            declaration, priority = found
            agent.asking[key] = Asking(
                declaration.name, declaration.keeper, run.version, priority, declaration.lease, now
            )
            effects.append(_send(agent, "acquire", key, agent.asking[key], now))
            generation = agent.generations.get((run.workflow, run.gid))
            if generation is not None:
                generation.jobs[run.job] = f"waiting for pool {declaration.name}"
    for key, asking in list(agent.asking.items()):
        window = asking.window()
        if key in agent.running and window is not None and now >= window:
            log.warning(
                "%s: its slot of pool %s was not renewed by %s in time: killed (self-fencing)",
                agent.running[key].label,
                asking.pool,
                asking.keeper,
            )
            del agent.asking[key]
            effects.append(Stop(agent.running[key], kill=True))
        elif now >= asking.sent + asking.lease / RENEWS_PER_LEASE:
            op = "acquire" if asking.confirmed is None else "renew"
            effects.append(_send(agent, op, key, asking, now))
    return effects


def _send(agent: Agent, op: str, key: HoldKey, asking: Asking, now: float) -> Emit:
    asking.sent = now
    workflow, gid, job = key
    hold = (asking.pool, workflow, gid, job)
    return Emit(pool_message(op, agent.name, asking.keeper, hold, asking.version, now, asking.priority))


def _answer(agent: Agent, message: PoolMessage, now: float) -> list[Effect]:
    """A keeper's grant, renewal or revocation, for this agent as holder."""
    key = (message.workflow, message.gid, message.job)
    asking = agent.asking.get(key)
    if asking is None or asking.pool != message.pool or asking.keeper != message.sender:
        if message.op == "grant":  # a slot nobody here waits for (its run ended, or a late copy)
            hold = (message.pool, message.workflow, message.gid, message.job)
            return [Emit(pool_message("release", agent.name, message.sender, hold, message.version, now))]
        return []
    if message.op == "revoked":
        if key in agent.running:
            log.warning("%s: pool %s revoked its slot: killed", agent.running[key].label, message.pool)
            del agent.asking[key]
            return [Stop(agent.running[key], kill=True)]
        asking.confirmed, asking.sent = None, now - asking.lease  # ask again at once
        return []
    # the keeper echoes our clock on the request it answers: never later than now, unless forged
    confirmed = min(message.asked, now)
    if asking.confirmed is None or confirmed > asking.confirmed:
        asking.confirmed = confirmed
    return run_queue.pump(agent, now)


# keeper -----------------------------------------------------------------------------------------


def _request(agent: Agent, message: PoolMessage, now: float) -> list[Effect]:
    """A holder's acquire, renew or release, for this agent as keeper."""
    key = (message.workflow, message.gid, message.job)
    holds = agent.keeping.setdefault(message.pool, {})
    hold = holds.get(key)
    if message.op == "release":
        if hold is not None and hold.agent == message.sender:
            del holds[key]
            return _grant(agent, message.pool, now)
        return []
    if hold is None:
        if (message.pool, *key) in agent.released:
            return []  # a late copy of a request whose job ended: nothing to grant
        if message.op == "renew":  # the keeper let it lapse: the holder must stop using it
            return [_reply(agent, "revoked", message, message.asked, message.version)]
        agent.pool_arrivals += 1
        holds[key] = Hold(
            message.sender, message.version, message.priority, agent.pool_arrivals, message.asked, now
        )
        return _grant(agent, message.pool, now)
    if hold.agent != message.sender:
        return []  # only the holder may renew its hold (the signature says who sent it)
    hold.heard, hold.asked = now, max(hold.asked, message.asked)
    if hold.granted is None:
        return []
    return [
        _reply(agent, "grant" if message.op == "acquire" else "renewed", message, hold.asked, hold.version)
    ]


def _released(agent: Agent, publication: Publication, now: float) -> list[Effect]:
    """A status of a job in a pool kept here: its final status (the only one a job publishes in a
    generation) gives its slot back, or takes its request off the queue."""
    status = parse_job_status(publication)
    if status is None:
        return []
    effects: list[Effect] = []
    for (workflow, _), deployment in list(agent.deployments.items()):
        if workflow != status.workflow:
            continue
        for declaration in deployment.pools:
            if declaration.keeper != agent.name or status.job not in declaration.jobs:
                continue
            signers = {status.job: declaration.jobs[status.job]}
            unsigned = refusals.unsigned(agent, (publication,), signers, now)
            if unsigned is not None:
                refusals.ignore(agent, "pool release", f"{workflow} {status.job}", unsigned.reason, now)
                return []
            key = (status.workflow, status.gid, status.job)
            if agent.keeping.get(declaration.name, {}).pop(key, None) is not None:
                effects += _grant(agent, declaration.name, now)
            _remember_released(agent, (declaration.name, *key))
    return effects


def _remember_released(agent: Agent, released: tuple[str, str, str, str]) -> None:
    agent.released[released] = None
    while len(agent.released) > MAX_RELEASED:
        agent.released.popitem(last=False)


def _keep(agent: Agent, now: float) -> list[Effect]:
    """Take back the slots (and drop the requests) whose holder has been silent for a lease."""
    effects: list[Effect] = []
    leases = _leases(agent)
    for pool, holds in agent.keeping.items():
        lease = leases.get(pool)
        if lease is None:
            continue  # no longer declared here: kept until a deployment declares it again
        lapsed = [key for key, hold in holds.items() if now >= hold.heard + lease]
        for key in lapsed:
            hold = holds.pop(key)
            if hold.granted is not None:
                log.warning(
                    "pool %s: %s %s %s on %s silent for %g s: its slot is taken back",
                    pool,
                    *key,
                    hold.agent,
                    lease,
                )
        if lapsed:
            effects += _grant(agent, pool, now)
    return effects


def _grant(agent: Agent, pool: str, now: float) -> list[Effect]:
    """Grant the waiting requests of ``pool``, by priority then arrival, while slots are free."""
    declaration = _kept_pools(agent).get(pool)
    holds = agent.keeping.get(pool, {})
    if declaration is None:
        return []
    free = declaration.slots - sum(hold.granted is not None for hold in holds.values())
    waiting = sorted(
        ((key, hold) for key, hold in holds.items() if hold.granted is None),
        key=lambda item: (-item[1].priority, item[1].arrival),
    )
    effects: list[Effect] = []
    for (workflow, gid, job), hold in waiting[: max(free, 0)]:
        hold.granted = hold.heard = now
        hold_name = (pool, workflow, gid, job)
        effects.append(
            Emit(pool_message("grant", agent.name, hold.agent, hold_name, hold.version, hold.asked))
        )
    return effects


def _reply(agent: Agent, op: str, message: PoolMessage, asked: float, version: str) -> Emit:
    return Emit(pool_message(op, agent.name, message.sender, message.hold, version, asked))


# deliveries -------------------------------------------------------------------------------------


def delivered(agent: Agent, key: str, publications: tuple[Publication, ...], now: float) -> list[Effect]:
    """A delivery for one of the pool registrations (:data:`KEY`)."""
    effects: list[Effect] = []
    for publication in publications:
        if publication.cls != POOL:
            effects += _released(agent, publication, now)
            continue
        try:
            message = parse_pool_message(publication)
        except ValueError as error:
            refusals.ignore(agent, "pool message", "POOL", str(error), now)
            continue
        why = _unauthorised(agent, message, publication, now)
        if why is not None:
            refusals.ignore(agent, "pool message", f"{message.workflow} {message.job}", why, now)
            continue
        effects += (_answer if message.op in ("grant", "renewed", "revoked") else _request)(
            agent, message, now
        )
    return effects


def _unauthorised(agent: Agent, message: PoolMessage, publication: Publication, now: float) -> str | None:
    """Why ``message`` may not be acted on, or None: addressed here, signed by its sender, and the
    sender is the job's agent (a request to this pool's keeper) or the pool's keeper (an answer)."""
    if message.to != agent.name:
        return f"addressed to {message.to}"
    if message.op in ("grant", "renewed", "revoked"):
        expected = agent.asking.get((message.workflow, message.gid, message.job))
        keeper = _keeper_of(agent, message) if expected is None else expected.keeper
        if keeper != message.sender:
            return f"{message.op} from {message.sender}, not from the keeper of pool {message.pool}"
    else:
        declaration = _kept_pools(agent).get(message.pool)
        if declaration is None:
            return f"pool {message.pool} is not kept by {agent.name}"
        jobs = _pool_jobs(agent, message.workflow, message.pool)
        if jobs.get(message.job) != message.sender:
            return (
                f"{message.op} from {message.sender}, which does not run {message.job} in pool {message.pool}"
            )
    try:
        agent.trust.admit_status(publication, now, message.sender)
    except Refusal as refusal:
        agent.refused[refusal.kind] += 1
        return f"from {refusal.who}: {refusal.reason}"
    return None


# what is declared here --------------------------------------------------------------------------


def _declarations(agent: Agent) -> list[PoolDeclaration]:
    return [declaration for deployment in agent.deployments.values() for declaration in deployment.pools]


def _kept(agent: Agent) -> list[tuple[str, PoolDeclaration]]:
    """(workflow, declaration) of the pools this agent keeps, in install order."""
    deployments = sorted(agent.deployments.values(), key=lambda d: d.order)
    return [(d.workflow, p) for d in deployments for p in d.pools if p.keeper == agent.name]


def _kept_pools(agent: Agent) -> dict[str, PoolDeclaration]:
    """The pools this agent keeps by name, as the latest deployment declaring each says."""
    return {declaration.name: declaration for _, declaration in _kept(agent)}


def _leases(agent: Agent) -> dict[str, float]:
    return {name: declaration.lease for name, declaration in _kept_pools(agent).items()}


def _pool_jobs(agent: Agent, workflow: str, pool: str) -> dict[str, str]:
    """The jobs of ``workflow`` in ``pool`` and their agents, in any version deployed here."""
    jobs: dict[str, str] = {}
    for (w, _), deployment in agent.deployments.items():
        if w == workflow:
            for declaration in deployment.pools:
                if declaration.name == pool:
                    jobs.update(declaration.jobs)
    return jobs


def _keeper_of(agent: Agent, message: PoolMessage) -> str | None:
    deployment = agent.deployments.get((message.workflow, message.version))
    declaration = (
        None if deployment is None else next((d for d in deployment.pools if d.name == message.pool), None)
    )
    return None if declaration is None else declaration.keeper


def _pool_of(agent: Agent, run: Run) -> tuple[PoolDeclaration, int] | None:
    """The pool ``run``'s job takes a slot of, and the job's priority; None if in none."""
    deployment = agent.deployments.get((run.workflow, run.version))
    info = None if deployment is None else deployment.jobs.get(run.job)
    if deployment is None or info is None or info.pool is None:
        return None
    declaration = next((d for d in deployment.pools if d.name == info.pool), None)
    return None if declaration is None else (declaration, info.priority)


# snapshot ---------------------------------------------------------------------------------------


def snapshot(agent: Agent) -> dict[str, Any]:
    """``{"pools": state}``, or {} for an agent that never kept a pool nor asked for a slot (its
    snapshot stays what it was before pools)."""
    if not (agent.keeping or agent.asking or agent.pool_arrivals or agent.released):
        return {}
    keeping = [
        [pool, *key, asdict(hold)] for pool, holds in agent.keeping.items() for key, hold in holds.items()
    ]
    state = {
        "keeping": keeping,
        "asking": [[*key, asdict(asking)] for key, asking in agent.asking.items()],
        "arrivals": agent.pool_arrivals,
        "released": [list(released) for released in agent.released],
    }
    return {"pools": state}


def restore(agent: Agent, saved: dict[str, Any] | None) -> None:
    """The state of :func:`snapshot` (None: a snapshot older than pools, with none)."""
    if saved is None:
        return
    for pool, workflow, gid, job, hold in saved["keeping"]:
        agent.keeping.setdefault(pool, {})[workflow, gid, job] = Hold(**hold)
    agent.asking = {(w, g, j): Asking(**asking) for w, g, j, asking in saved["asking"]}
    agent.pool_arrivals = saved["arrivals"]
    agent.released = OrderedDict((tuple(released), None) for released in saved["released"])
