"""The agent's state machine, without I/O: events in, effects out, time passed in as a value.

Like the router, the core decides and a thin adapter (:mod:`agents.service`) talks to the broker and
runs processes. That keeps every decision (run, NORUN, ignore, retry, queue, APPL_START, APPL_END,
forget, drop an old version) testable without sockets, and lets a restarted agent rebuild its state
from its journal (:mod:`agents.journal`): a :meth:`Agent.snapshot` restored, then the events after it
fed back in; the same events give the same state. What became of the runs it had started is found
by the adapter (:mod:`agents.runner`) and comes back as events: :class:`Finished` or :class:`Lost`.

Registrations (advertisements and subscriptions) are kept as a wanted set (:attr:`Agent.wanted`,
key -> registration) rather than only emitted once, so the adapter can re-issue all of them after a
restart or a reconnection.
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import asdict, astuple, dataclass, field, replace
from typing import Any

from agents.envelope import (
    Control,
    JobInfo,
    Registration,
    ack_fields,
    firing_date,
    parse_control,
    parse_deploy,
    parse_jobinfo,
    parse_registration,
    registrations,
)
from agents.trust import Refusal, Trust
from broker.language import Publication
from broker.throttle import LogThrottle
from workflow_messages import (
    APPL_END,
    APPL_START,
    CANCELLED,
    FAILURE,
    JOBSTATUS,
    NORUN,
    SUCCESS,
    TRIGGER,
    ack,
    blocked,
    check_gid,
    decide_end,
    digest,
    end_of,
    failures,
    job_status,
    retired_versions,
    start_subscription,
)
from workflow_messages.operations import CANCEL, OPERATIONS, decode_content

__all__ = [
    "Agent",
    "Delivered",
    "Effect",
    "Emit",
    "Event",
    "Finished",
    "Incoming",
    "Lost",
    "Request",
    "Result",
    "Run",
    "Start",
    "Stop",
    "Tick",
    "Withdraw",
]

log = logging.getLogger(__name__)

DAY = 86_400.0
# ended generations remembered (each firing of one is a duplicate) for ``forget_after`` seconds
# but at most this many, the oldest forgotten first: at 10 generations a second for a day, about
# one in nine would otherwise be kept, and rewritten in every snapshot
MAX_ENDED = 100_000
FORGET_AFTER = 30 * DAY  # seconds a generation is remembered: the default of wfm agent --keep-days
SWEEP_EVERY = 60.0  # seconds of ``now`` between two looks for what to forget
LOST = "lost: supervisor died"
NOT_RUN = "cancelled"  # the detail of a job a cancelled generation does not run
# generations whose outcomes (the statuses this agent published) are kept, for wfm runs and the
# jobs wfm rerun --from reuses, the oldest forgotten first
MAX_OUTCOMES = 500


# events ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Incoming:
    """An AGENT_CTL publication addressed to this agent."""

    publication: Publication


@dataclass(frozen=True, slots=True)
class Delivered:
    """Publications delivered for the registration ``key`` (several for a composite firing): a
    :class:`broker.client.Delivery` named by the agent's own key, which outlives reconnections,
    instead of the broker's subscription id, which does not."""

    key: str
    publications: tuple[Publication, ...]


@dataclass(frozen=True, slots=True)
class Run:
    """One attempt at running a job of a generation."""

    workflow: str
    version: str
    gid: str
    job: str
    attempt: int
    command: str
    cwd: str | None
    date: str  # YYYY-MM-DD
    timeout: float | None
    upstream: str = ""  # the failed jobs its predecessors' statuses named, for its own status

    @property
    def label(self) -> str:
        """How logs name the run."""
        return f"{self.workflow} {self.gid} {self.job} attempt {self.attempt}"


@dataclass(frozen=True, slots=True)
class Result:
    """How a run ended: ``ok`` is exit status 0; ``detail`` says exit status or timeout, and duration."""

    ok: bool
    detail: str
    started: float
    duration: float


@dataclass(frozen=True, slots=True)
class Finished:
    run: Run
    result: Result


@dataclass(frozen=True, slots=True)
class Lost:
    """The run's supervisor died after starting its command and before recording how it ended: the
    command may have run, or be running still, so it is reported FAILURE (:data:`LOST`) and never
    retried, whatever its retries: running a job twice is worse than a failure someone can rerun."""

    run: Run


@dataclass(frozen=True, slots=True)
class Tick:
    """Time passed: retries whose backoff is over start."""


Event = Incoming | Delivered | Finished | Lost | Tick


# effects --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Request:
    """Advertise or (composite) subscribe ``registration`` under ``key``."""

    key: str
    registration: Registration


@dataclass(frozen=True, slots=True)
class Withdraw:
    """Undo the request made under ``key``."""

    key: str


@dataclass(frozen=True, slots=True)
class Emit:
    """Publish ``publication`` (the broker's ``Publish`` is the message that carries one)."""

    publication: Publication


@dataclass(frozen=True, slots=True)
class Start:
    run: Run


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop ``run``, its generation was cancelled: a :class:`Finished` (or :class:`Lost`) follows."""

    run: Run


Effect = Request | Withdraw | Emit | Start | Stop


# state ----------------------------------------------------------------------------------------


@dataclass
class Deployment:
    """One version of a workflow on this agent: its jobs and the keys of its requests."""

    workflow: str
    version: str
    order: int  # install order: the latest deployed version of a workflow starts new generations
    jobs: dict[str, JobInfo] = field(default_factory=dict)
    keys: set[str] = field(default_factory=set)
    envelopes: dict[str, Control] = field(default_factory=dict)  # what built it, for a snapshot
    ended: bool = False  # a generation of this version has ended: older ones start no more
    # deployed by DEPLOY: no APPL_END comes here, a generation is over once each job here published
    ends_here: bool = False
    parts: int = 0  # the DEPLOY envelopes its jobs come in (0: deployed by the per-job commands)
    parts_in: set[int] = field(default_factory=set)  # the numbers of those that arrived
    split: str = ""  # which jobs went in which part (``DeployPart.split``)
    signers: dict[str, str] = field(default_factory=dict)  # job -> the agent whose statuses it signs

    def add(self, info: JobInfo) -> None:
        self.jobs[info.job] = info
        self.signers.update(info.agents)

    @property
    def complete(self) -> bool:
        """Whether every part arrived: only then are its jobs all known, so that a generation may
        start on it, its jobs fire and a generation be over here once each of them published."""
        return len(self.parts_in) >= self.parts


@dataclass
class GenerationState:
    """What this agent knows of one generation: its version, its jobs here, and (coordinator) every
    status of the workflow in it. The monitor's :class:`wfm.monitor.Generation` is what a watcher
    was shown of one; this is what an agent needs to decide."""

    version: str | None = None
    jobs: dict[str, str] = field(default_factory=dict)  # job -> queued|running|waiting|done
    statuses: dict[str, str] = field(default_factory=dict)
    ended: bool = False  # APPL_END published (coordinator)
    since: float | None = None  # when this agent first heard of it (None: restored from an older snapshot)
    cancelled: bool = False  # wfm cancel: its jobs do not run here (NORUN), its APPL_END is CANCELLED
    rerun_of: str | None = None  # wfm rerun --from: the generation whose outcomes it reuses
    reused: dict[str, list[str]] = field(default_factory=dict)  # job -> [status, detail] to republish
    # a predecessor's status says the generation was cancelled, before (or without) the CANCEL
    # reaching this agent: jobs that fire here do not run; only the signed CANCEL stops running ones
    # (anyone may publish a status)
    cancelled_upstream: bool = False

    @property
    def halted(self) -> bool:
        """Its jobs that fire here do not run: cancelled here, or upstream."""
        return self.cancelled or self.cancelled_upstream


@dataclass
class Pending:
    """A run that is queued (``at`` None) or waiting ``at`` for its retry."""

    run: Run
    at: float | None = None


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
        self.refused: Counter[str] = Counter()  # refused envelopes by kind of refusal
        self._refusals = LogThrottle(burst=1)  # one line per kind and signer, then one a minute
        self.max_jobs = max_jobs
        self.backoff = backoff
        self.forget_after = forget_after
        self.deployments: dict[tuple[str, str], Deployment] = {}
        self.generations: dict[tuple[str, str], GenerationState] = {}
        self.wanted: dict[str, Registration] = {}
        self.owners: dict[str, tuple[str, str, str]] = {}  # key -> (workflow, version, job)
        self.pending: list[Pending] = []
        self.running: dict[tuple[str, str, str], Run] = {}
        # generations over (APPL_END, or forgotten) -> when, oldest first: a late firing of one
        # is a duplicate for ``forget_after`` seconds, however many generations ended since
        self.ended: OrderedDict[tuple[str, str], float | None] = OrderedDict()
        # (workflow, gid) -> {"date": YYYY-MM-DD, "jobs": {job: status record}}: what this agent
        # published in recent generations (see MAX_OUTCOMES), answered to wfm runs
        self.outcomes: OrderedDict[tuple[str, str], dict[str, Any]] = OrderedDict()
        # (workflow, version) a deployment that left this agent out retired (UNDEPLOY {"retire":
        # [...]}): no generation starts on it, and it is dropped once no generation runs on it
        self.retired: set[tuple[str, str]] = set()
        self._installs = 0
        self._swept = 0.0  # the last minute of ``now`` (now // SWEEP_EVERY) swept

    # entry points ---------------------------------------------------------------------------

    def handle(self, event: Event, now: float) -> list[Effect]:
        return self._sweep(now) + self._event(event, now)

    def _event(self, event: Event, now: float) -> list[Effect]:
        if isinstance(event, Incoming):
            return self._incoming(event.publication, now)
        if isinstance(event, Delivered):
            return self._delivery(event.key, event.publications, now)
        if isinstance(event, Finished):
            return self._finished(event.run, event.result, now)
        if isinstance(event, Lost):
            return self._lost(event.run, now)
        return self._pump(now)

    def snapshot(self) -> dict[str, Any]:
        """The whole state as JSON-able data: :meth:`restore` on a new agent gives the same state.

        Deployments are kept as the envelopes that built them and rebuilt by applying those again,
        so the snapshot needs no second encoding of filters, composites and calendars."""
        return {
            "installs": self._installs,
            "deployments": [
                {"order": d.order, "ended": d.ended, "envelopes": [astuple(c) for c in d.envelopes.values()]}
                for d in sorted(self.deployments.values(), key=lambda d: d.order)
            ],
            "generations": [
                [
                    workflow,
                    gid,
                    g.version,
                    g.jobs,
                    g.statuses,
                    g.ended,
                    g.since,
                    g.cancelled,
                    g.rerun_of,
                    g.reused,
                    g.cancelled_upstream,
                ]
                for (workflow, gid), g in self.generations.items()
            ],
            "pending": [[asdict(p.run), p.at] for p in self.pending],
            "running": [asdict(run) for run in self.running.values()],
            "ended": [[workflow, gid, at] for (workflow, gid), at in self.ended.items()],
            "swept": self._swept,
            "trust": self.trust.snapshot(),
            "outcomes": [[workflow, gid, record] for (workflow, gid), record in self.outcomes.items()],
            "retired": sorted(self.retired),
        }

    def restore(self, snapshot: dict[str, Any]) -> None:
        """Take the state of :meth:`snapshot` (on a new agent, before any event)."""
        for saved in snapshot["deployments"]:
            controls = [Control(*fields) for fields in saved["envelopes"]]
            for control in controls:
                try:
                    self._apply(control)
                except ValueError as error:  # taken by an older agent, or half-taken by a bug: an
                    log.warning(  # agent that cannot start is worse than one version missing
                        "snapshot: skipped a %s envelope of %s version %s: %s",
                        control.command,
                        control.workflow,
                        control.version,
                        error,
                    )
            deployment = (
                self.deployments.get((controls[0].workflow, controls[0].version)) if controls else None
            )
            if deployment is not None:
                deployment.order, deployment.ended = saved["order"], saved["ended"]
        self._installs = snapshot["installs"]
        # snapshots from before the age bound have no times: their entries get the first sweep's
        for workflow, gid, version, jobs, statuses, ended, *later in snapshot["generations"]:
            self.generations[workflow, gid] = GenerationState(version, jobs, statuses, ended, *later)
        self.pending = [Pending(Run(**run), at) for run, at in snapshot["pending"]]
        self.running = {(r.workflow, r.gid, r.job): r for r in (Run(**run) for run in snapshot["running"])}
        self.ended = OrderedDict()
        for workflow, gid, *at in snapshot["ended"]:
            self.ended[workflow, gid] = at[0] if at else None
        self._swept = snapshot.get("swept", 0.0)
        if "trust" in snapshot:  # a snapshot from before signed envelopes: trust on first use again
            self.trust.restore(snapshot["trust"])
        self.outcomes = OrderedDict(((w, g), record) for w, g, record in snapshot.get("outcomes", []))
        # after the deployments, whose envelopes (applied again) would end the retirements
        self.retired = {(w, v) for w, v in snapshot.get("retired", []) if (w, v) in self.deployments}

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
        """When the earliest retry is due, for the adapter's timer."""
        return min((p.at for p in self.pending if p.at is not None), default=None)

    # control --------------------------------------------------------------------------------

    def _incoming(self, publication: Publication, now: float) -> list[Effect]:
        fields = ack_fields(publication)
        try:
            self.trust.admit(publication, now)
        except Refusal as refusal:
            return [Emit(ack(self.name, fields, "REFUSED", self._refuse(refusal, fields, now)))]
        try:
            control = parse_control(publication, self.name)
            if control.command in OPERATIONS:
                result, detail, effects = self._operate(control, now)
            else:
                (result, effects), detail = self._apply(control), ""
        except ValueError as error:
            log.warning("bad envelope %s: %s", publication, error)
            return [Emit(ack(self.name, fields, "ERROR", str(error)))]
        return [*effects, Emit(ack(self.name, fields, result, detail))]

    def _refuse(self, refusal: Refusal, fields: dict[str, str], now: float) -> str:
        """Count a refused envelope and log it, once per kind and signer then once a minute (a
        flood of forged envelopes must not flood the log); the reason, for the acknowledgement."""
        self.refused[refusal.kind] += 1
        unlogged = self._refusals.admit(f"{refusal.kind} {refusal.who}", now)
        if unlogged is not None:
            what = " ".join(fields[name] or "?" for name in ("command", "applname", "jobname"))
            log.warning(
                "refused AGENT_CTL %s from %s: %s (%d %s refusals%s)",
                what,
                refusal.who,
                refusal.reason,
                self.refused[refusal.kind],
                refusal.kind,
                f", {unlogged} not logged since the last" if unlogged else "",
            )
        return refusal.reason

    def _apply(self, control: Control) -> tuple[str, list[Effect]]:
        if control.command == "UNDEPLOY":
            return self._undeploy(control)
        result = self._install(control)  # raises (ERROR) before it changes anything
        self.retired.discard((control.workflow, control.version))  # deployed here again
        return result

    def _install(self, control: Control) -> tuple[str, list[Effect]]:
        if control.command == "DEPLOY":
            return self._deploy(control)
        if control.command == "JOBINFO":
            info = parse_jobinfo(control)
            deployment = self._deployment(control.workflow, control.version)
            if deployment.jobs.get(control.job) == info:
                return "UNCHANGED", []
            deployment.add(info)
            deployment.envelopes[f"JOBINFO {control.job}"] = control
            return "OK", self._starts(control.workflow)
        registration = parse_registration(control)
        key = f"{control.workflow} {control.version} {control.command} {control.job} {control.content}"
        if key in self.wanted:
            return "UNCHANGED", []
        deployment = self._deployment(control.workflow, control.version)
        deployment.keys.add(key)
        deployment.envelopes[key] = control
        self.wanted[key] = registration
        self.owners[key] = (control.workflow, control.version, control.job)
        return "OK", [Request(key, registration), *self._starts(control.workflow)]

    def _undeploy(self, control: Control) -> tuple[str, list[Effect]]:
        """UNDEPLOY: with no content, remove every version of the workflow now. With ``{"retire":
        [V, ...]}`` (sent by a deployment of ``control.version`` that left this agent out, naming
        the versions this agent said it had), retire those and every version installed before
        them: start no generation on them and remove each once no generation here runs on it.
        The generations in flight finish, and an old coordinator left out of a plan does not go on
        starting generations of its old version beside the new one's. A version installed after
        the newest named one is not touched: that retirement is older than it."""
        workflow = control.workflow
        versions = [v for (w, v) in self.deployments if w == workflow]
        if not control.content:
            self.retired -= {(workflow, v) for v in versions}
            effects = [e for v in versions for e in self._remove(workflow, v)]
            return ("OK" if versions else "UNCHANGED"), effects
        named = retired_versions(control.content)
        if control.version in versions:
            raise ValueError(f"{workflow} version {control.version} is deployed here: not retired by it")
        orders = [self.deployments[workflow, v].order for v in named if v in versions]
        newest = max(orders, default=0)  # (orders count from 1)
        older = {(workflow, v) for v in versions if self.deployments[workflow, v].order <= newest}
        newly = older - self.retired
        if not newly:
            return "UNCHANGED", []
        self.retired |= newly
        log.info(
            "retired %s version %s: left out of version %s",
            workflow,
            ", ".join(sorted(v for _, v in newly)),
            control.version,
        )
        return "OK", self._collect(workflow)

    def _deploy(self, control: Control) -> tuple[str, list[Effect]]:
        """A DEPLOY envelope: its jobs, the advertisements of their statuses, then their conditions
        (in that order on the link, so a condition finds this agent's own statuses advertised).
        Everything is checked and built before anything changes: an envelope acknowledged ERROR
        leaves no trace (a half-installed one would be in the next snapshot, and fail again there)."""
        deploy = parse_deploy(control)
        built = [(info, registrations(info, deploy.coordinator)) for info in deploy.jobs]
        deployment = self._deployment(control.workflow, control.version)
        deployment.ends_here = True
        deployment.envelopes[f"DEPLOY {digest(control.content)}"] = control
        split = (deploy.parts, deploy.split)
        if (deployment.parts, deployment.split) != split and not (deployment.parts and deployment.complete):
            # split otherwise (a longer cwd) while incomplete: count the parts of this split
            deployment.parts, deployment.split, deployment.parts_in = *split, set()
        deployment.parts_in.add(deploy.part)
        if deploy.coordinator:
            deployment.signers.update({APPL_START: deploy.coordinator, APPL_END: deploy.coordinator})
        changed = False
        requests: list[Request] = []
        for info, wanted in built:
            changed |= deployment.jobs.get(info.job) != info
            deployment.add(info)
            for registration in wanted:
                key = f"{info.workflow} {info.version} {registration.command} {info.job}"
                if key not in self.wanted:
                    deployment.keys.add(key)
                    self.wanted[key] = registration
                    self.owners[key] = (info.workflow, info.version, info.job)
                    requests.append(Request(key, registration))
        requests.sort(key=lambda request: request.registration.command != "ADVERTISE")
        if not changed and not requests:
            return "UNCHANGED", []
        return "OK", [*requests, *self._starts(control.workflow)]

    def _deployment(self, workflow: str, version: str) -> Deployment:
        """The deployment of (workflow, version), created when its first envelope arrives."""
        if (workflow, version) not in self.deployments:
            self._installs += 1
            self.deployments[workflow, version] = Deployment(workflow, version, self._installs)
        return self.deployments[workflow, version]

    def _remove(self, workflow: str, version: str) -> list[Effect]:
        deployment = self.deployments.pop((workflow, version))
        for key in deployment.keys:
            self.wanted.pop(key, None)
            self.owners.pop(key, None)
        log.info("removed %s version %s", workflow, version)
        return [Withdraw(key) for key in sorted(deployment.keys)] + self._starts(workflow)

    def _starts(self, workflow: str) -> list[Effect]:
        """Keep the workflow's APPL_START subscription while any version of it is deployed."""
        key = f"{workflow} starts"
        deployed = any(w == workflow for w, _ in self.deployments)
        if deployed and key not in self.wanted:
            self.wanted[key] = Registration("SUBSCRIBE", filter=start_subscription(workflow))
            self.owners[key] = (workflow, "", APPL_START)
            return [Request(key, self.wanted[key])]
        if not deployed and key in self.wanted:
            del self.wanted[key], self.owners[key]
            return [Withdraw(key)]
        return []

    def current(self, workflow: str) -> str | None:
        """The version new generations of ``workflow`` start on: the last one deployed here, all
        of its parts in. A DEPLOY's version is current even without APPL_START here: the agent was
        the coordinator of an older one, and the new version's coordinator starts generations now
        (both would, each on its version). Of versions deployed by the per-job commands, only one
        whose APPL_START is installed: the older version starts generations until then. Never a
        retired version; None when no other is deployed."""
        versions = [
            d
            for (w, v), d in self.deployments.items()
            if w == workflow and d.complete and (w, v) not in self.retired
        ]
        starting = [d for d in versions if d.ends_here or APPL_START in d.jobs] or versions
        return max(starting, key=lambda d: d.order).version if starting else None

    def _collect(self, workflow: str) -> list[Effect]:
        """Drop the older versions of ``workflow`` that no unfinished generation runs on, and the
        retired ones (complete or not) once none runs on them.

        Called at APPL_END once a generation of the current version has ended: the coordinator
        published its APPL_START after those of every older generation, so by then this agent has
        seen (through its APPL_START subscription) every generation still running on an older one."""
        current = self.current(workflow)
        used = {g.version for (w, _), g in self.generations.items() if w == workflow}
        old = [
            v
            for (w, v), d in self.deployments.items()
            if w == workflow and v != current and v not in used and (d.complete or (w, v) in self.retired)
        ]  # (not a newer one whose parts are still coming, unless retired)
        self.retired -= {(workflow, v) for v in old}
        return [e for v in old for e in self._remove(workflow, v)] + self._starts(workflow)

    def _retiring(self, workflow: str) -> bool:
        return any(w == workflow for w, _ in self.retired)

    # deliveries -----------------------------------------------------------------------------

    def _delivery(self, key: str, publications: tuple[Publication, ...], now: float) -> list[Effect]:
        owner = self.owners.get(key)
        if owner is None:
            return []  # withdrawn meanwhile
        if self.wanted[key].command == "SUBSCRIBE":
            return [e for p in publications for e in self._status(p, now)]
        workflow, version, job = owner
        info = self.deployments[workflow, version].jobs.get(job)
        if info is None:
            log.warning("%s %s fired before its JOBINFO arrived: ignored", workflow, job)
            return []
        return self._fired(info, publications, now)

    def _fired(self, info: JobInfo, publications: tuple[Publication, ...], now: float) -> list[Effect]:
        gid = next((p.get("GID") for p in publications), None)
        if not isinstance(gid, str) or (info.workflow, gid) in self.ended:
            return []
        try:
            check_gid(gid)  # it names the folder of the run logs; anyone may publish a Trigger
        except ValueError as error:
            self._refuse_firing(info, str(error), now)
            return []
        misshapen = _misshapen(info, gid, publications)
        if misshapen is not None:
            self._refuse_firing(info, misshapen, now)
            return []
        unsigned = self._unsigned(publications, info.agents, now)
        if unsigned is not None:
            self._refuse_firing(info, unsigned.reason, now, unsigned.who)
            return []
        versions = {p.get("version") for p in publications if p.cls == JOBSTATUS}
        if info.job == APPL_START:
            if info.version != self.current(info.workflow):
                return []  # a generation starts on the latest version only
        elif versions != {info.version}:
            return []  # this generation runs on another version
        elif not (deployment := self.deployments[info.workflow, info.version]).complete:
            parts = f"{len(deployment.parts_in)} of its {deployment.parts} parts"
            self._refuse_firing(info, f"version {info.version} has only {parts} here", now)
            return []
        generation = self.generations.setdefault(
            (info.workflow, gid), GenerationState(info.version, since=now)
        )
        if generation.version is None:
            generation.version = info.version
        if info.job in generation.jobs:
            return []  # a duplicate firing
        statuses = {str(p.get("jobname")): p for p in publications if p.cls == JOBSTATUS}
        generation.cancelled_upstream |= any(p.get("cancelled") == 1 for p in statuses.values())
        upstream = failures(statuses.values())
        if info.job == APPL_END:  # DEPLOY's: the end jobs' statuses came
            assert info.graph is not None
            status, detail = end_of(info.graph, upstream)
            if generation.halted:
                status, detail = CANCELLED, "; ".join(part for part in (NOT_RUN, detail) if part)
            generation.ended = True
            return self._report(info, gid, status, detail, now)
        reason = blocked(info.after, statuses)
        if reason is not None:
            return self._report(info, gid, NORUN, f"skipped: {reason}", now, upstream, skipped=True)
        try:
            date = firing_date(publications)
        except ValueError as error:
            return self._report(info, gid, FAILURE, str(error), now, upstream)
        self._outcome(info.workflow, gid)["date"] = date.isoformat()
        if info.job == APPL_START:
            return self._report(info, gid, SUCCESS, f"trigger for {date.isoformat()}", now)
        # every status carries on the failures before it: APPL_END knows of them only that way
        if generation.halted:
            return self._report(info, gid, NORUN, NOT_RUN, now, upstream)
        if info.job in generation.reused:
            status, detail = generation.reused[info.job]
            return self._report(info, gid, status, detail, now, upstream)
        if not info.calendar.allows(date):
            detail = f"not scheduled on {date.strftime('%A')} {date}"
            return self._report(info, gid, NORUN, detail, now, upstream)
        generation.jobs[info.job] = "queued"
        run = Run(
            info.workflow,
            info.version,
            gid,
            info.job,
            1,
            info.command,
            info.cwd,
            date.isoformat(),
            info.timeout,
            " ".join(sorted(upstream)),
        )
        self.pending.append(Pending(run))
        return self._pump(now)

    def _unsigned(
        self, publications: tuple[Publication, ...], signers: dict[str, str], now: float
    ) -> Refusal | None:
        """Why ``publications`` may not be acted on, or None: a Trigger not signed by whom may
        start a generation, a status not signed by the agent of its job (``signers``: job ->
        agent). A broker can then only drop, delay or reorder what the agent acts on."""
        for publication in publications:
            try:
                if publication.cls == TRIGGER:
                    self.trust.admit_trigger(publication, now, self.forget_after)
                elif publication.cls == JOBSTATUS:
                    job = str(publication.get("jobname"))
                    self.trust.admit_status(publication, now, signers.get(job))
            except Refusal as refusal:
                self.refused[refusal.kind] += 1
                what = f"{publication.cls} {publication.get('jobname', '')}".rstrip()
                return Refusal(refusal.kind, refusal.who, f"{what} from {refusal.who}: {refusal.reason}")
        return None

    def _refuse_firing(self, info: JobInfo, reason: str, now: float, signer: str = "") -> None:
        self._ignore("firing", f"{info.workflow} {info.job}", reason, now, signer)

    def _ignore(self, what: str, of: str, reason: str, now: float, signer: str = "") -> None:
        """Count a firing or a status not acted on, and log it as :meth:`_refuse` does an envelope:
        once per workflow and signer of what was refused, then once a minute."""
        self.refused[what] += 1
        unlogged = self._refusals.admit(f"{what} {of.split()[0]} {signer}", now)
        if unlogged is not None:
            log.warning(
                "ignored a %s of %s: %s (%d %ss refused%s)",
                what,
                of,
                reason,
                self.refused[what],
                what,
                f", {unlogged} not logged since the last" if unlogged else "",
            )

    def _status(self, publication: Publication, now: float) -> list[Effect]:
        """A JOBSTATUS from a plain subscription: a start, an end, or (coordinator) any status."""
        workflow, gid, job = (publication.get(name) for name in ("applname", "GID", "jobname"))
        status, version = publication.get("status"), publication.get("version")
        if not all(isinstance(x, str) for x in (workflow, gid, job, status, version)):
            return []
        assert isinstance(workflow, str) and isinstance(gid, str) and isinstance(job, str)
        assert isinstance(status, str) and isinstance(version, str)
        deployment = self.deployments.get((workflow, version))
        if deployment is None:
            return []  # a version without a job here (this agent was left out of it), or made up
        if self.trust.ca is not None and deployment.signers and job not in deployment.signers:
            self._ignore(
                "status", f"{workflow} {job}", f"{job} is no job whose status this agent follows", now
            )
            return []
        unsigned = self._unsigned((publication,), deployment.signers, now)
        if unsigned is not None:
            self._ignore("status", f"{workflow} {job}", unsigned.reason, now, unsigned.who)
            return []
        if job == APPL_END:
            return self._forget(workflow, gid, version, now)
        if (workflow, gid) in self.ended:
            return []
        if job == APPL_START:
            self.generations.setdefault((workflow, gid), GenerationState(since=now)).version = version
        generation = self.generations.get((workflow, gid))
        if generation is None or generation.version != version:
            return []
        generation.statuses.setdefault(job, status)
        generation.cancelled_upstream |= publication.get("cancelled") == 1
        return self._end_if_over(workflow, gid, generation, now)

    def _end_if_over(self, workflow: str, gid: str, generation: GenerationState, now: float) -> list[Effect]:
        """Coordinator: publish APPL_END once :func:`decide_end` says the generation is over."""
        assert generation.version is not None
        deployment = self.deployments.get((workflow, generation.version))
        info = deployment.jobs.get(APPL_END) if deployment else None
        if info is None or info.graph is None or info.after or generation.ended:
            return []  # (a DEPLOY's APPL_END, with the end jobs as ``after``, fires as a composite)
        over = decide_end(info.graph, generation.statuses)
        if over is None:
            return []
        generation.ended = True
        status, detail = over
        if generation.halted:
            status, detail = CANCELLED, "; ".join(part for part in (NOT_RUN, detail) if part)
        end = self._publication(info.workflow, info.version, APPL_END, gid, status, detail, 0, now)
        return [Emit(end)]

    def _forget(self, workflow: str, gid: str, version: str, now: float) -> list[Effect]:
        """APPL_END: forget the generation (its queued runs too), then maybe an old version."""
        if (workflow, gid) in self.ended:
            return []
        self._end(workflow, gid, now)
        current = self.current(workflow)
        if current is not None:
            latest = self.deployments[workflow, current]
            latest.ended = latest.ended or version == current
            if latest.ended:
                return self._collect(workflow)
        return self._collect(workflow) if self._retiring(workflow) else []

    def _end(self, workflow: str, gid: str, at: float) -> list[Pending]:
        """Drop the generation and its queued runs (returned), and remember it ended ``at``."""
        self.generations.pop((workflow, gid), None)
        dropped = [p for p in self.pending if (p.run.workflow, p.run.gid) == (workflow, gid)]
        self.pending = [p for p in self.pending if (p.run.workflow, p.run.gid) != (workflow, gid)]
        self.ended[workflow, gid] = at
        while len(self.ended) > MAX_ENDED:  # memory and snapshot stay bounded at any rate
            self.ended.popitem(last=False)
        return dropped

    def _sweep(self, now: float) -> list[Effect]:
        """Forget what is older than ``forget_after``: ended generations (a firing of one is then
        new), and generations whose APPL_END never came (lost: they would stay in memory, in the
        journal's snapshot and keep their run logs for ever), unless a run of theirs still runs;
        then the versions of retired workflows that only forgotten generations held.

        Once per minute of ``now`` and with the minute's cutoff, so that replaying the journal,
        which leaves out the ticks that changed nothing else, forgets the same at the same events."""
        minute = now // SWEEP_EVERY
        if minute <= self._swept:
            return []
        self._swept = minute
        start = minute * SWEEP_EVERY
        cutoff = start - self.forget_after
        expired = []
        for key, at in self.ended.items():  # oldest first
            if at is None:
                self.ended[key] = start
            elif at < cutoff:
                expired.append(key)
            else:
                break
        for key in expired:
            del self.ended[key]
        busy = {(r.workflow, r.gid) for r in self.running.values()}
        forgotten: set[str] = set()
        for (workflow, gid), generation in list(self.generations.items()):
            if generation.since is None:
                generation.since = start
            elif generation.since < cutoff and (workflow, gid) not in busy:
                dropped = self._end(workflow, gid, start)
                forgotten.add(workflow)
                log.warning(
                    "forgot %s %s: not seen to end within %g days%s",
                    workflow,
                    gid,
                    self.forget_after / DAY,
                    f" ({len(dropped)} queued runs dropped)" if dropped else "",
                )
        return [e for workflow in sorted(filter(self._retiring, forgotten)) for e in self._collect(workflow)]

    # runs -----------------------------------------------------------------------------------

    def _pump(self, now: float) -> list[Effect]:
        """Start due runs, oldest first, up to ``max_jobs`` at once."""
        effects: list[Effect] = []
        for pending in list(self.pending):
            if len(self.running) >= self.max_jobs:
                break
            if pending.at is not None and pending.at > now:
                continue
            self.pending.remove(pending)
            run = pending.run
            self.running[run.workflow, run.gid, run.job] = run
            self._mark(run, "running")
            effects.append(Start(run))
        return effects

    def _finished(self, run: Run, result: Result, now: float) -> list[Effect]:
        if self.running.get((run.workflow, run.gid, run.job)) != run:
            return []
        if not result.ok:
            return self._failed(run, result, now)
        del self.running[run.workflow, run.gid, run.job]
        return self._done(run, SUCCESS, result, now) + self._pump(now)

    def _lost(self, run: Run, now: float) -> list[Effect]:
        if self.running.get((run.workflow, run.gid, run.job)) != run:
            return []
        del self.running[run.workflow, run.gid, run.job]
        return self._done(run, FAILURE, Result(False, LOST, now, 0.0), now) + self._pump(now)

    def _failed(self, run: Run, result: Result, now: float) -> list[Effect]:
        del self.running[run.workflow, run.gid, run.job]
        generation = self.generations.get((run.workflow, run.gid))
        if generation is not None and generation.halted:  # stopped, or failed meanwhile: no retry
            return self._done(
                run, FAILURE, replace(result, detail=f"{NOT_RUN}: {result.detail}"), now
            ) + self._pump(now)
        retries = self._retries(run)
        if run.attempt <= retries:
            delay = min(self.backoff * 2 ** (run.attempt - 1), 60.0)
            log.info(
                "%s %s %s attempt %d failed (%s): retry in %.1f s",
                run.workflow,
                run.gid,
                run.job,
                run.attempt,
                result.detail,
                delay,
            )
            self.pending.append(Pending(replace(run, attempt=run.attempt + 1), now + delay))
            self._mark(run, "waiting")
            return self._pump(now)
        return self._done(run, FAILURE, result, now) + self._pump(now)

    def _retries(self, run: Run) -> int:
        deployment = self.deployments.get((run.workflow, run.version))
        info = deployment.jobs.get(run.job) if deployment else None
        return info.retries if info else 0

    def _done(self, run: Run, status: str, result: Result, now: float) -> list[Effect]:
        self._mark(run, "done")
        publication = self._publication(
            run.workflow,
            run.version,
            run.job,
            run.gid,
            status,
            result.detail,
            attempt=run.attempt,
            started=result.started,
            duration=result.duration,
            failed=[*run.upstream.split(), *([run.job] if status == FAILURE else [])],
        )
        return [Emit(publication), *self._over_here(run.workflow, run.gid, now)]

    def _mark(self, run: Run, state: str) -> None:
        generation = self.generations.get((run.workflow, run.gid))
        if generation is not None:
            generation.jobs[run.job] = state

    def _report(
        self,
        info: JobInfo,
        gid: str,
        status: str,
        detail: str,
        now: float,
        upstream: Iterable[str] = (),
        skipped: bool = False,
    ) -> list[Effect]:
        """A status decided without running anything: APPL_START, APPL_END, NORUN, a skip, a bad
        trigger. ``upstream``: the failures the predecessors' statuses named."""
        generation = self.generations[info.workflow, gid]
        generation.jobs[info.job] = "done"
        failed = [*upstream, *([info.job] if status == FAILURE and info.job != APPL_END else [])]
        publication = self._publication(
            info.workflow,
            info.version,
            info.job,
            gid,
            status,
            detail,
            started=now,
            skipped=skipped,
            failed=failed,
        )
        if info.job == APPL_START:
            generation.statuses[APPL_START] = status
            return [Emit(publication), *self._end_if_over(info.workflow, gid, generation, now)]
        return [Emit(publication), *self._over_here(info.workflow, gid, now)]

    def _over_here(self, workflow: str, gid: str, now: float) -> list[Effect]:
        """A generation of a DEPLOY's version is over here once every job of this agent has
        published its status in it (each job publishes one in every generation): this agent hears
        no APPL_END, which would cost a message to every agent in every generation."""
        generation = self.generations.get((workflow, gid))
        if generation is None or generation.version is None:
            return []
        deployment = self.deployments.get((workflow, generation.version))
        if deployment is None or not deployment.ends_here or not deployment.complete:
            return []
        if len(generation.jobs) < len(deployment.jobs):  # one has not even started: no scan of
            return []  # them all at every job's end (quadratic in a 1,000-job workflow)
        if any(generation.jobs.get(job) != "done" for job in deployment.jobs):
            return []
        return self._forget(workflow, gid, generation.version, now)

    def _publication(
        self,
        workflow: str,
        version: str,
        job: str,
        gid: str,
        status: str,
        detail: str,
        attempt: int = 0,
        started: float = 0.0,
        duration: float = 0.0,
        skipped: bool = False,
        failed: list[str] | None = None,
    ) -> Publication:
        generation = self.generations.get((workflow, gid))
        publication = job_status(
            workflow,
            job,
            gid,
            status,
            detail,
            version=version,
            agent=self.name,
            attempt=attempt,
            started=started,
            duration=duration,
            skipped=skipped,
            failed=failed or (),
            cancelled=generation is not None and generation.halted,
        )
        record = {name: publication[name] for name in ("status", "detail", "attempt", "started", "duration")}
        if skipped:  # kept only when set: a record per job for 500 generations is the snapshot's bulk
            record["skipped"] = 1
        self._outcome(workflow, gid)["jobs"][job] = record
        return publication

    def _outcome(self, workflow: str, gid: str) -> dict[str, Any]:
        """The outcome record of a generation, made (and the oldest dropped) on first use."""
        record = self.outcomes.get((workflow, gid))
        if record is None:
            record = self.outcomes[workflow, gid] = {"date": None, "jobs": {}}
            while len(self.outcomes) > MAX_OUTCOMES:
                self.outcomes.popitem(last=False)
        return record

    # cancel and rerun -------------------------------------------------------------------------

    def _operate(self, control: Control, now: float) -> tuple[str, str, list[Effect]]:
        """CANCEL or RERUN of a generation: the acknowledgement's result and detail, and effects."""
        data = decode_content(control.content)
        gid = data.get("gid")
        if not isinstance(gid, str) or not gid:
            raise ValueError(f"{control.command} needs a gid")
        check_gid(gid)
        if control.command == CANCEL:
            return self._cancel(control.workflow, gid, now)
        new, reuse = data.get("new"), data.get("reuse")
        if not isinstance(new, str) or not new or new == gid:
            raise ValueError("RERUN needs a new gid, other than the gid it reruns")
        check_gid(new)
        if not isinstance(reuse, list) or not all(isinstance(job, str) for job in reuse):
            raise ValueError("RERUN needs reuse, a list of job names")
        return self._rerun(control.workflow, gid, new, reuse, now)

    def _cancel(self, workflow: str, gid: str, now: float) -> tuple[str, str, list[Effect]]:
        """Record the cancellation (the envelope is in the journal), drop the generation's queued
        runs (NORUN; FAILURE for one waiting for a retry) and stop its running ones. Jobs that fire
        later publish NORUN; the coordinator ends it CANCELLED."""
        if (workflow, gid) in self.ended:
            return "UNCHANGED", f"generation {gid} is over", []
        seen = (workflow, gid) in self.generations
        generation = self.generations.setdefault((workflow, gid), GenerationState(since=now))
        if generation.cancelled:
            return "UNCHANGED", f"generation {gid} was cancelled already", []
        generation.cancelled = True
        queued = [p for p in self.pending if (p.run.workflow, p.run.gid) == (workflow, gid)]
        self.pending = [p for p in self.pending if p not in queued]
        effects: list[Effect] = []
        for pending in queued:
            status = NORUN if pending.at is None else FAILURE
            detail = NOT_RUN if pending.at is None else f"{NOT_RUN} before attempt {pending.run.attempt}"
            effects += self._done(pending.run, status, Result(False, detail, now, 0.0), now)
        stopping = [run for run in self.running.values() if (run.workflow, run.gid) == (workflow, gid)]
        effects += [Stop(run) for run in stopping]
        if not seen:
            return "OK", f"generation {gid} not seen here yet: its jobs will not run", effects
        return "OK", f"{len(stopping)} running stopped, {len(queued)} queued not run", effects

    def _rerun(
        self, workflow: str, gid: str, new: str, reuse: list[str], now: float
    ) -> tuple[str, str, list[Effect]]:
        """Generation ``new`` republishes the outcomes ``gid`` had here for the ``reuse`` jobs
        (those not downstream of the job rerun from, and not skipped in ``gid``) instead of
        running them; ERROR, naming them, if this agent has no outcome of some it hosts."""
        known = self.generations.get((workflow, new))
        if known is not None and known.rerun_of == gid:
            return "UNCHANGED", f"{new} reruns {gid} already", []
        if known is not None or (workflow, new) in self.ended or (workflow, new) in self.outcomes:
            return "ERROR", f"generation {new} exists", []
        recorded = self.outcomes.get((workflow, gid), {}).get("jobs", {})
        hosted = {job for (w, _), d in self.deployments.items() if w == workflow for job in d.jobs}
        lost = sorted(job for job in reuse if job in hosted and job not in recorded)
        if lost:  # forgotten (MAX_OUTCOMES) or never run here: it would run again, not be reused
            return (
                "ERROR",
                f"{self.name} has no outcome of {', '.join(lost)} in {gid} to reuse (it keeps those"
                f" of its last {MAX_OUTCOMES} generations): rerun {gid} whole, or from an earlier job",
                [],
            )
        reused = {
            job: [str(recorded[job]["status"]), f"reused from {gid}: {recorded[job]['detail']}"[:500]]
            for job in reuse
            if job in recorded
        }
        self.generations[workflow, new] = GenerationState(since=now, rerun_of=gid, reused=reused)
        return "OK", f"{len(reused)} outcomes of {gid} reused here", []


def _misshapen(info: JobInfo, gid: str, publications: tuple[Publication, ...]) -> str | None:
    """Why a firing is not what the job's condition asks for, or None: every publication of the
    job's workflow and generation, one Trigger (none for APPL_END, which fires on the end jobs),
    and one status of each job it waits for, no more. Brokers join the condition; one that makes
    up a firing (a job's status left out, another generation's, another workflow's Trigger) must
    not make a job run early, whatever each publication's signature."""
    for publication in publications:
        if publication.get("applname") != info.workflow or publication.get("GID") != gid:
            return f"a {publication.cls} of {publication.get('applname')} {publication.get('GID')} in it"
    triggers = sum(p.cls == TRIGGER for p in publications)
    statuses = sorted(str(p.get("jobname")) for p in publications if p.cls == JOBSTATUS)
    if triggers + len(statuses) != len(publications):
        return "a publication that is neither a Trigger nor a status in it"
    if triggers != (0 if info.job == APPL_END else 1):
        return f"{triggers} Triggers in it"
    wanted = sorted(job for job, _ in info.after)
    if statuses != wanted:
        return f"the statuses of {', '.join(statuses) or 'no job'}, not of {', '.join(wanted) or 'none'}"
    return None
