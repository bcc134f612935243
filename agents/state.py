"""The agent's state machine, without I/O: events in, effects out, time passed in as a value.

Like the router, the core decides and a thin adapter (:mod:`agents.service`) talks to the broker and
runs processes. That keeps every decision (run, NORUN, ignore, retry, queue, APPL_START, APPL_END,
forget, drop an old version) testable without sockets, and lets a restarted agent rebuild its state
from its journal (:mod:`agents.journal`): a :meth:`Agent.snapshot` restored, then the events after it
fed back in; the same events give the same state. What became of the runs it had started is found
by the adapter (:mod:`agents.runner`) and comes back as events: :class:`Finished` or :class:`Lost`.

:class:`Agent` holds the state; :meth:`Agent.handle` looks each event's handler up in a table, as
the router does its messages, and so does an envelope's command, read once at the edge
(:mod:`agents.commands`). The decisions live in one module each: the deployment catalogue
(:mod:`agents.catalogue`), firings (:mod:`agents.firing`), the statuses followed and the
coordinator's (:mod:`agents.coordinator`), the run queue (:mod:`agents.run_queue`), the statuses
published (:mod:`agents.publishing`), forgetting (:mod:`agents.forgetting`), cancel and rerun
(:mod:`agents.cancel_and_rerun`), holds (:mod:`agents.holds`, :mod:`agents.hold_and_release`),
approval steps (:mod:`agents.approvals`), what is refused (:mod:`agents.refusals`), the snapshot
(:mod:`agents.snapshot`), a workflow's limit on generations at once (:mod:`agents.overlap`) and
the states of jobs not ended that it publishes (:mod:`agents.live`).
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Any

from agents import (
    approvals,
    cancel_and_rerun,
    catalogue,
    conditions,
    deadlines,
    firing,
    forgetting,
    hold_and_release,
    holds,
    live,
    overlap,
    pools,
    refusals,
    run_queue,
    snapshot,
    standby,
)
from agents.approvals import Awaiting
from agents.catalogue import Deployment, Owner
from agents.commands import (
    Approve,
    Cancel,
    DefineJob,
    Deploy,
    DeploymentCommand,
    Facts,
    Hold,
    Rerun,
    Undeploy,
    WantRegistration,
    read_envelope,
)
from agents.conditions import Fact
from agents.envelope import Registration, ack_fields
from agents.events import (
    Delivered,
    Effect,
    Emit,
    Event,
    Finished,
    HandedOver,
    Incoming,
    Lost,
    Run,
    Start,
    Stop,
    TakenOver,
    TimePassed,
)
from agents.forgetting import FORGET_AFTER
from agents.generations import GenerationState
from agents.run_queue import Pending
from agents.trust import Refusal, Trust
from broker.language import Publication
from broker.throttle import LogThrottle
from workflow_messages import ack

__all__ = ["Agent"]

log = logging.getLogger(__name__)


class Agent:
    """The decisions of agent ``name``; feed it events with :meth:`handle`. Envelopes are acted on
    only if ``trust`` admits them (:mod:`agents.trust`; by default, trust on first use)."""

    def __init__(
        self,
        name: str,
        max_jobs: int = 4,
        backoff: float = 1.0,
        forget_after: float = FORGET_AFTER,
        trust: Trust | None = None,
    ) -> None:
        self.name = name
        self.trust = trust or Trust()
        self.refused: Counter[str] = Counter()  # refused envelopes, firings and statuses by kind
        self.refusal_log = LogThrottle(burst=1)  # one line per kind and signer, then one a minute
        self.max_jobs = max_jobs
        self.backoff = backoff
        self.forget_after = forget_after
        self.deployments: dict[tuple[str, str], Deployment] = {}
        self.generations: dict[tuple[str, str], GenerationState] = {}
        self.wanted: dict[str, Registration] = {}  # key -> what to keep registered at the broker
        self.owners: dict[str, Owner] = {}  # key -> what it is for
        self.pending: list[Pending] = []
        self.running: dict[tuple[str, str, str], Run] = {}
        # generations over (APPL_END, or forgotten) -> when, oldest first: a late firing of one
        # is a duplicate for ``forget_after`` seconds, however many generations ended since
        self.ended: OrderedDict[tuple[str, str], float | None] = OrderedDict()
        # (workflow, gid) -> {"date": YYYY-MM-DD, "jobs": {job: status record}}: what this agent
        # published in recent generations (see publishing.MAX_OUTCOMES), answered to wfm runs
        self.outcomes: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()
        # (workflow, version) a deployment that left this agent out retired (UNDEPLOY {"retire":
        # [...]}): no generation starts on it, and it is dropped once no generation runs on it
        self.retired: set[tuple[str, str]] = set()
        self.installs = 0  # deployments created: the next one's install order
        # what conditions on other workflows and events were delivered, by subscription; and the
        # runs held until their conditions hold (agents.conditions)
        self.facts: dict[str, list[Fact]] = {}
        self.held: list[Run] = []
        self.swept = 0.0  # the last minute of ``now`` (now // SWEEP_EVERY) swept
        self.holds: set[holds.Rule] = set()  # wfm hold: what may not start (agents.holds)
        # (workflow, gid, job) -> an approval step waiting for wfm approve (agents.approvals)
        self.approvals: dict[tuple[str, str, str], Awaiting] = {}
        # pools (:mod:`agents.pools`): as keeper, pool -> (workflow, gid, job) -> hold, the count
        # of requests that arrived, and the holds released lately; as holder, the runs asking
        self.keeping: dict[str, dict[tuple[str, str, str], pools.Hold]] = {}
        self.pool_arrivals = 0
        self.released: OrderedDict[tuple[str, ...], None] = OrderedDict()
        self.asking: dict[tuple[str, str, str], pools.Asking] = {}
        # standby agents (agents.standby): as a standby, the firings held for takeover by
        # (workflow, gid, job) and the jobs taken over here, (workflow, job) -> (primary, when);
        # as a primary, the jobs handed over from here, (workflow, job) -> (to whom, when)
        self.standing_by: dict[tuple[str, str, str], standby.Held] = {}
        self.took_over: dict[tuple[str, str], tuple[str, float]] = {}
        self.handed: dict[tuple[str, str], tuple[str, float]] = {}
        # (workflow, gid, job) -> the JOBSTATE last published of a job held, waiting, awaiting
        # approval or queued, and since when (agents.live)
        self.live: dict[tuple[str, str, str], live.Published] = {}

    def handle(self, event: Event, now: float) -> list[Effect]:
        effects = forgetting.sweep(self, now) + pools.expire(self, now)
        effects += _EVENTS[type(event)](self, event, now)
        effects += (
            overlap.check(self, now, firing.begin)
            + approvals.check(self, now)
            + deadlines.check(self, now)
            + pools.check(self, now)
        )
        return effects + live.changes(self, now)  # last: the states every check above left

    def snapshot(self) -> dict[str, Any]:
        """The whole state as JSON-able data: :meth:`restore` on a new agent gives the same state."""
        return snapshot.snapshot(self)

    def restore(self, saved: dict[str, Any]) -> None:
        """Take the state of :meth:`snapshot` (on a new agent, before any event)."""
        snapshot.restore(self, saved)

    def resume(self) -> list[Effect]:
        """What a restarted adapter does about the runs the journal says are running: follow each
        (a :class:`Start` re-attaches to its supervisor, or starts it if it never started), and
        stop again those of cancelled generations (the stop asked before the restart may have
        come to nothing: a command that ignored SIGTERM outlives the adapter's SIGKILL timer)."""
        running = list(self.running.values())
        cancelled = {key for key, generation in self.generations.items() if generation.cancelled}
        return [*map(Start, running), *(Stop(r) for r in running if (r.workflow, r.gid) in cancelled)]

    def in_progress(self) -> set[tuple[str, str]]:
        """The (workflow, gid) of every generation not over here: their run logs must stay."""
        return set(self.generations) | {(r.workflow, r.gid) for r in self.running.values()}

    def next_wakeup(self) -> float | None:
        """When the earliest retry is due (a held one is not due), or a pool's request or lease,
        for the adapter's timer."""
        retry = min(
            (
                p.at
                for p in self.pending
                if p.at is not None and not holds.held(self, p.run.workflow, p.run.gid, p.run.job)
            ),
            default=None,
        )
        pool = pools.next_wakeup(self)
        return retry if pool is None else pool if retry is None else min(retry, pool)

    def current(self, workflow: str) -> str | None:
        """The version new generations of ``workflow`` start on (:func:`agents.catalogue.current`)."""
        return catalogue.current(self, workflow)


def _incoming(agent: Agent, event: Incoming, now: float) -> list[Effect]:
    """An AGENT_CTL envelope: admitted by the agent's trust, read, acted on, acknowledged."""
    publication: Publication = event.publication
    fields = ack_fields(publication)
    try:
        signer = agent.trust.admit(publication, now)
    except Refusal as refusal:
        return [Emit(ack(agent.name, fields, "REFUSED", refusals.refuse(agent, refusal, fields, now)))]
    try:
        command = read_envelope(publication, agent.name, signer)
        result, detail, effects = _COMMANDS[type(command)](agent, command, now)
    except ValueError as error:
        log.warning("bad envelope %s: %s", publication, error)
        return [Emit(ack(agent.name, fields, "ERROR", str(error)))]
    return [*effects, Emit(ack(agent.name, fields, result, detail))]


def _deployment_command(agent: Agent, command: DeploymentCommand, now: float) -> cancel_and_rerun.Operated:
    """A command that changes the catalogue: acknowledged with no detail."""
    result, effects = catalogue.apply(agent, command)
    return result, "", effects


Handler = Callable[[Agent, Any, float], list[Effect]]

_EVENTS: dict[type, Handler] = {
    Incoming: _incoming,
    Delivered: lambda agent, event, now: (
        pools.delivered(agent, event.key, event.publications, now)
        if event.key.startswith(pools.KEY)
        else standby.delivered(agent, event.publications, now)
        if event.key.startswith(standby.KEY)
        else firing.delivered(agent, event, now)
    ),
    Finished: run_queue.finished,
    Lost: run_queue.lost,
    TimePassed: lambda agent, event, now: run_queue.pump(agent, now),
    TakenOver: standby.taken,
    HandedOver: standby.handed_over,
}
_COMMANDS: dict[type, Callable[[Agent, Any, float], cancel_and_rerun.Operated]] = {
    DefineJob: _deployment_command,
    WantRegistration: _deployment_command,
    Deploy: _deployment_command,
    Undeploy: _deployment_command,
    Cancel: cancel_and_rerun.cancel,
    Rerun: cancel_and_rerun.rerun,
    Facts: conditions.facts_command,
    Hold: hold_and_release.hold,
    Approve: approvals.approve,
}
