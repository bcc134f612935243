"""The message shapes of a deployed workflow (INTERFACE.md section 3), built as model objects.

Built from the model rather than parsed from text: the constructors check every value just as the
parser would, canonical ``str()`` gives the text, and a workflow of a thousand jobs translates
without a thousand parser runs (tests check that every text parses back to an equal object).
Agents, the deployer and the monitor use the same functions, so the shapes live in one place.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date

from broker.language import Atom, Composite, Filter, Predicate, Publication, Value, Var
from broker.language.model import combine
from wfm.workflow.checks import APPL_END

__all__ = [
    "ACCEPTS",
    "AGENT_CTL",
    "FAILURE",
    "GID",
    "JOBSTATUS",
    "NORUN",
    "SUCCESS",
    "TRIGGER",
    "cleanup_subscription",
    "deployer_advertisement",
    "generation_end",
    "job_condition",
    "monitor_subscriptions",
    "status_advertisement",
    "status_subscription",
    "trigger",
    "trigger_advertisement",
    "trigger_atom",
    "trigger_date",
]

AGENT_CTL, JOBSTATUS, TRIGGER = "AGENT_CTL", "JOBSTATUS", "Trigger"
SUCCESS, FAILURE, NORUN = "SUCCESS", "FAILURE", "NORUN"
GID = Var("S", "X")  # binds one generation id across all atoms of a job's condition
ACCEPTS: dict[str, tuple[str, ...]] = {  # the predecessor statuses each `on` lets a job run after
    "success": (SUCCESS, NORUN),
    "failure": (FAILURE,),
    "always": (SUCCESS, NORUN, FAILURE),
}


def _filter(cls: str, equal: dict[str, Value | Var], present: Iterable[str] = ()) -> Filter:
    predicates = [Predicate(name, "eq", value) for name, value in equal.items()]
    predicates += [Predicate(name, "isPresent", "") for name in present]
    return Filter(cls, tuple(predicates))


def status_advertisement(workflow: str, job: str) -> Filter:
    """What the agent of ``job`` advertises before it publishes the job's statuses."""
    return _filter(JOBSTATUS, {"applname": workflow, "jobname": job}, present=("GID", "status", "detail"))


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
    year, month, day = (int(part) for part in schedule.split("."))
    return date(year, month, day)


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
