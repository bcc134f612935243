"""JOBSTATUS: what an agent publishes when a job of a generation ends, and the filters and
composites that follow those statuses (the job conditions, the coordinator, the clean-up, the
monitor).
"""

from __future__ import annotations

from collections.abc import Iterable

from broker.language import Atom, Composite, Filter, Publication, Value, Var
from broker.language.model import combine
from workflow_messages._build import filter_of, text_value
from workflow_messages.names import ACCEPTS, APPL_END, APPL_START, GID, JOBSTATUS, TRIGGER
from workflow_messages.trigger import trigger_atom

__all__ = [
    "cleanup_subscription",
    "generation_end",
    "job_condition",
    "job_status",
    "monitor_subscriptions",
    "start_subscription",
    "status_advertisement",
    "status_subscription",
]

STATUS_STRINGS = ("GID", "status", "detail", "version", "agentname")
STATUS_NUMBERS = ("attempt", "started", "duration")


def status_advertisement(workflow: str, job: str) -> Filter:
    """What the agent of ``job`` advertises before it publishes the job's statuses: the pinned
    shape of INTERFACE.md section 3 plus the version the generation runs on, the agent, the
    attempt, the start (epoch seconds) and the duration (seconds), so monitors need no side channel."""
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
) -> Publication:
    """A JOBSTATUS publication, fitting :func:`status_advertisement`."""
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
    }
    return Publication(JOBSTATUS, values)


def job_condition(workflow: str, after: Iterable[tuple[str, str]]) -> Composite:
    """``{ {P1 ok} & ... & {Pn ok} & {trigger} }``: each predecessor ended as its ``on`` accepts,
    in the same generation as the trigger."""
    finished = [
        combine("||", [Atom(filter_of(JOBSTATUS, _status(workflow, job, status))) for status in ACCEPTS[on]])
        for job, on in after
    ]
    return combine("&", [*finished, trigger_atom(workflow)])


def _status(workflow: str, job: str, status: str) -> dict[str, Value | Var]:
    return {"applname": workflow, "jobname": job, "GID": GID, "status": status}


def generation_end(workflow: str) -> Filter:
    """APPL_END of the generation bound to ``$S$X``: the overlay then forgets that generation's
    join state (the ``clear`` of every composite subscription)."""
    return filter_of(JOBSTATUS, {"applname": workflow, "jobname": APPL_END, "GID": GID})


def cleanup_subscription(workflow: str) -> Filter:
    """Every APPL_END of ``workflow``: each agent forgets a generation when it ends."""
    return filter_of(JOBSTATUS, {"applname": workflow, "jobname": APPL_END}, present=("GID",))


def status_subscription(workflow: str) -> Filter:
    """Every job status of ``workflow``: what the coordinator follows to decide APPL_END."""
    return filter_of(JOBSTATUS, {"applname": workflow}, present=("GID",))


def start_subscription(workflow: str) -> Filter:
    """Every APPL_START of ``workflow``: with APPL_END, tells each agent which generations still
    run on which version, so it can drop an older version's subscriptions when none does."""
    return filter_of(JOBSTATUS, {"applname": workflow, "jobname": APPL_START}, present=("GID",))


def monitor_subscriptions(workflow: str | None, gids: Iterable[str] = ()) -> list[Filter]:
    """The Triggers and job statuses the monitor follows: of ``workflow`` (or of every workflow),
    of each of ``gids`` (or of every generation)."""
    scope: dict[str, Value | Var] = {} if workflow is None else {"applname": workflow}
    scopes = [{**scope, "GID": gid} for gid in gids] or [scope]
    return [
        filter_of(cls, each, present=() if "GID" in each else ("GID",))
        for cls in (TRIGGER, JOBSTATUS)
        for each in scopes
    ]
