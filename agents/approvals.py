"""Approval steps (a job's ``<approval roles="operator"/>``, ``wfm approve``): a job with no
command that, when its condition fires, waits for a person. An APPROVE envelope signed by an
identity of one of the roles the job names ends it SUCCESS (or, rejected, FAILURE), its status
detail naming who decided (and so the history does); its ``timeout``, if any, ends it FAILURE
when nobody decided in time; a cancelled generation ends it NORUN.

What waits is :attr:`Agent.approvals <agents.state.Agent.approvals>`: set by a firing and ended
by an envelope, both in the journal, and checked after every event as deadlines are (the
adapter's one-second ticks included; a tick that ends one is journaled with its time), so a
restart replaying the journal waits for, or ends, the same approvals, and no approval step ends
twice.

Who may approve: the agent's trust admits an APPROVE as any operation (signed by a deployer or an
operator of its CA; without a CA, by the deployer key it trusts); with a CA, the signer's role
must also be one the job names. Anything else is refused, counted (``approval``) and never ends
the step.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agents import publishing, refusals
from agents.commands import Approve
from agents.events import Effect, Result, Run
from agents.generations import NOT_RUN
from agents.trust import Refusal
from workflow_messages import FAILURE, NORUN, SUCCESS
from workflow_messages.approvals import verdict_detail

if TYPE_CHECKING:
    from agents.cancel_and_rerun import Operated
    from agents.state import Agent

__all__ = ["AWAITING", "Awaiting", "approve", "await_approval", "check"]

log = logging.getLogger(__name__)

AWAITING = "awaiting"  # the state of an approval step waiting for its approval


@dataclass
class Awaiting:
    """An approval step whose condition fired at ``since``: ``run`` is what its status is made of."""

    run: Run
    since: float


def await_approval(agent: Agent, run: Run, now: float) -> list[Effect]:
    """The condition of an approval step fired: it waits (nothing runs) for :func:`approve`."""
    agent.approvals[run.workflow, run.gid, run.job] = Awaiting(run, now)
    publishing.mark(agent, run, AWAITING)
    log.info("%s %s %s awaits approval", run.workflow, run.gid, run.job)
    return []


def approve(agent: Agent, command: Approve, now: float) -> Operated:
    """APPROVE: end the step SUCCESS (approved) or FAILURE (rejected) if it awaits approval and
    the signer's role is one it names."""
    workflow, gid, job = command.control.workflow, command.gid, command.job
    awaiting = agent.approvals.get((workflow, gid, job))
    if awaiting is None:
        return _not_awaiting(agent, command)
    roles = _roles(agent, awaiting.run)
    role = command.signer.split(" ", 1)[0]
    if agent.trust.ca is not None and role not in roles:
        reason = f"{command.signer} may not approve {job}: it takes {' or '.join(roles)}"
        fields = {"command": command.control.command, "applname": workflow, "jobname": job}
        return "REFUSED", refusals.refuse(agent, Refusal("approval", command.signer, reason), fields, now), []
    del agent.approvals[workflow, gid, job]
    detail = verdict_detail(command.approved, command.signer, command.comment)
    log.info("%s %s %s %s", workflow, gid, job, detail)
    return "OK", detail, _end(agent, awaiting, SUCCESS if command.approved else FAILURE, detail, now)


def check(agent: Agent, now: float) -> list[Effect]:
    """End the approval steps whose wait is over by ``now``: timed out (FAILURE), of a cancelled
    generation (NORUN), or of a generation forgotten meanwhile (nothing to publish)."""
    if not agent.approvals:
        return []
    effects: list[Effect] = []
    for key, awaiting in list(agent.approvals.items()):
        run = awaiting.run
        generation = agent.generations.get((run.workflow, run.gid))
        if generation is None:
            del agent.approvals[key]
        elif generation.halted:
            del agent.approvals[key]
            effects += _end(agent, awaiting, NORUN, NOT_RUN, now)
        elif run.timeout is not None and now >= awaiting.since + run.timeout:
            del agent.approvals[key]
            detail = f"approval timed out: nobody approved within {run.timeout:g} s"
            effects += _end(agent, awaiting, FAILURE, detail, now)
    return effects


def _end(agent: Agent, awaiting: Awaiting, status: str, detail: str, now: float) -> list[Effect]:
    result = Result(status == SUCCESS, detail, awaiting.since, max(now - awaiting.since, 0.0))
    return publishing.done(agent, awaiting.run, status, result, now)


def _roles(agent: Agent, run: Run) -> tuple[str, ...]:
    deployment = agent.deployments.get((run.workflow, run.version))
    info = deployment.jobs.get(run.job) if deployment is not None else None
    return info.approval if info is not None else ()


def _not_awaiting(agent: Agent, command: Approve) -> Operated:
    """Why ``command``'s job does not await approval here: decided already (UNCHANGED if by
    the same verdict of the same signer: an envelope sent again), or not (yet) waiting."""
    workflow, gid, job = command.control.workflow, command.gid, command.job
    recorded = agent.outcomes.get((workflow, gid), {}).get("jobs", {}).get(job)
    if recorded is not None:
        if recorded["detail"] == verdict_detail(command.approved, command.signer, command.comment):
            return "UNCHANGED", f"{job} of {gid} was {recorded['detail']} already", []
        return "ERROR", f"{job} of {gid} has ended: {recorded['status']} ({recorded['detail']})", []
    state = agent.generations.get((workflow, gid), None)
    if state is not None and job in state.jobs:
        return "ERROR", f"{job} of {gid} is not an approval step awaiting approval", []
    return (
        "ERROR",
        f"{job} of {gid} does not await approval on {agent.name} (its condition has not fired)",
        [],
    )
