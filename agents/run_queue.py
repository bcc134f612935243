"""The run queue: runs wait their turn (at most ``max_jobs`` at once), their retry's backoff or
a slot of their pool (:mod:`agents.pools`), start, and end in a status; a failed attempt is
retried as the job's ``retries`` allow."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from agents import holds, pools, publishing
from agents.events import Effect, Finished, Lost, Result, Run, Start
from agents.generations import NOT_RUN
from workflow_messages import FAILURE, SUCCESS

if TYPE_CHECKING:
    from agents.state import Agent

__all__ = ["LOST", "Pending", "finished", "lost", "pump"]

log = logging.getLogger(__name__)

LOST = "lost: supervisor died"


@dataclass
class Pending:
    """A run that is queued (``at`` None) or waiting ``at`` for its retry."""

    run: Run
    at: float | None = None


def pump(agent: Agent, now: float) -> list[Effect]:
    """Start due runs not held, oldest first, up to ``max_jobs`` at once."""
    effects: list[Effect] = []
    for pending in list(agent.pending):
        if len(agent.running) >= agent.max_jobs:
            break
        if pending.at is not None and pending.at > now:
            continue
        if holds.held(agent, pending.run.workflow, pending.run.gid, pending.run.job):
            continue  # until released (agents.holds)
        if not pools.may_start(agent, pending.run, now):
            continue  # waiting for a slot of its pool
        agent.pending.remove(pending)
        run = pending.run
        agent.running[run.workflow, run.gid, run.job] = run
        publishing.mark(agent, run, "running")
        effects.append(Start(run))
    return effects


def finished(agent: Agent, event: Finished, now: float) -> list[Effect]:
    run, result = event.run, event.result
    if agent.running.get((run.workflow, run.gid, run.job)) != run:
        return []
    if not result.ok:
        return _failed(agent, run, result, now)
    del agent.running[run.workflow, run.gid, run.job]
    return publishing.done(agent, run, SUCCESS, result, now) + pump(agent, now)


def lost(agent: Agent, event: Lost, now: float) -> list[Effect]:
    run = event.run
    if agent.running.get((run.workflow, run.gid, run.job)) != run:
        return []
    del agent.running[run.workflow, run.gid, run.job]
    return publishing.done(agent, run, FAILURE, Result(False, LOST, now, 0.0), now) + pump(agent, now)


def _failed(agent: Agent, run: Run, result: Result, now: float) -> list[Effect]:
    del agent.running[run.workflow, run.gid, run.job]
    generation = agent.generations.get((run.workflow, run.gid))
    if generation is not None and generation.halted:  # stopped, or failed meanwhile: no retry
        stopped = replace(result, detail=f"{NOT_RUN}: {result.detail}")
        return publishing.done(agent, run, FAILURE, stopped, now) + pump(agent, now)
    if run.attempt <= _retries(agent, run):
        delay = min(agent.backoff * 2 ** (run.attempt - 1), 60.0)
        log.info(
            "%s %s %s attempt %d failed (%s): retry in %.1f s",
            run.workflow,
            run.gid,
            run.job,
            run.attempt,
            result.detail,
            delay,
        )
        agent.pending.append(Pending(replace(run, attempt=run.attempt + 1), now + delay))
        publishing.mark(agent, run, "waiting")
        return pump(agent, now)
    return publishing.done(agent, run, FAILURE, result, now) + pump(agent, now)


def _retries(agent: Agent, run: Run) -> int:
    deployment = agent.deployments.get((run.workflow, run.version))
    info = deployment.jobs.get(run.job) if deployment else None
    return info.retries if info else 0
