"""CANCEL and RERUN of a generation (``wfm cancel``, ``wfm rerun --from``): each answers the
acknowledgement's result and detail, and effects (:data:`Operated`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agents import conditions, publishing
from agents.commands import Cancel, Rerun
from agents.events import Effect, Result, Stop
from agents.generations import NOT_RUN, GenerationState
from workflow_messages import FAILURE, NORUN

if TYPE_CHECKING:
    from agents.state import Agent

__all__ = ["Operated", "cancel", "halt", "rerun"]

Operated = tuple[str, str, list[Effect]]


def cancel(agent: Agent, command: Cancel, now: float) -> Operated:
    """Record the cancellation (the envelope is in the journal) and :func:`halt` the generation.
    Jobs that fire later publish NORUN; the coordinator ends it CANCELLED."""
    workflow, gid = command.control.workflow, command.gid
    if (workflow, gid) in agent.ended:
        return "UNCHANGED", f"generation {gid} is over", []
    seen = (workflow, gid) in agent.generations
    generation = agent.generations.setdefault((workflow, gid), GenerationState(since=now))
    if generation.cancelled:
        return "UNCHANGED", f"generation {gid} was cancelled already", []
    effects, stopped, queued = halt(agent, generation, workflow, gid, now)
    if not seen:
        return "OK", f"generation {gid} not seen here yet: its jobs will not run", effects
    return "OK", f"{stopped} running stopped, {queued} queued not run", effects


def halt(
    agent: Agent, generation: GenerationState, workflow: str, gid: str, now: float
) -> tuple[list[Effect], int, int]:
    """Mark the generation cancelled, drop its queued runs (NORUN; FAILURE for one waiting for a
    retry) and stop its running ones: ``wfm cancel``'s, and the coordinator's when the
    workflow's ``overlap="cancel"`` replaces it (:mod:`agents.overlap`). The effects, and how many
    runs were stopped and how many queued ones dropped."""
    generation.cancelled = True
    queued = [p for p in agent.pending if (p.run.workflow, p.run.gid) == (workflow, gid)]
    agent.pending = [p for p in agent.pending if p not in queued]
    effects: list[Effect] = []
    for pending in queued:
        status = NORUN if pending.at is None else FAILURE
        detail = NOT_RUN if pending.at is None else f"{NOT_RUN} before attempt {pending.run.attempt}"
        effects += publishing.done(agent, pending.run, status, Result(False, detail, now, 0.0), now)
    effects += conditions.release_cancelled(agent, workflow, gid, now)
    stopping = [run for run in agent.running.values() if (run.workflow, run.gid) == (workflow, gid)]
    effects += [Stop(run) for run in stopping]
    return effects, len(stopping), len(queued)


def rerun(agent: Agent, command: Rerun, now: float) -> Operated:
    """Generation ``new`` republishes the outcomes ``gid`` had here for the ``reuse`` jobs
    (those not downstream of the job rerun from, and not skipped in ``gid``) instead of
    running them; ERROR, naming them, if this agent has no outcome of some it hosts."""
    workflow, gid, new = command.control.workflow, command.gid, command.new
    known = agent.generations.get((workflow, new))
    if known is not None and known.rerun_of == gid:
        return "UNCHANGED", f"{new} reruns {gid} already", []
    if known is not None or (workflow, new) in agent.ended or (workflow, new) in agent.outcomes:
        return "ERROR", f"generation {new} exists", []
    recorded = agent.outcomes.get((workflow, gid), {}).get("jobs", {})
    hosted = {job for (w, _), d in agent.deployments.items() if w == workflow for job in d.jobs}
    lost = sorted(job for job in command.reuse if job in hosted and job not in recorded)
    if lost:  # forgotten (MAX_OUTCOMES) or never run here: it would run again, not be reused
        return (
            "ERROR",
            f"{agent.name} has no outcome of {', '.join(lost)} in {gid} to reuse (it keeps those"
            f" of its last {publishing.MAX_OUTCOMES} generations): rerun {gid} whole, or from an earlier job",
            [],
        )
    reused = {
        job: [str(recorded[job]["status"]), f"reused from {gid}: {recorded[job]['detail']}"[:500]]
        for job in command.reuse
        if job in recorded
    }
    agent.generations[workflow, new] = GenerationState(since=now, rerun_of=gid, reused=reused)
    return "OK", f"{len(reused)} outcomes of {gid} reused here", []
