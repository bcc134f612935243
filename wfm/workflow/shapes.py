"""The message shapes of a deployed workflow (INTERFACE.md section 3), built as model objects.

Built from the model rather than parsed from text: the constructors check every value just as the
parser would, canonical ``str()`` gives the text, and a workflow of a thousand jobs translates
without a thousand parser runs (tests check that every text parses back to an equal object).
Agents, the deployer and the monitor use the same functions, so the shapes live in one place.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from datetime import date, datetime

from broker.language import Atom, Composite, Filter, Predicate, Publication, Value, Var
from broker.language.model import combine
from wfm.workflow.checks import APPL_END, APPL_START

__all__ = [
    "ACCEPTS",
    "AGENT_ACK",
    "AGENT_CTL",
    "FAILURE",
    "GID",
    "JOBSTATUS",
    "NORUN",
    "SUCCESS",
    "TRIGGER",
    "ack",
    "ack_advertisement",
    "ack_subscription",
    "cleanup_subscription",
    "control_subscription",
    "deployer_advertisement",
    "digest",
    "generation_end",
    "job_condition",
    "job_status",
    "monitor_subscriptions",
    "start_subscription",
    "status_advertisement",
    "status_subscription",
    "text_value",
    "trigger",
    "trigger_advertisement",
    "trigger_atom",
    "trigger_date",
]

AGENT_CTL, AGENT_ACK, JOBSTATUS, TRIGGER = "AGENT_CTL", "AGENT_ACK", "JOBSTATUS", "Trigger"
SUCCESS, FAILURE, NORUN = "SUCCESS", "FAILURE", "NORUN"
GID = Var("S", "X")  # binds one generation id across all atoms of a job's condition
ACCEPTS: dict[str, tuple[str, ...]] = {  # the predecessor statuses each `on` lets a job run after
    "success": (SUCCESS, NORUN),
    "failure": (FAILURE,),
    "always": (SUCCESS, NORUN, FAILURE),
}


def _filter(
    cls: str, equal: dict[str, Value | Var], present: Iterable[str] = (), numbers: Iterable[str] = ()
) -> Filter:
    predicates = [Predicate(name, "eq", value) for name, value in equal.items()]
    predicates += [Predicate(name, "isPresent", "") for name in present]
    predicates += [Predicate(name, "isPresent", 0) for name in numbers]
    return Filter(cls, tuple(predicates))


STATUS_STRINGS = ("GID", "status", "detail", "version", "agentname")
STATUS_NUMBERS = ("attempt", "started", "duration")


def status_advertisement(workflow: str, job: str) -> Filter:
    """What the agent of ``job`` advertises before it publishes the job's statuses: the pinned
    shape of INTERFACE.md section 3 plus the version the generation runs on, the agent, the
    attempt, the start (epoch seconds) and the duration (seconds), so monitors need no side channel."""
    return _filter(
        JOBSTATUS, {"applname": workflow, "jobname": job}, present=STATUS_STRINGS, numbers=STATUS_NUMBERS
    )


def trigger_atom(workflow: str) -> Atom:
    """``{[class,eq,Trigger],[applname,eq,W],[GID,eq,$S$X]}``: a generation of ``workflow`` starts."""
    return Atom(_filter(TRIGGER, {"applname": workflow, "GID": GID}))


def job_condition(workflow: str, after: Iterable[tuple[str, str]]) -> Composite:
    """``{ {P1 ok} & ... & {Pn ok} & {trigger} }``: each predecessor ended as its ``on`` accepts,
    in the same generation as the trigger."""
    finished = [
        combine("||", [Atom(_filter(JOBSTATUS, _status(workflow, job, status))) for status in ACCEPTS[on]])
        for job, on in after
    ]
    return combine("&", [*finished, trigger_atom(workflow)])


def _status(workflow: str, job: str, status: str) -> dict[str, Value | Var]:
    return {"applname": workflow, "jobname": job, "GID": GID, "status": status}


def generation_end(workflow: str) -> Filter:
    """APPL_END of the generation bound to ``$S$X``: the overlay then forgets that generation's
    join state (the ``clear`` of every composite subscription)."""
    return _filter(JOBSTATUS, {"applname": workflow, "jobname": APPL_END, "GID": GID})


def cleanup_subscription(workflow: str) -> Filter:
    """Every APPL_END of ``workflow``: each agent forgets a generation when it ends."""
    return _filter(JOBSTATUS, {"applname": workflow, "jobname": APPL_END}, present=("GID",))


def status_subscription(workflow: str) -> Filter:
    """Every job status of ``workflow``: what the coordinator follows to decide APPL_END."""
    return _filter(JOBSTATUS, {"applname": workflow}, present=("GID",))


def deployer_advertisement(workflow: str, version: str) -> Filter:
    """What the deployer advertises to publish the AGENT_CTL envelopes of one plan."""
    return _filter(
        AGENT_CTL,
        {"applname": workflow, "version": version},
        present=("agentname", "command", "content", "jobname"),
    )


def trigger_advertisement() -> Filter:
    """What ``wfm trigger`` and ``wfm schedule`` advertise before publishing Triggers of any workflow."""
    return _filter(TRIGGER, {}, present=("applname", "GID", "schedule"))


def trigger(workflow: str, gid: str, day: date) -> Publication:
    """``[class,Trigger],[applname,W],[GID,G],[schedule,'YYYY.MM.DD']``: start generation ``gid``."""
    return Publication(TRIGGER, {"applname": workflow, "GID": gid, "schedule": day.strftime("%Y.%m.%d")})


def trigger_date(schedule: str) -> date:
    """The date of a Trigger's ``schedule`` attribute; ValueError if it is not ``YYYY.MM.DD``."""
    try:
        return datetime.strptime(schedule, "%Y.%m.%d").date()
    except ValueError:
        raise ValueError(f"the trigger's schedule {schedule!r} is not a date YYYY.MM.DD") from None


def monitor_subscriptions(workflow: str | None, gids: Iterable[str] = ()) -> list[Filter]:
    """The Triggers and job statuses the monitor follows: of ``workflow`` (or of every workflow),
    of each of ``gids`` (or of every generation)."""
    scope: dict[str, Value | Var] = {} if workflow is None else {"applname": workflow}
    scopes = [{**scope, "GID": gid} for gid in gids] or [scope]
    return [
        _filter(cls, each, present=() if "GID" in each else ("GID",))
        for cls in (TRIGGER, JOBSTATUS)
        for each in scopes
    ]


ACK_FIELDS = ("applname", "version", "jobname", "command", "digest", "result", "detail")


def control_subscription(agent: str) -> Filter:
    """Every AGENT_CTL envelope addressed to ``agent``."""
    return _filter(AGENT_CTL, {"agentname": agent})


def ack_advertisement(agent: str) -> Filter:
    """What ``agent`` advertises to acknowledge the envelopes it processed."""
    return _filter(AGENT_ACK, {"agentname": agent}, present=ACK_FIELDS)


def ack_subscription(workflow: str, version: str) -> Filter:
    """Every agent's acknowledgements of one version of ``workflow``: what the deployer waits on."""
    return _filter(AGENT_ACK, {"applname": workflow, "version": version}, present=("agentname",))


def start_subscription(workflow: str) -> Filter:
    """Every APPL_START of ``workflow``: with APPL_END, tells each agent which generations still
    run on which version, so it can drop an older version's subscriptions when none does."""
    return _filter(JOBSTATUS, {"applname": workflow, "jobname": APPL_START}, present=("GID",))


def text_value(text: str, limit: int = 500) -> str:
    """``text`` as a valid string value: line breaks become spaces, ``"`` becomes ``'`` when both
    quote kinds occur, and it is cut to ``limit`` characters (a detail, not a log)."""
    flat = " ".join(text.split())
    if "'" in flat and '"' in flat:
        flat = flat.replace('"', "'")
    return flat[:limit]


def job_status(
    workflow: str, job: str, gid: str, status: str, detail: str, *,
    version: str, agent: str, attempt: int = 0, started: float = 0.0, duration: float = 0.0,
) -> Publication:  # fmt: skip
    """A JOBSTATUS publication, fitting :func:`status_advertisement`."""
    values: dict[str, Value] = {
        "applname": workflow, "jobname": job, "GID": gid, "status": status,
        "detail": text_value(detail), "version": version, "agentname": agent,
        "attempt": attempt, "started": round(started, 3), "duration": round(duration, 3),
    }  # fmt: skip
    return Publication(JOBSTATUS, values)


def ack(agent: str, fields: dict[str, str], result: str, detail: str) -> Publication:
    """An AGENT_ACK publication, fitting :func:`ack_advertisement`; ``fields`` gives the envelope's
    applname, version, jobname, command and the :func:`digest` of its content ('' when missing)."""
    values: dict[str, Value] = {name: text_value(fields.get(name, "")) for name in ACK_FIELDS[:5]}
    values |= {"result": result, "detail": text_value(detail)}
    return Publication(AGENT_ACK, {"agentname": agent, **values})


def digest(content: str) -> str:
    """Names an envelope's content in its acknowledgement (two envelopes may share agent, command
    and job, e.g. the coordinator's two SUBSCRIBEs for APPL_END)."""
    return hashlib.sha256(content.encode()).hexdigest()[:12]
