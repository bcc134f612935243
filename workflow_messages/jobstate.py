"""JOBSTATE: where a job that has not ended stands, published by its agent when the job enters a
state that would otherwise show nothing, and when it leaves it.

A job publishes one JOBSTATUS per generation, at its end; what it does before (held by ``wfm hold``,
waiting for a ``<wait>`` or an ``<event>``, awaiting an approval, waiting for a slot of its pool,
or its whole generation queued behind ``max-active``) only the agents know. JOBSTATE says it to
whoever follows the workflow (``wfm monitor``, the dashboard, the historian), one publication per
state change and none while nothing changes:

=========  ======================================================================================
state      meaning (``reason`` says more)
=========  ======================================================================================
HELD       a hold keeps it from starting (``on hold: job Ship of SHIP``), or its conditions do not
           hold yet (``waiting for LEDGER.Close``)
AWAITING   an approval step awaits ``wfm approve`` (``awaiting approval by operator``)
WAITING    its run is due and waits for a slot of its pool (``waiting for pool db``)
QUEUED     of APPL_START: the generation waits its turn behind the workflow's ``max-active``
=========  ======================================================================================

Leaving such a state, the agent publishes where the job went: RUNNING (it started), QUEUED (due,
waiting for one of the agent's job slots) or WAITING (for its next attempt); a job that ended
publishes its JOBSTATUS instead, which supersedes every JOBSTATE of it. ``since`` is when the
state began, by the agent's clock: a reader keeps the latest of one job's states by it.

A class of its own, not a JOBSTATUS: every composite subscription of a workflow takes any
JOBSTATUS of a job as its end (:func:`workflow_messages.jobstatus.ended`), and no filter of a
job's condition, its ``<wait>``, a pool's release or the coordinator names this class. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from broker.language import Filter, Publication, Value, Var
from workflow_messages._build import filter_of, text_value

__all__ = [
    "AWAITING",
    "HELD",
    "JOBSTATE",
    "LIVE",
    "QUEUED",
    "RUNNING",
    "WAITING",
    "LiveState",
    "job_state",
    "parse_job_state",
    "state_advertisement",
    "state_filter",
]

JOBSTATE = "JOBSTATE"
HELD, AWAITING, WAITING, QUEUED, RUNNING = "HELD", "AWAITING", "WAITING", "QUEUED", "RUNNING"
LIVE = (HELD, AWAITING, WAITING, QUEUED, RUNNING)  # every state a JOBSTATE may say
_STRINGS = ("applname", "jobname", "GID", "state", "reason", "signer", "signature")
_NUMBERS = ("since", "sequence")


def state_advertisement(agent: str) -> Filter:
    """What an agent advertises, once, before it publishes the states of its jobs (signed with
    TLS, as its statuses are: ``sequence``, ``signer``, ``signature``)."""
    return filter_of(JOBSTATE, {"agentname": agent}, present=_STRINGS, numbers=_NUMBERS)


def job_state(
    workflow: str, job: str, gid: str, state: str, reason: str, *, agent: str, since: float
) -> Publication:
    """A JOBSTATE publication, fitting :func:`state_advertisement`."""
    if state not in LIVE:
        raise ValueError(f"state {state!r} is not one of {', '.join(LIVE)}")
    values: dict[str, Value] = {
        "applname": workflow,
        "jobname": job,
        "GID": gid,
        "state": state,
        "reason": text_value(reason),
        "agentname": agent,
        "since": round(since, 3),
    }
    return Publication(JOBSTATE, values)


@dataclass(frozen=True, slots=True)
class LiveState:
    """A JOBSTATE read back (:func:`parse_job_state`)."""

    workflow: str
    job: str
    gid: str
    state: str
    reason: str = ""
    since: float | None = None
    agent: str | None = None


def parse_job_state(attributes: Mapping[str, Value]) -> LiveState | None:
    """The state ``attributes`` (a JOBSTATE's) carry, or None if they carry none: anyone may
    publish, so one without a string workflow, job, GID and a known state is ignored."""
    workflow, job, gid, state = (attributes.get(name) for name in ("applname", "jobname", "GID", "state"))
    if not (isinstance(workflow, str) and isinstance(job, str) and isinstance(gid, str)) or state not in LIVE:
        return None
    since = attributes.get("since")
    agent = attributes.get("agentname")
    return LiveState(
        workflow,
        job,
        gid,
        str(state),
        str(attributes.get("reason", "")),
        float(since) if isinstance(since, int | float) and not isinstance(since, bool) else None,
        agent if isinstance(agent, str) else None,
    )


def state_filter(scope: Mapping[str, Value | Var]) -> Filter:
    """The job states of a monitor's ``scope`` (its workflow, its generation, or none)."""
    return filter_of(JOBSTATE, dict(scope), present=() if "GID" in scope else ("GID",))
