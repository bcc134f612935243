"""Checking what arrives from outside: AGENT_CTL envelopes, DEPLOY and JOBINFO, the Trigger's date.

Every check raises ``ValueError`` with one line saying what is wrong, so the agent can acknowledge a
bad envelope with ERROR (and report a bad trigger as a failed job) instead of crashing.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

from broker.language import Composite, Filter, Publication, parse_composite, parse_filter
from broker.language.model import Policy
from workflow_messages import (
    ACCEPTS,
    AGENT_CTL,
    APPL_END,
    APPL_START,
    TRIGGER,
    Calendar,
    check_name,
    end_condition,
    envelope_digest,
    generation_end,
    job_condition,
    parse_weekdays,
    status_advertisement,
    trigger_atom,
    trigger_date,
)
from workflow_messages.approvals import parse_approval
from workflow_messages.conditions import Condition, read_records
from workflow_messages.deadlines import parse_deadline
from workflow_messages.named_calendars import NamedCalendar, read_record
from workflow_messages.operations import decode_content
from workflow_messages.overlap import Overlap, read_overlap
from workflow_messages.params import Param, parse_declarations
from workflow_messages.pools import PoolDeclaration, read_declarations
from workflow_messages.standby import MAX_TAKEOVER, MIN_TAKEOVER

__all__ = [
    "COMMANDS",
    "Control",
    "DeployPart",
    "JobInfo",
    "Registration",
    "ack_fields",
    "firing_date",
    "parse_control",
    "parse_deploy",
    "parse_jobinfo",
    "parse_registration",
    "registrations",
]

COMMANDS = (
    "ADVERTISE",
    "SUBSCRIBE",
    "COMPOSITESUBSCRIBE",
    "JOBINFO",
    "DEPLOY",
    "UNDEPLOY",
    "CANCEL",
    "RERUN",
    "FACTS",  # what the history kept for a job's conditions (agents.conditions)
    "HOLD",
    "RELEASE",
    "APPROVE",
)


@dataclass(frozen=True, slots=True)
class Control:
    """An AGENT_CTL envelope addressed to this agent, its fields checked to be strings."""

    workflow: str
    version: str
    command: str
    job: str
    content: str


@dataclass(frozen=True, slots=True)
class JobInfo:
    """What JOBINFO or DEPLOY says about a job; ``graph`` only for APPL_END (the coordinator's).
    ``after`` is the job's predecessors and their ``on`` (for a DEPLOY's APPL_END: the end jobs);
    ``agents`` the agent each of them is deployed on, whose signature their statuses must carry
    (empty from a deployer that did not say: then any agent may sign its own)."""

    workflow: str
    version: str
    job: str
    command: str = ""
    calendar: Calendar = field(default_factory=Calendar)  # the days the job runs on
    timeout: float | None = None
    retries: int = 0
    cwd: str | None = None
    virtual: bool = False
    graph: dict[str, list[list[str]]] | None = None
    after: tuple[tuple[str, str], ...] = ()
    agents: dict[str, str] = field(default_factory=dict)
    priority: int = 4  # of the job's statuses (``broker.messages.qos``)
    named: NamedCalendar | None = None  # its definition's ``calendar="NAME"``, if any
    deadline: str | None = None  # when it must have ended (APPL_END's: the generation's), if ever
    conditions: tuple[Condition, ...] = ()  # on other workflows and events (workflow_messages.conditions)
    overlap: Overlap | None = None  # APPL_START's: generations at once (None: unlimited)
    approval: tuple[str, ...] = ()  # an approval step: the roles that may approve it (no command)
    pool: str | None = None  # the pool whose slot its runs take (``DeployPart.pools``), if any
    # standby agents (agents.standby): who may take the job over, after how many seconds of its
    # agent's link being down; ``primary``: on a standby's copy, the job's own agent
    standby: tuple[str, ...] = ()
    takeover: float = 0.0
    primary: str | None = None
    # APPL_START's and APPL_END's of a coordinator whose first start job has standbys: that job,
    # whose takeover they go with (its standbys, its takeover, its key at the broker)
    goes_with: str | None = None


@dataclass(frozen=True, slots=True)
class DeployPart:
    """A DEPLOY envelope: ``jobs``, part ``part`` of the ``parts`` its agent's jobs came in,
    split as ``split`` says ("" for a whole one, or from a deployer that did not say)."""

    part: int
    parts: int
    jobs: list[JobInfo]
    split: str = ""
    coordinator: str = ""  # the agent that signs APPL_START and APPL_END ("" if not said)
    params: tuple[Param, ...] = ()  # the run parameters the workflow declares (none if not said)
    pools: tuple[PoolDeclaration, ...] = ()  # the pools the workflow declares (none if not said)


@dataclass(frozen=True, slots=True)
class Registration:
    """What an ADVERTISE, SUBSCRIBE or COMPOSITESUBSCRIBE envelope asks the agent to keep registered
    at its broker, re-issued after every reconnection (unlike :class:`broker.client.Subscription`,
    the handle one connection returns for one subscription)."""

    command: str
    filter: Filter | None = None
    composite: Composite | None = None
    clear: Filter | None = None
    policy: Policy = Policy.CHRONICLE  # a composite's: which waiting matches a firing uses up
    priority: int = 4  # a composite's: its firings' (a job's condition: the job's ``JobInfo.priority``)


def ack_fields(publication: Publication) -> dict[str, str]:
    """The envelope fields an acknowledgement echoes, whatever their type."""
    fields = {name: str(publication.get(name, "")) for name in ("applname", "version", "jobname", "command")}
    return fields | {"digest": envelope_digest(publication)}


def parse_control(publication: Publication, agent: str) -> Control:
    if publication.cls != AGENT_CTL:
        raise ValueError(f"not an AGENT_CTL envelope: class {publication.cls}")
    if publication.get("agentname") != agent:
        raise ValueError(f"addressed to {publication.get('agentname')!r}, not {agent!r}")
    values = {}
    for name in ("applname", "version", "command", "jobname", "content"):
        value = publication.get(name, "" if name == "content" else None)
        if not isinstance(value, str) or (not value and name != "content"):
            raise ValueError(f"the envelope needs a non-empty string {name}")
        values[name] = value
    if values["command"] not in COMMANDS:
        raise ValueError(f"unknown command {values['command']!r} (one of {', '.join(COMMANDS)})")
    return Control(
        values["applname"], values["version"], values["command"], values["jobname"], values["content"]
    )


def parse_registration(control: Control) -> Registration:
    """The filter or composite of an ADVERTISE, SUBSCRIBE or COMPOSITESUBSCRIBE envelope."""
    if control.command != "COMPOSITESUBSCRIBE":
        return Registration(control.command, filter=parse_filter(control.content))
    data = decode_content(control.content)
    composite, clear = data.get("composite"), data.get("clear")
    if not isinstance(composite, str) or not isinstance(clear, str | None):
        raise ValueError("COMPOSITESUBSCRIBE needs a string composite and an optional string clear")
    if data.get("job") != control.job:
        raise ValueError(
            f"COMPOSITESUBSCRIBE is for job {data.get('job')!r}, the envelope for {control.job!r}"
        )
    clear_filter = None if clear is None else parse_filter(clear, allow_variables=True)
    return Registration(control.command, composite=parse_composite(composite), clear=clear_filter)


def parse_jobinfo(control: Control) -> JobInfo:
    data = decode_content(control.content)
    if (data.get("workflow"), data.get("version"), data.get("job")) != (
        control.workflow,
        control.version,
        control.job,
    ):
        raise ValueError("JOBINFO's workflow, version and job differ from the envelope's")
    return _jobinfo(control.workflow, control.version, control.job, data)


def parse_deploy(control: Control) -> DeployPart:
    """The jobs of a DEPLOY envelope (:func:`wfm.workflow.translate`), each checked as JOBINFO is
    and its names as ``wfm validate`` checks them; APPL_END's ``after`` is made the end jobs of its
    graph, whose statuses end a generation. A content without ``part`` and ``parts`` is whole."""
    data = decode_content(control.content)
    if (data.get("workflow"), data.get("version")) != (control.workflow, control.version):
        raise ValueError("DEPLOY's workflow and version differ from the envelope's")
    check_name(control.workflow, "DEPLOY: workflow name")
    part, parts = data.get("part", 1), data.get("parts", 1)
    if (
        not all(isinstance(n, int) and not isinstance(n, bool) for n in (part, parts))
        or not 1 <= part <= parts
    ):
        raise ValueError(f"DEPLOY part {part!r} of {parts!r}: part must be an integer from 1 to parts")
    split = data.get("split", "")
    if not isinstance(split, str) or not re.fullmatch(r"[0-9a-f]{0,64}", split):
        raise ValueError(f"DEPLOY split {split!r}: it must be a hex digest")
    entries = data.get("jobs")
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise ValueError("DEPLOY needs a non-empty list of job objects")
    infos: list[JobInfo] = []
    for entry in entries:
        job = check_name(entry.get("job"), "DEPLOY: job name")
        if job in (info.job for info in infos):
            raise ValueError(f"DEPLOY names job {job!r} twice")
        try:
            info = _jobinfo(control.workflow, control.version, job, {"cwd": data.get("cwd"), **entry})
        except ValueError as error:
            raise ValueError(f"DEPLOY job {job!r}: {error}") from None
        if info.virtual != (job in (APPL_START, APPL_END)) or (job == APPL_END) != (info.graph is not None):
            raise ValueError(
                f"DEPLOY job {job!r}: only APPL_START and APPL_END are virtual, APPL_END has the graph"
            )
        for name in (
            *(pred for pred, _ in info.after),
            *(info.graph or ()),
            *(pred for edges in (info.graph or {}).values() for pred, _ in edges),
        ):
            check_name(name, f"DEPLOY job {job!r}: predecessor")
        if info.graph is not None:
            successors = {pred for edges in info.graph.values() for pred, _ in edges}
            info = replace(info, after=tuple((job, "always") for job in info.graph if job not in successors))
            if not info.after:  # empty, or every job after another: nothing would end a generation
                raise ValueError(f"DEPLOY job {job!r}: its graph has no end job")
        elif not info.virtual and not info.after:
            raise ValueError(f"DEPLOY job {job!r} runs after nothing (a start job runs after APPL_START)")
        infos.append(info)
    coordinator = data.get("coordinator", "")
    if not isinstance(coordinator, str):
        raise ValueError(f"DEPLOY coordinator {coordinator!r}: it must be an agent name")
    pools = read_declarations(data.get("pools"))
    for info in infos:
        if info.pool is not None and info.pool not in (pool.name for pool in pools):
            raise ValueError(f"DEPLOY job {info.job!r}: pool {info.pool!r} is not declared")
    params = parse_declarations(data.get("params"))
    return DeployPart(part, parts, infos, split, coordinator, params, pools)


def registrations(info: JobInfo, coordinator: str = "") -> list[Registration]:
    """What a job of a DEPLOY envelope has its agent register: the advertisement of its statuses,
    then the condition it fires on (:mod:`workflow_messages`), built as model objects whose
    constructors check every value as the parser would, rather than sent as text to parse; its
    join state is cleared by the ``coordinator``'s APPL_END (anyone's if not named)."""
    workflow, job = info.workflow, info.job
    if job == APPL_START:
        condition: Composite = trigger_atom(workflow)
    elif job == APPL_END:
        condition = end_condition(workflow, [pred for pred, _ in info.after])
    else:
        condition = job_condition(workflow, [pred for pred, _ in info.after])
    return [
        Registration("ADVERTISE", filter=status_advertisement(workflow, job)),
        # recent, not chronicle: a firing consumes nothing, so a status or Trigger that is not what
        # it claims (the agent refuses the firing: unsigned, signed by someone else) cannot use
        # up the Trigger or a real status; the real one fires again when it comes, and repeats
        # are duplicates the agent drops. Join state goes with the generation's APPL_END (clear).
        Registration(
            "COMPOSITESUBSCRIBE",
            composite=condition,
            clear=generation_end(workflow, coordinator),
            policy=Policy.RECENT,
            priority=info.priority,  # an urgent job's firing overtakes a backlog on its way
        ),
    ]


def _jobinfo(workflow: str, version: str, job: str, data: dict[str, Any]) -> JobInfo:
    """A job's definition (JOBINFO's content, or one entry of DEPLOY's) checked."""
    virtual = data.get("virtual", False) is True
    graph = data.get("graph")
    if graph is not None and not _is_graph(graph):
        raise ValueError("JOBINFO graph must map jobs to [[predecessor, on], ...]")
    agents = data.get("agents", {})
    if not isinstance(agents, dict) or not all(
        isinstance(name, str) and isinstance(agent, str) and agent for name, agent in agents.items()
    ):
        raise ValueError("JOBINFO agents must map job names to agent names")
    deadline = data.get("deadline")
    if deadline is not None:
        parse_deadline(deadline)  # ValueError: the envelope is refused
    if virtual:
        cwd = _cwd(data)
        overlap = read_overlap(data.get("overlap"))  # ValueError: the envelope is refused
        return JobInfo(
            workflow,
            version,
            job,
            virtual=True,
            graph=graph,
            cwd=cwd,
            agents=agents,
            deadline=deadline,
            overlap=overlap,
            **_standby(data),
            **_goes_with(data),
        )
    command, words, retries = data.get("command"), data.get("schedule", ["daily"]), data.get("retries", 0)
    timeout = data.get("timeout")
    approval = parse_approval(data.get("approval", []))
    if not isinstance(command, str) or bool(approval) == bool(command.strip()):
        raise ValueError("JOBINFO needs a non-empty command, or an empty one for an approval step")
    if not isinstance(words, list) or not all(isinstance(word, str) for word in words) or not words:
        raise ValueError("JOBINFO schedule must be a non-empty list of day words")
    if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 100:
        raise ValueError("JOBINFO retries must be an integer from 0 to 100")
    pool = data.get("pool")
    if pool is not None:
        check_name(pool, "JOBINFO pool")
    priority = data.get("priority", 4)
    if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 9:
        raise ValueError("JOBINFO priority must be an integer from 0 to 9")
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ValueError("JOBINFO timeout must be a positive finite number or null")
    after = data.get("after", [])
    if not _is_edges(after):
        raise ValueError(
            f"JOBINFO after must be [[predecessor, on], ...], each on one of {', '.join(ACCEPTS)}"
        )
    return JobInfo(
        workflow,
        version,
        job,
        command,
        Calendar(parse_weekdays(",".join(words))),
        None if timeout is None else float(timeout),
        retries,
        _cwd(data),
        after=tuple((pred, on) for pred, on in after),
        agents=agents,
        priority=priority,
        named=None if data.get("calendar") is None else read_record(data["calendar"]),
        deadline=deadline,
        conditions=read_records(data.get("conditions", [])),
        approval=approval,
        pool=pool,
        **_standby(data),
    )


def _standby(data: dict[str, Any]) -> dict[str, Any]:
    """A job's standby agents, its takeover and, on a standby's copy, its primary; {} if none."""
    standby, takeover, primary = data.get("standby", []), data.get("takeover"), data.get("primary")
    if not standby and primary is None:
        return {}
    if not isinstance(standby, list) or not standby:
        raise ValueError("JOBINFO standby must be a non-empty list of agent names")
    for name in standby:
        check_name(name, "JOBINFO standby")
    if (
        isinstance(takeover, bool)
        or not isinstance(takeover, int | float)
        or not MIN_TAKEOVER <= takeover <= MAX_TAKEOVER
    ):
        raise ValueError(f"JOBINFO takeover must be from {MIN_TAKEOVER:g} to {MAX_TAKEOVER:g} seconds")
    if primary is not None:
        check_name(primary, "JOBINFO primary")
    return {"standby": tuple(standby), "takeover": float(takeover), "primary": primary}


def _goes_with(data: dict[str, Any]) -> dict[str, Any]:
    """A virtual job's ``with``: the start job whose standbys and takeover it has; {} if none."""
    job = data.get("with")
    if job is None:
        return {}
    if not data.get("standby"):
        raise ValueError("JOBINFO with needs standby")
    return {"goes_with": check_name(job, "JOBINFO with")}


def firing_date(publications: tuple[Publication, ...]) -> dt.date:
    """The date of the Trigger among a firing's publications (its ``schedule``, ``YYYY.MM.DD``)."""
    for publication in publications:
        if publication.cls == TRIGGER:
            return trigger_date(str(publication.get("schedule")))
    raise ValueError("the firing holds no Trigger")


def _cwd(data: dict[str, Any]) -> str | None:
    cwd = data.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise ValueError("JOBINFO cwd must be a string")
    return cwd


def _is_graph(graph: object) -> bool:
    return isinstance(graph, dict) and all(_is_edges(edges) for edges in graph.values())


def _is_edges(edges: object) -> bool:
    """``[[predecessor, on], ...]``: non-empty names, each ``on`` one :data:`ACCEPTS` knows."""
    return isinstance(edges, list) and all(
        isinstance(edge, list)
        and len(edge) == 2
        and isinstance(edge[0], str)
        and edge[0] != ""
        and isinstance(edge[1], str)
        and edge[1] in ACCEPTS
        for edge in edges
    )
