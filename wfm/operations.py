"""Asking agents what is deployed, what ran and what a job printed; cancelling, rerunning and
holding generations, approving approval steps. The library behind ``wfm workflows``, ``runs``,
``logs``, ``cancel``, ``rerun``, ``hold``, ``release``, ``approve`` and the web dashboard: a
:class:`Session` is one broker connection; its methods return values and raise :class:`NoReply` (a
timeout: some agent did not answer) or :class:`UnknownWorkflow`.

Agents answer over the overlay (shapes in :mod:`workflow_messages.operations`). A question to
every agent cannot know how many will answer, so it is answered once :data:`QUIET` seconds pass
without a new agent answering (after a first one); a question to named agents, once they all have.
Questions and signed envelopes are published again with backoff while answers are missing: the
asker's advertisement must reach an agent's broker before the agent's subscription comes back
to it, so the first copy may reach no one.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from broker.client import Brokers, Client, Subscription
from broker.errors import LocalError, NoAnswer, RemoteError
from broker.language import Publication, Value
from wfm.monitor import Generation, Monitor
from wfm.triggers import TriggerPublisher, check_gid
from workflow_messages import (
    APPL_START,
    JOBSTATUS,
    NORUN,
    PARAMS,
    TRIGGER,
    Param,
    deployer_advertisement,
    encode_params,
    envelope_digest,
    monitor_subscriptions,
    resolve,
)
from workflow_messages.alerts import ALERT
from workflow_messages.conditions import held
from workflow_messages.deadlines import DEADLINE
from workflow_messages.operations import (
    ANY,
    APPROVE,
    CANCEL,
    HOLD,
    RELEASE,
    RERUN,
    answer_subscription,
    decode_content,
    operation,
    operation_acks,
    query,
    query_advertisement,
)
from workflow_messages.overlap import QUEUED
from workflow_messages.params import parse_declarations, records

__all__ = [
    "QUIET",
    "BadParams",
    "Deployed",
    "NoReply",
    "Session",
    "UnknownWorkflow",
    "downstream",
    "generation_record",
    "newest",
    "stored_runs",
    "taken_over",
]

QUIET = 0.5  # seconds without a new answer after which every agent that will answer has
RESEND = 0.25  # seconds before the first copy is sent again (then doubling, up to 2 s)
RUNS_LIMIT = 200  # generations a rerun looks through for the gid and its earlier reruns

Sign = Callable[[Publication], Publication]


class NoReply(NoAnswer):
    """Agents did not answer in time; ``agents`` names them (empty: nobody answered at all)."""

    def __init__(self, message: str, agents: Iterable[str] = ()) -> None:
        super().__init__(message)
        self.agents = sorted(agents)


class BadParams(LocalError, ValueError):
    """Run parameters that do not fit what the workflow declares: usage, nothing was sent."""


class UnknownWorkflow(LocalError):
    """No agent that answered has the workflow (or the job, or the generation) asked about."""


@dataclass
class Deployed:
    """A workflow as its agents describe it: the version new generations start on, every version
    still deployed, which agent has which jobs, and the graph (from the coordinator)."""

    workflow: str
    version: str = ""
    versions: set[str] = field(default_factory=set)
    agents: dict[str, list[str]] = field(default_factory=dict)  # agent -> its jobs
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)  # job -> command, schedule, ...
    graph: dict[str, list[list[str]]] | None = None
    coordinator: str | None = None
    # every agent with any version of it, current or not (one retired from it, say, finishing
    # its generations on an older version), and those versions: whom a cancellation must reach,
    # and what a new deployment that leaves the agent out retires there
    held: dict[str, set[str]] = field(default_factory=dict)
    coordinators: set[str] = field(default_factory=set)  # agents with APPL_END of any version
    # the run parameters the current version declares (none from agents older than parameters)
    params: tuple[Param, ...] = ()
    holds: set[tuple[str, str]] = field(default_factory=set)  # wfm hold's (job or *, gid or *)

    def resolve(self, given: Mapping[str, str]) -> dict[str, str]:
        """``given`` checked against the declared parameters, defaults filled in (BadParams)."""
        try:
            return resolve(self.params, given)
        except ValueError as error:
            raise BadParams(f"{self.workflow}: {error}") from None

    def unanswered(self) -> list[str]:
        """The jobs whose agent did not answer, by the coordinator's graph (or ``the coordinator``)."""
        return ["the coordinator"] if self.graph is None else sorted(set(self.graph) - set(self.jobs))

    def check(self, timeout: float) -> None:
        """NoReply unless every agent of the workflow answered: an operation must reach them all."""
        missing = self.unanswered()
        if missing:
            what = ", ".join(missing)
            raise NoReply(f"no answer within {timeout:g} s from the agent of {self.workflow}'s {what}")

    def on_hold(self) -> list[str]:
        """What is on hold, in words: ``every job``, ``Ship``, ``every job in g1``, ``Ship in g1``."""
        return [
            f"{'every job' if job == ANY else job}{'' if gid == ANY else f' in {gid}'}"
            for job, gid in sorted(self.holds)
        ]

    def record(self) -> dict[str, Any]:
        """What ``-o json`` prints for it."""
        return {
            "workflow": self.workflow,
            "version": self.version,
            "versions": sorted(self.versions),
            "coordinator": self.coordinator,
            "agents": self.agents,
            "held": {agent: sorted(versions) for agent, versions in sorted(self.held.items())},
            "jobs": self.jobs,
            "graph": self.graph,
            "params": records(self.params),
            "holds": [{"job": job, "gid": gid} for job, gid in sorted(self.holds)],
        }


def downstream(graph: Mapping[str, Iterable[Iterable[str]]], job: str) -> set[str]:
    """``job`` and every job after it, directly or not."""
    after: dict[str, set[str]] = {}
    for successor, edges in graph.items():
        for predecessor, _ in edges:
            after.setdefault(predecessor, set()).add(successor)
    found, todo = {job}, [job]
    while todo:
        for successor in after.get(todo.pop(), ()):
            if successor not in found:
                found.add(successor)
                todo.append(successor)
    return found


def generation_record(generation: Generation, cancelled: bool = False) -> dict[str, Any]:
    """One generation as ``wfm runs`` shows it: its outcome (APPL_END's status, else running), its
    start, its duration once over, and each job's status."""
    jobs = {job: state for job, state in generation.jobs.items() if job != APPL_START}
    ends = [s.started + (s.duration or 0.0) for s in generation.jobs.values() if s.started]
    started = _started(generation)
    end = generation.end
    if end is not None and end.started:
        ends.append(end.started)
    return {
        "workflow": generation.workflow,
        "gid": generation.gid,
        "date": generation.date,
        "status": end.status if end is not None else ("CANCELLING" if cancelled else _unended(generation)),
        "detail": end.detail if end is not None else "",
        "started": started,
        "duration": None if end is None or started is None else round(max(ends) - started, 3),
        "jobs": {job: state.status for job, state in jobs.items()},
        "params": generation.params or {},
        **({"missed": list(generation.missed)} if generation.missed else {}),  # deadlines' alerts
        **({"taken_over": taken} if (taken := taken_over(generation)) else {}),  # by standbys
    }


TAKEN_OVER = "taken over from "  # how a status of a job a standby took over begins (agents.standby)


def taken_over(generation: Generation) -> dict[str, str]:
    """The jobs of ``generation`` a standby agent ran, taken over from their own agent: job ->
    ``agentA by agentB``, as their statuses' details say."""
    found: dict[str, str] = {}
    for job, state in generation.jobs.items():
        detail = str(getattr(state, "detail", "") or "")
        if detail.startswith(TAKEN_OVER):
            found[job] = detail[len(TAKEN_OVER) :].split(":", 1)[0]
    return found


def _unended(generation: Generation) -> str:
    """RUNNING, or QUEUED while its coordinator holds it waiting its turn (``max-active``)."""
    start = generation.jobs.get(APPL_START)
    return QUEUED if start is not None and start.status == QUEUED else "RUNNING"


def stored_runs(store: Any, workflow: str, into: Monitor | None = None) -> Monitor:
    """The generations of ``workflow`` in a history store (anything with ``query(filter)``, as
    ``wfm.history.HistoryStore``): its Triggers and job statuses fed into ``into`` (a new
    :class:`Monitor` by default), as the live ones are. Older than what agents keep."""
    monitor = into or Monitor()
    for subscription in monitor_subscriptions(workflow):
        for stored in store.query(subscription):
            monitor.receive(dict(stored.publication))
    return monitor


def newest(generations: Iterable[Generation], limit: int) -> list[Generation]:
    """The newest ``limit`` generations by start, those not started yet first: what agents answer
    and what is followed live arrive in no useful order."""
    found = sorted(generations, key=lambda g: (_started(g) is None, _started(g) or 0.0), reverse=True)
    return found[:limit]


def _started(generation: Generation) -> float | None:
    starts = [s.started for s in generation.jobs.values() if s.started]
    return min(starts) if starts else None


class Session:
    """One connection to the overlay, asking agents. Open it with :meth:`connect`."""

    def __init__(self, client: Client, uri: Brokers, timeout: float) -> None:
        self.client, self.uri, self.timeout = client, uri, timeout
        self.cancelled: set[tuple[str, str]] = set()  # generations agents said they are cancelling
        self.truncated: set[str] = set()  # agents that cut an answer to fit it in a message
        self.operating: set[str] = set()  # workflows whose operations this session has advertised

    @classmethod
    @asynccontextmanager
    async def connect(cls, uri: Brokers, timeout: float = 5.0) -> AsyncIterator[Session]:
        """Connected and advertising queries; ConnectError when no broker can be reached."""
        async with await Client.connect(uri, timeout=max(timeout, 1.0)) as client:
            await client.advertise(query_advertisement())
            yield cls(client, uri, timeout)

    # questions ------------------------------------------------------------------------------

    async def ask(
        self,
        kind: str,
        content: dict[str, Any],
        agents: Iterable[str] | None = None,
        enough: Callable[[dict[str, dict[str, Any]]], bool] = lambda _: True,
    ) -> dict[str, dict[str, Any]]:
        """Every answer to the query ``kind``, by agent: of the named ``agents`` (NoReply naming
        those that did not answer), or of every agent that answers (NoReply if none does), until
        the answers are ``enough`` or the timeout. An answer with result ERROR (or not JSON) is a
        RemoteError naming the agent and its reason."""
        request = secrets.token_hex(8)
        async with await self.client.subscribe(answer_subscription(request)) as answers:

            def send(missing: set[str] | None) -> None:
                for agent in sorted(missing) if missing is not None else [ANY]:
                    self.client.publish_nowait(query(agent, kind, request, content))

            wanted = None if agents is None else set(agents)
            replies = await self._gather(
                answers, send, wanted, lambda _: True, lambda got: enough(_contents(got))
            )
        return _contents(replies)

    def _cut(self, answers: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """``answers``, noting in :attr:`truncated` the agents that had to leave something out."""
        self.truncated.update(agent for agent, data in answers.items() if data.get("truncated"))
        return answers

    async def workflows(self) -> tuple[list[Deployed], list[str]]:
        """Every workflow deployed on an agent that answers, and every agent that answered."""
        answers = self._cut(
            await self.ask(
                "WORKFLOWS", {}, enough=lambda got: not any(w.unanswered() for w in _deployed(got))
            )
        )
        return _deployed(answers), sorted(answers)

    async def describe(self, workflow: str) -> Deployed:
        """``workflow`` as the agents that answer describe it (empty if none has it). Unlike
        :meth:`deployed`, it does not wait for the coordinator's answer: asked while a deployment
        is under way, an agent's answer may come before its envelopes do."""
        answers = self._cut(await self.ask("WORKFLOWS", {}))
        return next((w for w in _deployed(answers) if w.workflow == workflow), Deployed(workflow))

    async def lookup(self, workflow: str) -> Deployed:
        """``workflow`` as its agents describe it, asking every agent: complete once its
        coordinator answered, or QUIET seconds after the last answer if no agent that answered has
        it (UnknownWorkflow then; NoReply if no agent answered at all). Unlike :meth:`deployed`,
        it does not wait for the coordinators of other workflows: what ``wfm trigger`` asks
        before it publishes."""

        def enough(got: dict[str, dict[str, Any]]) -> bool:
            return not any(w.workflow == workflow and w.unanswered() for w in _deployed(got))

        answers = self._cut(await self.ask("WORKFLOWS", {}, enough=enough))
        return _found(workflow, _deployed(answers), sorted(answers))

    async def deployed(self, workflow: str) -> Deployed:
        """``workflow`` as its agents describe it; UnknownWorkflow if no agent that answered has it."""
        workflows, agents = await self.workflows()
        return _found(workflow, workflows, agents)

    async def runs(
        self, workflow: str, limit: int = 20, gid: str = "", into: Monitor | None = None
    ) -> Monitor:
        """The recent generations of ``workflow`` (gid starting with ``gid``), from what its agents
        kept of them, fed into ``into`` (a new :class:`Monitor` by default): the newest ``limit``
        of each agent's."""
        return await self._runs(await self.deployed(workflow), limit, gid, into)

    async def _runs(
        self, deployed: Deployed, limit: int, gid: str = "", into: Monitor | None = None
    ) -> Monitor:
        workflow = deployed.workflow
        answers = self._cut(
            await self.ask("RUNS", {"workflow": workflow, "gid": gid, "limit": limit}, deployed.agents)
        )
        monitor = into or Monitor()
        for agent, data in answers.items():
            for generation in data["generations"]:
                self._feed(monitor, workflow, agent, generation)
        return monitor

    def _feed(self, monitor: Monitor, workflow: str, agent: str, generation: dict[str, Any]) -> None:
        gid = generation["gid"]
        if generation["date"]:
            monitor.receive(
                {
                    "class": TRIGGER,
                    "applname": workflow,
                    "GID": gid,
                    "schedule": generation["date"].replace("-", "."),
                    **({PARAMS: encode_params(generation["params"])} if generation.get("params") else {}),
                }
            )
        if generation.get("cancelled"):
            self.cancelled.add((workflow, gid))
        for job in generation.get("missed", []):  # the alerts of the deadlines it missed
            alert = {"class": ALERT, "applname": workflow, "GID": gid, "jobname": job, "status": DEADLINE}
            monitor.receive(alert)
        waiting = generation.get("waiting", {})  # held jobs: what they wait for (agents.conditions)
        states: dict[str, dict[str, Value]] = {
            job: {"status": state.upper(), **({"detail": held(waiting[job])} if job in waiting else {})}
            for job, state in generation["busy"].items()
        }
        states |= generation["jobs"]
        for job, state in states.items():
            monitor.receive(
                {
                    "class": JOBSTATUS,
                    "applname": workflow,
                    "GID": gid,
                    "jobname": job,
                    "agentname": agent,
                    **state,
                }
            )

    async def follow(self, workflow: str) -> None:
        """Subscribe to the live Triggers and statuses of ``workflow`` (before :meth:`runs`, so
        nothing falls between the two), for :meth:`watch`."""
        for subscription in monitor_subscriptions(workflow):
            await self.client.subscribe(subscription, own_queue=False)

    async def watch(self, monitor: Monitor, changed: Callable[[], None]) -> None:
        """Feed ``monitor`` what :meth:`follow` receives, calling ``changed`` after each, until
        the connection ends (ConnectionError)."""
        async for delivery in self.client:
            monitor.receive(dict(delivery.publication))
            changed()
        raise ConnectionError("the connection to the broker ended")

    async def logs(self, workflow: str, job: str, gid: str, attempt: int = 0) -> dict[str, Any]:
        """The end of the log of ``job``'s ``attempt`` (0: the latest) in ``gid``, fetched from
        its agent: ``text``, ``size``, ``truncated``, ``attempts``, ``ended``, and ``agent``."""
        deployed = await self.deployed(workflow)
        if job not in deployed.jobs and deployed.graph is not None and job in deployed.graph:
            raise NoReply(f"no answer within {self.timeout:g} s from the agent of {workflow}'s {job}")
        if job not in deployed.jobs:
            jobs = ", ".join(sorted(deployed.jobs))
            raise UnknownWorkflow(f"{workflow} has no job {job} (jobs: {jobs})")
        agent = deployed.jobs[job]["agent"]
        content = {"workflow": workflow, "job": job, "gid": gid, "attempt": attempt}
        try:
            answers = await self.ask("LOGS", content, [agent])
        except NoReply:
            raise
        except RemoteError:  # no log: a job that did not run (NORUN) has none, and says so, as
            state = await self._state(agent, workflow, job, gid)  # does an approval step that ended
            approval = bool(deployed.jobs[job].get("approval"))
            if state is None or (state.get("status") != NORUN and not approval):
                raise
            detail = str(state.get("detail", ""))
            empty = {"attempts": [], "attempt": 0, "size": 0, "truncated": False, "ended": True, "text": ""}
            return {"agent": agent, **empty, "status": str(state["status"]), "detail": detail}
        return {"agent": agent, **answers[agent]}

    async def _state(self, agent: str, workflow: str, job: str, gid: str) -> dict[str, Any] | None:
        """What ``agent`` published for ``job`` in generation ``gid``, as it remembers it."""
        answers = await self.ask("RUNS", {"workflow": workflow, "gid": gid, "limit": RUNS_LIMIT}, [agent])
        for generation in answers[agent]["generations"]:
            if generation["gid"] == gid:
                state: dict[str, Any] | None = generation["jobs"].get(job)
                return state
        return None

    # operations -----------------------------------------------------------------------------

    async def operate(
        self, workflow: str, command: str, content: dict[str, Any], agents: Iterable[str], sign: Sign
    ) -> dict[str, tuple[str, str]]:
        """Send the signed ``command`` envelope to each of ``agents`` and collect their
        acknowledgements: agent -> (result, detail). Each sending is signed anew: agents refuse a
        sequence they have seen."""
        await self.advertise_operations(workflow)
        sent: set[tuple[str, str]] = set()
        async with await self.client.subscribe(operation_acks(workflow, command)) as acks:

            def send(missing: set[str] | None) -> None:
                for agent in sorted(missing or ()):
                    signed = sign(operation(agent, workflow, command, content))
                    sent.add((agent, envelope_digest(signed)))
                    self.client.publish_nowait(signed)

            def ours(ack: Publication) -> bool:
                return (str(ack.get("agentname")), str(ack.get("digest"))) in sent

            replies = await self._gather(acks, send, set(agents), ours)
        return {agent: (str(ack["result"]), str(ack.get("detail", ""))) for agent, ack in replies.items()}

    async def advertise_operations(self, workflow: str) -> None:
        """Advertise the operations on ``workflow``, once per session. Called before the question
        that precedes an operation, so that its QUIET wait also lets each agent's control
        subscription come back along the advertisement: sent at once, the first operation would be
        dropped at this broker for the agents farthest away, and a cancelled generation could go on
        there until the resend (a failure alert running, for one)."""
        if workflow not in self.operating:
            await self.client.advertise(deployer_advertisement(workflow, ANY))
            self.operating.add(workflow)

    async def cancel(
        self, workflow: str, gid: str, sign: Sign, force: bool = False
    ) -> dict[str, tuple[str, str]]:
        """Cancel generation ``gid`` on every agent of ``workflow``: agent -> (result, detail).
        UnknownWorkflow, sending nothing, if no agent remembers ``gid`` (a mistyped gid would
        otherwise be cancelled before it starts, in silence), unless ``force``."""
        await self.advertise_operations(workflow)
        deployed = await self.deployed(workflow)
        deployed.check(self.timeout)
        if not force and (workflow, gid) not in (await self._runs(deployed, RUNS_LIMIT, gid)).generations:
            raise UnknownWorkflow(
                f"no agent knows generation {gid} of {workflow}: nothing cancelled"
                " (--force cancels it before it starts)"
            )
        return await self.operate(workflow, CANCEL, {"gid": gid}, sorted(deployed.held), sign)

    async def hold(
        self, workflow: str, sign: Sign, job: str | None = None, gid: str | None = None, release: bool = False
    ) -> dict[str, tuple[str, str]]:
        """Hold (or ``release``) ``job`` (None: every job) of ``workflow`` in generation ``gid``
        (None: every generation, new ones too) on every agent of the workflow: agent -> (result,
        detail). UnknownWorkflow, sending nothing, if the workflow has no such job."""
        await self.advertise_operations(workflow)
        deployed = await self.deployed(workflow)
        deployed.check(self.timeout)
        assert deployed.graph is not None  # checked
        if job is not None and job not in deployed.graph:
            raise UnknownWorkflow(f"{workflow} has no job {job} (jobs: {', '.join(sorted(deployed.graph))})")
        content = {"job": job or ANY, "gid": gid or ANY}
        return await self.operate(
            workflow, RELEASE if release else HOLD, content, sorted(deployed.held), sign
        )

    async def approve(
        self, workflow: str, job: str, gid: str, sign: Sign, approved: bool = True, comment: str = ""
    ) -> tuple[str, str, str]:
        """Approve (or reject) the approval step ``job`` of generation ``gid``, on its agent:
        (agent, result, detail). UnknownWorkflow, sending nothing, if ``job`` is no approval step."""
        await self.advertise_operations(workflow)
        deployed = await self.deployed(workflow)
        if job not in deployed.jobs and deployed.graph is not None and job in deployed.graph:
            raise NoReply(f"no answer within {self.timeout:g} s from the agent of {workflow}'s {job}")
        if job not in deployed.jobs:
            raise UnknownWorkflow(f"{workflow} has no job {job} (jobs: {', '.join(sorted(deployed.jobs))})")
        if not deployed.jobs[job].get("approval"):
            raise UnknownWorkflow(f"{job} of {workflow} is not an approval step: it runs its command")
        agent = deployed.jobs[job]["agent"]
        content = {"gid": gid, "job": job, "verdict": "approve" if approved else "reject", "comment": comment}
        acks = await self.operate(workflow, APPROVE, content, [agent], sign)
        return (agent, *acks[agent])

    async def rerun(
        self,
        workflow: str,
        gid: str,
        start: str | None,
        sign: Sign,
        outbox: Path | None = None,
        params: Mapping[str, str] | None = None,
    ) -> str:
        """Start a new generation re-running ended generation ``gid`` on its date, every job, or
        (``start``) that job and those after it, the others republishing their outcome in ``gid``.
        It runs with ``gid``'s run parameters, ``params`` overriding them (BadParams, sending
        nothing, if the result does not fit what the current version declares; a parameter the
        version no longer declares is dropped). Returns the new gid, ``GID-rN`` (N one more than
        the reruns of ``gid`` already known)."""
        await self.advertise_operations(workflow)
        deployed = await self.deployed(workflow)
        deployed.check(self.timeout)
        monitor = await self._runs(deployed, RUNS_LIMIT, gid)
        generation = monitor.generations.get((workflow, gid))
        if generation is None or generation.date is None:
            raise UnknownWorkflow(f"no agent remembers generation {gid} of {workflow}")
        if not generation.ended:
            raise UnknownWorkflow(f"generation {gid} of {workflow} has not ended: wait for it, or cancel it")
        declared = {param.name for param in deployed.params}
        before = {k: v for k, v in (generation.params or {}).items() if k in declared}
        values = deployed.resolve({**before, **(params or {})})
        earlier = [
            g for _, g in monitor.generations if g.startswith(f"{gid}-r") and g[len(gid) + 2 :].isdigit()
        ]
        new = f"{gid}-r{1 + max((int(g[len(gid) + 2 :]) for g in earlier), default=0)}"
        try:
            check_gid(new)
        except ValueError as error:
            raise LocalError(str(error)) from None
        if start is not None:
            assert deployed.graph is not None  # checked
            if start not in deployed.graph:
                raise UnknownWorkflow(
                    f"{workflow} has no job {start} (jobs: {', '.join(sorted(deployed.graph))})"
                )
            # a job skipped in gid has no outcome to reuse: its predecessors' outcomes, republished,
            # skip it again; an agent refuses to reuse a job of which it kept no outcome
            skipped = {job for job, state in generation.jobs.items() if state.skipped}
            reuse = sorted(set(deployed.graph) - downstream(deployed.graph, start) - skipped)
            content = {"gid": gid, "new": new, "reuse": reuse}
            acks = await self.operate(workflow, RERUN, content, deployed.agents, sign)
            failed = [
                f"{agent}: {result} {detail}"
                for agent, (result, detail) in acks.items()
                if result not in ("OK", "UNCHANGED")
            ]
            if failed:
                raise RemoteError(f"rerun of {gid} refused: {'; '.join(sorted(failed))}")
        day = date.fromisoformat(generation.date)
        await asyncio.to_thread(_trigger, self.uri, workflow, new, day, outbox, values)
        return new

    # the exchange ---------------------------------------------------------------------------

    async def _gather(
        self,
        replies: Subscription,
        send: Callable[[set[str] | None], None],
        wanted: set[str] | None,
        accept: Callable[[Publication], bool],
        enough: Callable[[dict[str, Publication]], bool] = lambda _: True,
    ) -> dict[str, Publication]:
        """Send, and again with backoff, to the agents not heard from (``wanted``; None: every
        agent), until each has answered (or, for every agent, QUIET seconds bring no new one and
        what came is ``enough``; else what came by the timeout)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout
        got: dict[str, Publication] = {}
        quiet: float | None = None  # when every agent's answer is in, asking every agent
        pause = RESEND
        while True:
            missing = None if wanted is None else wanted - set(got)
            now = loop.time()
            if missing == set() or (quiet is not None and now >= quiet and enough(got)):
                return got
            if now >= deadline:
                if wanted is None and got:
                    return got
                if missing:
                    raise NoReply(
                        f"no answer within {self.timeout:g} s from {', '.join(sorted(missing))}", missing
                    )
                raise NoReply(f"no agent answered within {self.timeout:g} s")
            send(missing)
            resend = min(now + pause, deadline)
            pause = min(pause * 2, 2.0)
            until = resend if quiet is None or quiet <= now else min(resend, quiet)
            while (now := loop.time()) < until:
                try:
                    delivery = await replies.next(until - now)
                except TimeoutError:
                    break
                reply, agent = delivery.publication, str(delivery.publication.get("agentname"))
                if agent in got or not accept(reply) or (missing is not None and agent not in missing):
                    continue
                got[agent] = reply
                if wanted is None:
                    quiet = loop.time() + QUIET
                elif wanted <= set(got):
                    break


def _trigger(
    uri: Brokers, workflow: str, gid: str, day: date, outbox: Path | None, params: Mapping[str, str]
) -> None:
    with TriggerPublisher(uri, outbox=outbox) as publisher:
        publisher.publish(workflow, gid, day, params=params)


def _found(workflow: str, workflows: list[Deployed], agents: list[str]) -> Deployed:
    """``workflow`` among ``workflows`` (what ``agents`` answered), else UnknownWorkflow."""
    for each in workflows:
        if each.workflow == workflow:
            return each
    known = ", ".join(w.workflow for w in workflows) or "none"
    raise UnknownWorkflow(
        f"no agent has workflow {workflow} deployed ({len(agents)} agents answered; workflows: {known})"
    )


def _declarations(agent: str, data: object) -> tuple[Param, ...]:
    try:
        return parse_declarations(data)
    except ValueError as error:
        raise RemoteError(f"{agent} answered malformed params: {error}") from None


def _contents(replies: dict[str, Publication]) -> dict[str, dict[str, Any]]:
    """Each reply's JSON content; RemoteError naming the agent for an ERROR or a malformed one."""
    found = {}
    for agent, reply in replies.items():
        try:
            data = decode_content(reply.get("content"))
        except ValueError as error:
            raise RemoteError(f"{agent} answered nonsense: {error}") from None
        if reply.get("result") != "OK":
            raise RemoteError(f"{agent}: {data.get('error', 'error')}")
        found[agent] = data
    return found


def _deployed(answers: dict[str, dict[str, Any]]) -> list[Deployed]:
    """The workflows in the answers to WORKFLOWS, by name."""
    found: dict[str, Deployed] = {}
    for agent, data in sorted(answers.items()):
        try:
            _describe(found, agent, data["deployments"])
        except (KeyError, TypeError, AttributeError) as error:
            raise RemoteError(f"{agent} answered a malformed list of deployments ({error!r})") from None
    return sorted(found.values(), key=lambda w: w.workflow)


def _describe(found: dict[str, Deployed], agent: str, deployments: list[dict[str, Any]]) -> None:
    """Add what ``agent`` says it has to ``found``; only current versions name agents and jobs."""
    for deployment in deployments:
        workflow = found.setdefault(deployment["workflow"], Deployed(deployment["workflow"]))
        workflow.versions.add(deployment["version"])
        workflow.held.setdefault(agent, set()).add(deployment["version"])
        workflow.holds.update((str(job), str(gid)) for job, gid in deployment.get("holds", []))
        if deployment["coordinator"]:
            workflow.coordinators.add(agent)
        if not deployment["current"]:
            continue
        workflow.version = deployment["version"]
        workflow.params = _declarations(agent, deployment.get("params"))
        workflow.agents[agent] = sorted(deployment["jobs"])
        for job, info in deployment["jobs"].items():
            workflow.jobs[job] = {"agent": agent, **info}
        if deployment["coordinator"]:
            workflow.coordinator, workflow.graph = agent, deployment["graph"]
