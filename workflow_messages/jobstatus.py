"""JOBSTATUS: what an agent publishes when a job of a generation ends, and the filters and
composites that follow those statuses (the job conditions, the coordinator, the clean-up, the
monitor).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from broker.language import Atom, Composite, Filter, Predicate, Publication, Value, Var
from broker.language.model import combine
from broker.language.regex import REGEX
from workflow_messages._build import filter_of, text_value
from workflow_messages.deadlines import deadline_filter
from workflow_messages.jobstate import state_filter
from workflow_messages.names import ACCEPTS, APPL_END, APPL_START, GID, JOBSTATUS, TRIGGER
from workflow_messages.trigger import trigger_atom

__all__ = [
    "JobStatus",
    "blocked",
    "end_condition",
    "ended",
    "failures",
    "generation_end",
    "job_condition",
    "job_status",
    "monitor_subscriptions",
    "parse_job_status",
    "start_subscription",
    "status_advertisement",
]

STATUS_STRINGS = ("GID", "status", "detail", "version", "agentname", "failed", "signer", "signature", "date")
STATUS_NUMBERS = ("attempt", "started", "duration", "skipped", "cancelled", "sequence")


def status_advertisement(workflow: str, job: str) -> Filter:
    """What the agent of ``job`` advertises before it publishes the job's statuses: the fixed
    shape of docs/workflows.md (Messages) plus the version the generation runs on, the agent, the
    attempt, the start (epoch seconds) and the duration (seconds), so monitors need no side channel,
    and what the next jobs and APPL_END decide on: ``skipped`` (1: a NORUN for a branch not taken),
    ``failed`` (the jobs of the generation this status follows from that failed, see
    :func:`job_status`) and ``cancelled`` (1: published in a cancelled generation); with TLS, the
    agent signs each status (``sequence``, ``signer``, ``signature``: agents act on one only if the
    agent the job is deployed on signed it); ``date``, the generation's (its Trigger's, YYYY-MM-DD), for
    the jobs of other workflows that wait for it (:mod:`workflow_messages.conditions`)."""
    return filter_of(
        JOBSTATUS, {"applname": workflow, "jobname": job}, present=STATUS_STRINGS, numbers=STATUS_NUMBERS
    )


def job_status(
    workflow: str,
    job: str,
    gid: str,
    status: str,
    detail: str,
    *,
    version: str,
    agent: str,
    attempt: int = 0,
    started: float = 0.0,
    duration: float = 0.0,
    skipped: bool = False,
    failed: Iterable[str] = (),
    cancelled: bool = False,
    date: str = "",
) -> Publication:
    """A JOBSTATUS publication, fitting :func:`status_advertisement`. ``failed`` names the failed
    jobs upstream (the job itself too if ``status`` is FAILURE): carried from status to status, it
    tells the coordinator, which sees only the end jobs' statuses, which jobs failed anywhere.
    ``cancelled`` travels the same way: the status of a run a cancellation stopped may reach the
    next job's agent before that agent's own CANCEL does, and that job (an ``on="failure"``
    alert, say) must not run then either. ``date`` (YYYY-MM-DD, left out when "": a status
    decided before the Trigger's date was read) is the generation's, what another workflow's
    ``<wait>`` joins on: two workflows' generations share no gid."""
    values: dict[str, Value] = {
        "applname": workflow,
        "jobname": job,
        "GID": gid,
        "status": status,
        "detail": text_value(detail),
        "version": version,
        "agentname": agent,
        "attempt": attempt,
        "started": round(started, 3),
        "duration": round(duration, 3),
        "skipped": int(skipped),
        "failed": " ".join(sorted(set(failed))),
        "cancelled": int(cancelled),
    }
    if date:
        values["date"] = date
    return Publication(JOBSTATUS, values)


@dataclass(frozen=True, slots=True)
class JobStatus:
    """A JOBSTATUS read back (:func:`parse_job_status`): what agents and monitors decide on.
    ``version`` is None if the status does not say (the history holds statuses of older agents);
    ``started`` and ``duration`` likewise; ``attempt`` is 0 for a status published without
    running anything."""

    workflow: str
    job: str
    gid: str
    status: str
    detail: str = ""
    version: str | None = None
    attempt: int = 0
    started: float | None = None
    duration: float | None = None
    skipped: bool = False  # ``[skipped,1]``: a NORUN on a branch not taken
    cancelled: bool = False  # ``[cancelled,1]``: published in a cancelled generation


def parse_job_status(attributes: Mapping[str, Value]) -> JobStatus | None:
    """The job status ``attributes`` (a publication's, whose class the caller knows) carry, or
    None if they carry none: anyone may publish, so a status without a string workflow, job, GID
    and status is ignored rather than an error; a field of the wrong type reads as not given."""
    workflow, job, gid, status = (attributes.get(name) for name in ("applname", "jobname", "GID", "status"))
    if not (
        isinstance(workflow, str)
        and isinstance(job, str)
        and isinstance(gid, str)
        and isinstance(status, str)
    ):
        return None
    version = attributes.get("version")
    return JobStatus(
        workflow,
        job,
        gid,
        status,
        str(attributes.get("detail", "")),
        version if isinstance(version, str) else None,
        int(_number(attributes.get("attempt")) or 0),
        _number(attributes.get("started")),
        _number(attributes.get("duration")),
        attributes.get("skipped") == 1,
        attributes.get("cancelled") == 1,
    )


def _number(value: Value | None) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def job_condition(workflow: str, after: Iterable[str]) -> Composite:
    """``{ {P1 ended} & ... & {Pn ended} & {trigger} }``: each predecessor published a status, any
    status, in the generation of the trigger. Every job publishes one in every generation (a skip
    status, NORUN with ``skipped`` 1, for a branch not taken), so the condition always fires and the
    job's agent decides from the statuses whether the job runs or is skipped in turn
    (:func:`blocked`): a job after a failed one still ends, and so does the generation."""
    return combine("&", [*(ended(workflow, job) for job in after), trigger_atom(workflow)])


def end_condition(workflow: str, ends: Iterable[str]) -> Composite:
    """APPL_END's condition, as in the PADRES paper: every end job (one that no job waits for)
    published a status in the generation."""
    return combine("&", [ended(workflow, job) for job in ends])


def ended(workflow: str, job: str) -> Atom:
    """``{[class,eq,JOBSTATUS],[applname,eq,W],[jobname,eq,J],[GID,eq,$S$X],[status,isPresent,'']}``:
    one atom rather than an ``||`` of the three statuses: one subscription to route, not three."""
    equal: dict[str, Value | Var] = {"applname": workflow, "jobname": job, "GID": GID}
    return Atom(filter_of(JOBSTATUS, equal, present=("status",)))


def blocked(after: Iterable[tuple[str, str]], statuses: Mapping[str, Publication]) -> str | None:
    """Why a job whose predecessors published ``statuses`` (by job) must be skipped, or None if it
    may run: a predecessor was skipped, or ended with a status its ``on`` does not accept."""
    for job, on in after:
        status = statuses.get(job)
        if status is None:
            continue
        if status.get("skipped") == 1:
            return f"{job} was skipped"
        if status.get("status") not in ACCEPTS[on]:
            return f"{job} ended {status.get('status')}"
    return None


def failures(statuses: Iterable[Publication]) -> set[str]:
    """The failed jobs that ``statuses`` name (their ``failed``), which the next status carries on."""
    return {job for status in statuses for job in str(status.get("failed", "")).split()}


def generation_end(workflow: str, coordinator: str = "") -> Filter:
    """APPL_END of the generation bound to ``$S$X``: the overlay then forgets that generation's
    join state (the ``clear`` of every composite subscription). With the ``coordinator`` named,
    only its APPL_END clears, which an edge broker takes from that identity (or a deployer) only:
    another agent's key cannot make every broker forget a running generation. Several names,
    space-separated (the coordinator and its standbys, any of which may end a generation): the
    APPL_END of any of them, by one anchored pattern."""
    equal: dict[str, Value | Var] = {"applname": workflow, "jobname": APPL_END, "GID": GID}
    names = coordinator.split()
    if len(names) == 1:
        equal["agentname"] = names[0]
    found = filter_of(JOBSTATUS, equal)
    if len(names) < 2:
        return found
    pattern = "^(?:" + "|".join(re.escape(name) for name in names) + ")$"
    return Filter(JOBSTATUS, (*found.predicates, Predicate("agentname", REGEX, pattern)))


def start_subscription(workflow: str) -> Filter:
    """Every APPL_START of ``workflow``: with APPL_END, tells each agent which generations still
    run on which version, so it can drop an older version's subscriptions when none does."""
    return filter_of(JOBSTATUS, {"applname": workflow, "jobname": APPL_START}, present=("GID",))


def monitor_subscriptions(workflow: str | None, gids: Iterable[str] = ()) -> list[Filter]:
    """The Triggers and job statuses the monitor follows: of ``workflow`` (or of every workflow),
    of each of ``gids`` (or of every generation); the alerts of missed deadlines; and the states
    of jobs not ended (:mod:`workflow_messages.jobstate`)."""
    scope: dict[str, Value | Var] = {} if workflow is None else {"applname": workflow}
    scopes = [{**scope, "GID": gid} for gid in gids] or [scope]
    return [
        *(
            filter_of(cls, each, present=() if "GID" in each else ("GID",))
            for cls in (TRIGGER, JOBSTATUS)
            for each in scopes
        ),
        *(deadline_filter(each) for each in scopes),
        *(state_filter(each) for each in scopes),
    ]
