"""The workflow model: immutable Workflow, Job and After, checked as a whole.

A Workflow checks itself, all its jobs and its graph when it is constructed, whether it was read
from XML or built in code, and raises one :class:`DefinitionError` that lists *every* problem. Jobs
and Afters are therefore plain values on their own: most of their rules (an unknown predecessor, a
duplicate name) only make sense inside a workflow, and checking them together is what lets
``wfm validate`` report all problems of a file at once.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from wfm.workflow.checks import DEFAULT_PRIORITY, find_problems
from wfm.workflow.errors import DefinitionError
from workflow_messages import DAILY, weekday_words
from workflow_messages.conditions import Condition, Event, Wait
from workflow_messages.conditions import records as condition_records
from workflow_messages.named_calendars import NamedCalendar
from workflow_messages.overlap import Overlap
from workflow_messages.params import Param, records
from workflow_messages.pools import DEFAULT_LEASE, PoolDeclaration
from workflow_messages.standby import DEFAULT_TAKEOVER, parse_takeover

__all__ = ["After", "Event", "Job", "NamedCalendar", "Overlap", "Param", "Pool", "Wait", "Workflow"]


@dataclass(frozen=True, slots=True)
class After:
    """``<after job on>``: run after ``job`` ended in a way that ``on`` accepts."""

    job: str
    on: str = "success"
    line: int | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Pool:
    """``<pool name slots keeper lease>``: at most ``slots`` jobs naming it in ``pool=`` run at
    once, across every agent and every workflow that declares it. ``keeper`` is the agent that
    hands out its slots (None: the agent of the first job in the pool); ``lease`` how many seconds
    a holder's slot outlives the holder's silence (docs/workflows.md, Pools)."""

    name: str
    slots: int
    keeper: str | None = None
    lease: float = DEFAULT_LEASE
    line: int | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Job:
    """``<job>``: a command that ``agent`` runs on its ``weekdays`` (0 = Monday; the XML
    attribute ``schedule``).

    ``timeout`` is in seconds (None: no limit); ``retries`` counts extra attempts after a failure;
    ``priority`` (0 to 9, 4 by default) is the quality of service of the job's statuses."""

    name: str
    agent: str
    command: str
    weekdays: frozenset[int] = DAILY
    timeout: float | None = None
    retries: int = 0
    after: tuple[After, ...] = ()
    line: int | None = field(default=None, compare=False)
    priority: int = DEFAULT_PRIORITY
    calendar: str | None = None  # the name of one of the workflow's calendars (``calendar="NAME"``)
    deadline: str | None = None  # when it must have ended (workflow_messages.deadlines)
    # ``<wait>``, ``<event>``: what else it waits for (workflow_messages.conditions)
    conditions: tuple[Condition, ...] = ()
    # an approval step (no command): the roles that may approve it (workflow_messages.approvals)
    approval: tuple[str, ...] = ()
    pool: str | None = None  # the name of one of the workflow's pools (``pool="NAME"``)
    # agents that take the job over when its own is gone for ``takeover`` (workflow_messages.standby)
    standby: tuple[str, ...] = ()
    takeover: str | None = None  # as written (``10m``); None: DEFAULT_TAKEOVER

    def __post_init__(self) -> None:
        object.__setattr__(self, "weekdays", frozenset(self.weekdays))
        object.__setattr__(self, "standby", tuple(self.standby))
        object.__setattr__(self, "after", tuple(self.after))
        object.__setattr__(self, "conditions", tuple(self.conditions))

    def definition(self) -> dict[str, Any]:
        """What the job means, as JSON-ready data (no line): the basis of versions and JOBINFO."""
        return {
            "job": self.name,
            "agent": self.agent,
            "command": self.command,
            "schedule": weekday_words(self.weekdays),
            "timeout": None if self.timeout is None else float(self.timeout),  # 600 and 600.0: one version
            "retries": self.retries,
            "after": [[after.job, after.on] for after in self.after],
            # only when set: a definition without it keeps the version it had before priorities
            **({"priority": self.priority} if self.priority != DEFAULT_PRIORITY else {}),
            **({"calendar": self.calendar} if self.calendar is not None else {}),  # likewise
            **({"deadline": self.deadline} if self.deadline is not None else {}),
            **({"conditions": condition_records(self.conditions)} if self.conditions else {}),  # likewise
            **({"approval": list(self.approval)} if self.approval else {}),
            **({"pool": self.pool} if self.pool is not None else {}),
            **({"standby": list(self.standby), "takeover": self.takeover_seconds()} if self.standby else {}),
        }

    def takeover_seconds(self) -> float:
        """How long the job's agent may be gone before a standby takes the job over."""
        if self.takeover is None:
            return DEFAULT_TAKEOVER
        try:
            return parse_takeover(self.takeover)
        except ValueError:
            return DEFAULT_TAKEOVER  # (a problem of the definition, said by its checks)


@dataclass(frozen=True, slots=True)
class Workflow:
    """``<workflow>``: named jobs in document order, and the run parameters it declares
    (``<param>``, :mod:`workflow_messages.params`). ``source`` is the absolute path of the file it
    was read from (None when built in code); it and the line numbers take no part in equality."""

    name: str
    jobs: tuple[Job, ...]
    source: str | None = field(default=None, compare=False)
    line: int | None = field(default=None, compare=False)
    params: tuple[Param, ...] = ()
    calendars: tuple[NamedCalendar, ...] = ()  # ``<calendar>``: :mod:`workflow_messages.named_calendars`
    deadline: str | None = None  # when APPL_END must have come (workflow_messages.deadlines)
    # ``max-active`` and ``overlap``: generations at once (None: unlimited), workflow_messages.overlap
    overlap: Overlap | None = None
    pools: tuple[Pool, ...] = ()  # ``<pool>``: concurrency limits its jobs name in ``pool=``

    def __post_init__(self) -> None:
        object.__setattr__(self, "jobs", tuple(self.jobs))
        object.__setattr__(self, "params", tuple(self.params))
        object.__setattr__(self, "calendars", tuple(self.calendars))
        object.__setattr__(self, "pools", tuple(self.pools))
        problems = find_problems(self)
        if problems:
            raise DefinitionError(problems)

    @property
    def agents(self) -> tuple[str, ...]:
        """The agents in the order their first job appears."""
        return tuple(dict.fromkeys(job.agent for job in self.jobs))

    @property
    def coordinator(self) -> str:
        """The agent of the first start job: it runs the virtual jobs APPL_START and APPL_END."""
        return next(job.agent for job in self.jobs if not job.after)

    def keeper(self, pool: Pool) -> str:
        """The agent that keeps ``pool``'s slots: its ``keeper``, or the agent of its first job."""
        if pool.keeper is not None:
            return pool.keeper
        return next((job.agent for job in self.jobs if job.pool == pool.name), "")

    def pool_declaration(self, pool: Pool) -> PoolDeclaration:
        """``pool`` as the agents get it: its keeper named, and the agent of each job in it."""
        jobs = {job.name: job.agent for job in self.jobs if job.pool == pool.name}
        return PoolDeclaration(pool.name, pool.slots, self.keeper(pool), pool.lease, jobs)

    def version(self) -> str:
        """A short sha256 of the canonical definition: equal definitions, equal versions, however
        the XML was laid out; any change of meaning gives a new one."""
        definition: dict[str, Any] = {"workflow": self.name, "jobs": [job.definition() for job in self.jobs]}
        if self.params:  # only when declared: a workflow without keeps the version it had
            definition["params"] = records(self.params)
        if self.calendars:  # likewise
            definition["calendars"] = [calendar.record() for calendar in self.calendars]
        if self.deadline is not None:  # likewise
            definition["deadline"] = self.deadline
        if self.overlap is not None:  # likewise
            definition["overlap"] = self.overlap.record()
        if self.pools:  # likewise
            definition["pools"] = [self.pool_declaration(pool).record() for pool in self.pools]
        canonical = json.dumps(
            definition,
            sort_keys=True,
            separators=(",", ":"),
        )
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]
