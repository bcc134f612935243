"""The statuses an agent follows through plain subscriptions: every APPL_START and APPL_END of its
workflows (which generations run on which version, and when one is over), and, on the coordinator
of a workflow deployed by the per-job commands, every status, from which it decides when a
generation ends and publishes its APPL_END (a DEPLOY's APPL_END fires as a composite instead).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agents import forgetting, overlap, publishing, refusals, standby
from agents.events import Effect, Emit
from agents.generations import NOT_RUN, GenerationState
from broker.language import Publication
from workflow_messages import APPL_END, APPL_START, CANCELLED, decide_end, parse_job_status

if TYPE_CHECKING:
    from agents.state import Agent

__all__ = ["end_if_over", "status"]


def status(agent: Agent, publication: Publication, now: float) -> list[Effect]:
    """A JOBSTATUS from a plain subscription: a start, an end, or (coordinator) any status."""
    parsed = parse_job_status(publication)
    if parsed is None or parsed.version is None:
        return []
    workflow, gid, job, version = parsed.workflow, parsed.gid, parsed.job, parsed.version
    deployment = agent.deployments.get((workflow, version))
    if deployment is None:
        return []  # a version without a job here (this agent was left out of it), or made up
    if agent.trust.ca is not None and deployment.signers and job not in deployment.signers:
        reason = f"{job} is no job whose status this agent follows"
        refusals.ignore(agent, "status", f"{workflow} {job}", reason, now)
        return []
    unsigned = refusals.unsigned(agent, (publication,), deployment.signers, now)
    if unsigned is not None:
        refusals.ignore(agent, "status", f"{workflow} {job}", unsigned.reason, now, unsigned.who)
        return []
    if job == APPL_END:
        return forgetting.forget(agent, workflow, gid, version, now)
    if (workflow, gid) in agent.ended:
        return []
    if job == APPL_START and parsed.status == CANCELLED:  # the coordinator replaced it (overlap)
        return overlap.replaced(agent, workflow, version, gid, now)
    effects: list[Effect] = []
    if job == APPL_START:
        agent.generations.setdefault((workflow, gid), GenerationState(since=now)).version = version
        start = deployment.jobs.get(APPL_START)
        if start is not None and start.primary is not None:  # a standby's copy of it: answered
            effects = standby.followed(agent, workflow, gid, APPL_START, version, now)
    generation = agent.generations.get((workflow, gid))
    if generation is None or generation.version != version:
        return effects
    generation.statuses.setdefault(job, parsed.status)
    generation.cancelled_upstream |= parsed.cancelled
    return effects + end_if_over(agent, workflow, gid, generation, now)


def end_if_over(
    agent: Agent, workflow: str, gid: str, generation: GenerationState, now: float
) -> list[Effect]:
    """Coordinator: publish APPL_END once :func:`decide_end` says the generation is over."""
    assert generation.version is not None
    deployment = agent.deployments.get((workflow, generation.version))
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
    end = publishing.publication(agent, info.workflow, info.version, APPL_END, gid, status, detail, 0, now)
    return [Emit(end)]
