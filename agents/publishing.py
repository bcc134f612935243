"""The statuses this agent publishes, and the outcomes it keeps of them.

Every job publishes one status in every generation: the end of a run (:func:`done`), or one decided
without running anything (:mod:`agents.firing`: APPL_START, APPL_END, NORUN, a skip, a bad
trigger), or APPL_END (:mod:`agents.coordinator`). What each said is kept as the generation's
outcome, answered to ``wfm runs`` and reused by ``wfm rerun --from`` (:mod:`agents.cancel_and_rerun`).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from agents import forgetting, standby
from agents.events import Effect, Emit, Result, Run
from agents.generations import GenerationState
from broker.language import Publication
from workflow_messages import FAILURE, job_status

if TYPE_CHECKING:
    from agents.state import Agent

__all__ = ["MAX_OUTCOMES", "done", "mark", "outcome", "over_here", "publication"]

# generations whose outcomes (the statuses this agent published) are kept, for wfm runs and the
# jobs wfm rerun --from reuses, the oldest forgotten first
MAX_OUTCOMES = 500


def done(agent: Agent, run: Run, status: str, result: Result, now: float) -> list[Effect]:
    """The status of a run that ended (or of a queued one that will not run)."""
    mark(agent, run, "done")
    emitted = publication(
        agent,
        run.workflow,
        run.version,
        run.job,
        run.gid,
        status,
        result.detail,
        attempt=run.attempt,
        started=result.started,
        duration=result.duration,
        failed=[*run.upstream.split(), *([run.job] if status == FAILURE else [])],
    )
    return [Emit(emitted), *over_here(agent, run.workflow, run.gid, now)]


def mark(agent: Agent, run: Run, state: str) -> None:
    """Record where ``run``'s job is in its generation: queued, running, waiting or done."""
    generation = agent.generations.get((run.workflow, run.gid))
    if generation is not None:
        generation.jobs[run.job] = state


def over_here(agent: Agent, workflow: str, gid: str, now: float) -> list[Effect]:
    """A generation of a DEPLOY's version is over here once every job of this agent has
    published its status in it (each job publishes one in every generation): this agent hears
    no APPL_END, which would cost a message to every agent in every generation."""
    generation: GenerationState | None = agent.generations.get((workflow, gid))
    if generation is None or generation.version is None:
        return []
    deployment = agent.deployments.get((workflow, generation.version))
    if deployment is None or not deployment.ends_here or not deployment.complete:
        return []
    jobs: Collection[str] = deployment.jobs.keys()
    if agent.handed:  # a job handed over to a standby (agents.standby) is not this agent's to end
        jobs = [job for job, info in deployment.jobs.items() if not standby.ignored(agent, info)]
    if len(generation.jobs) < len(jobs):  # one has not even started: no scan of
        return []  # them all at every job's end (quadratic in a 1,000-job workflow)
    if any(generation.jobs.get(job) != "done" for job in jobs):
        return []
    return forgetting.forget(agent, workflow, gid, generation.version, now)


def publication(
    agent: Agent,
    workflow: str,
    version: str,
    job: str,
    gid: str,
    status: str,
    detail: str,
    attempt: int = 0,
    started: float = 0.0,
    duration: float = 0.0,
    skipped: bool = False,
    failed: list[str] | None = None,
) -> Publication:
    """The JOBSTATUS this agent publishes, recorded in the generation's outcome. A job taken
    over from another agent (``agents.standby``) says so in its detail."""
    generation = agent.generations.get((workflow, gid))
    took = agent.took_over.get((workflow, job))
    if took is not None:
        detail = f"taken over from {took[0]} by {agent.name}: {detail}"
    status_publication = job_status(
        workflow,
        job,
        gid,
        status,
        detail,
        version=version,
        agent=agent.name,
        attempt=attempt,
        started=started,
        duration=duration,
        skipped=skipped,
        failed=failed or (),
        cancelled=generation is not None and generation.halted,
        date=(agent.outcomes.get((workflow, gid)) or {}).get("date") or "",
    )
    record = {
        name: status_publication[name] for name in ("status", "detail", "attempt", "started", "duration")
    }
    if skipped:  # kept only when set: a record per job for 500 generations is the snapshot's bulk
        record["skipped"] = 1
    if took is not None:  # likewise: whose job it was (wfm runs, the dashboard)
        record["taken_over"] = took[0]
    outcome(agent, workflow, gid)["jobs"][job] = record
    return status_publication


def outcome(agent: Agent, workflow: str, gid: str) -> dict[str, Any]:
    """The outcome record of a generation, made (and the oldest dropped) on first use."""
    record = agent.outcomes.get((workflow, gid))
    if record is None:
        record = agent.outcomes[workflow, gid] = {"date": None, "jobs": {}}
        while len(agent.outcomes) > MAX_OUTCOMES:
            agent.outcomes.popitem(last=False)
    return record
