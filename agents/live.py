"""The states of this agent's jobs that nothing else publishes (:mod:`workflow_messages.jobstate`):
held, waiting for its conditions, awaiting approval, waiting for a slot of its pool, or (the
coordinator's APPL_START) a generation queued behind ``max-active``.

After every event, :func:`changes` compares where those jobs stand with what it published last
(:attr:`Agent.live <agents.state.Agent.live>`, in the snapshot) and publishes a JOBSTATE for each
change only: a job entering such a state, moving between two of them, or leaving them (to
RUNNING, QUEUED in the agent's run queue, or WAITING for its retry; a job that ended says so by its
JOBSTATUS, a generation forgotten by nothing). A tick that changes nothing publishes nothing. The
scan covers what is held, awaited or queued, and what was published last: not the generations.

What was published is decided on the journaled events like everything else, so a restarted agent
replays to the same record and publishes no state twice (one published between its outbox and
its journal goes out again, as a status would, and readers keep the latest by ``since``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from agents.conditions import waiting_for
from agents.events import Effect, Emit, Run
from agents.holds import Rule, described
from agents.pools import Asking
from workflow_messages import APPL_START
from workflow_messages.jobstate import AWAITING, HELD, QUEUED, RUNNING, WAITING, job_state
from workflow_messages.operations import ANY

if TYPE_CHECKING:
    from agents.state import Agent

__all__ = ["Published", "changes", "restore", "snapshot"]

Key = tuple[str, str, str]  # (workflow, gid, job)
Published = tuple[str, float]  # the state last published, and since when
Why = Callable[[], str]  # the reason, worked out only when the state is published


def changes(agent: Agent, now: float) -> list[Effect]:
    """A JOBSTATE for each job whose state changed since the last one published."""
    current = _current(agent)
    if not current and not agent.live:  # most agents, at most events
        return []
    effects: list[Effect] = []
    for key, (state, why) in current.items():
        known = agent.live.get(key)
        if known is not None and known[0] == state:
            continue
        agent.live[key] = (state, now)
        effects.append(_emit(agent, key, state, why(), now))
    for key in [key for key in agent.live if key not in current]:
        del agent.live[key]
        moved = _moved(agent, key)
        if moved is not None:
            effects.append(_emit(agent, key, moved, "", now))
    return effects


def _current(agent: Agent) -> dict[Key, tuple[str, Why]]:
    found: dict[Key, tuple[str, Why]] = {}
    for run in agent.held:  # its conditions do not hold yet (agents.conditions)
        found[run.workflow, run.gid, run.job] = (HELD, partial(_conditions, agent, run))
    for key, awaiting in agent.approvals.items():
        found[key] = (AWAITING, partial(_approval, agent, awaiting.run))
    for pending in agent.pending if agent.holds or agent.asking else ():  # (no scan of a long queue)
        run = pending.run
        key = (run.workflow, run.gid, run.job)
        rule = _hold(agent, *key)
        if rule is not None:
            found[key] = (HELD, partial(_on_hold, rule))
            continue
        asking = agent.asking.get(key)
        if pending.at is None and asking is not None and asking.confirmed is None:
            found[key] = (WAITING, partial(_pool, asking))
    if any(_limited(agent, workflow, version) for workflow, version in agent.deployments):
        for (workflow, gid), generation in agent.generations.items():
            if generation.queued:  # waits its turn (agents.overlap): the coordinator only
                found[workflow, gid, APPL_START] = (QUEUED, partial(_queued, agent, workflow))
    return found


def _moved(agent: Agent, key: Key) -> str | None:
    """Where a job that left the published states went: running, queued or waiting for its retry
    here; None if it ended (its status says so) or its generation is gone."""
    if key in agent.running:
        return RUNNING
    for pending in agent.pending:
        run = pending.run
        if (run.workflow, run.gid, run.job) == key:
            return QUEUED if pending.at is None else WAITING
    return None


def _hold(agent: Agent, workflow: str, gid: str, job: str) -> Rule | None:
    """The rule of ``wfm hold`` that keeps ``job`` of ``gid`` from starting, if any."""
    if not agent.holds:
        return None
    for rule in ((workflow, j, g) for j in (job, ANY) for g in (gid, ANY)):
        if rule in agent.holds:
            return rule
    return None


def _conditions(agent: Agent, run: Run) -> str:
    return "waiting for " + ", ".join(waiting_for(agent, run))


def _on_hold(rule: Rule) -> str:
    return f"on hold: {described(rule)}"


def _pool(asking: Asking) -> str:
    return f"waiting for pool {asking.pool} (kept by {asking.keeper})"


def _approval(agent: Agent, run: Run) -> str:
    deployment = agent.deployments.get((run.workflow, run.version))
    info = deployment.jobs.get(run.job) if deployment is not None else None
    roles = info.approval if info is not None and info.approval else ("operator", "deployer")
    return f"awaiting approval by {' or '.join(roles)} (wfm approve)"


def _limited(agent: Agent, workflow: str, version: str) -> bool:
    info = agent.deployments[workflow, version].jobs.get(APPL_START)
    return info is not None and info.overlap is not None


def _queued(agent: Agent, workflow: str) -> str:
    current = agent.current(workflow)
    info = None if current is None else agent.deployments[workflow, current].jobs.get(APPL_START)
    limit = None if info is None or info.overlap is None else info.overlap.max_active
    return "waiting its turn" + ("" if limit is None else f": max-active {limit} generations run")


def _emit(agent: Agent, key: Key, state: str, reason: str, now: float) -> Emit:
    workflow, gid, job = key
    return Emit(job_state(workflow, job, gid, state, reason, agent=agent.name, since=now))


def snapshot(agent: Agent) -> dict[str, Any]:
    """What was published last, only when something is (most agents: nothing)."""
    if not agent.live:
        return {}
    return {"live": [[*key, state, since] for key, (state, since) in agent.live.items()]}


def restore(agent: Agent, saved: dict[str, Any]) -> None:
    agent.live = {(w, g, j): (state, since) for w, g, j, state, since in saved.get("live", [])}
