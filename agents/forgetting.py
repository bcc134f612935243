"""Forgetting generations: at their end (APPL_END, or every job here published), and those too
old, so that memory and the journal's snapshot stay bounded however long the agent runs.

A generation that ended is remembered a while (:data:`FORGET_AFTER`, at most :data:`MAX_ENDED` of
them): a late firing of it is a duplicate, not a new generation.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from agents import catalogue, holds
from agents.events import Effect

if TYPE_CHECKING:
    from agents.run_queue import Pending
    from agents.state import Agent

__all__ = ["DAY", "FORGET_AFTER", "MAX_ENDED", "SWEEP_EVERY", "forget", "sweep"]

log = logging.getLogger(__name__)

DAY = 86_400.0
# ended generations remembered (each firing of one is a duplicate) for ``forget_after`` seconds
# but at most this many, the oldest forgotten first: at 10 generations a second for a day, about
# one in nine would otherwise be kept, and rewritten in every snapshot
MAX_ENDED = 100_000
FORGET_AFTER = 30 * DAY  # seconds a generation is remembered: the default of wfm agent --keep-days
SWEEP_EVERY = 60.0  # seconds of ``now`` between two looks for what to forget


def forget(agent: Agent, workflow: str, gid: str, version: str, now: float) -> list[Effect]:
    """APPL_END: forget the generation (its queued runs too), then maybe an old version."""
    if (workflow, gid) in agent.ended:
        return []
    _end(agent, workflow, gid, now)
    current = catalogue.current(agent, workflow)
    if current is not None:
        latest = agent.deployments[workflow, current]
        latest.ended = latest.ended or version == current
        if latest.ended:
            return catalogue.collect(agent, workflow)
    return catalogue.collect(agent, workflow) if catalogue.retiring(agent, workflow) else []


def _end(agent: Agent, workflow: str, gid: str, at: float) -> list[Pending]:
    """Drop the generation, its queued runs (returned) and its holds, and remember it ended ``at``."""
    agent.generations.pop((workflow, gid), None)
    holds.forget(agent, workflow, gid)
    dropped = [p for p in agent.pending if (p.run.workflow, p.run.gid) == (workflow, gid)]
    agent.pending = [p for p in agent.pending if (p.run.workflow, p.run.gid) != (workflow, gid)]
    agent.held = [r for r in agent.held if (r.workflow, r.gid) != (workflow, gid)]  # agents.conditions
    for held in [k for k in agent.standing_by if k[:2] == (workflow, gid)]:  # agents.standby
        del agent.standing_by[held]
    agent.ended[workflow, gid] = at
    while len(agent.ended) > MAX_ENDED:  # memory and snapshot stay bounded at any rate
        agent.ended.popitem(last=False)
    return dropped


def sweep(agent: Agent, now: float) -> list[Effect]:
    """Forget what is older than ``forget_after``: ended generations (a firing of one is then
    new), and generations whose APPL_END never came (lost: they would stay in memory, in the
    journal's snapshot and keep their run logs for ever), unless a run of theirs still runs;
    then the versions of retired workflows that only forgotten generations held.

    Once per minute of ``now`` and with the minute's cutoff, so that replaying the journal,
    which leaves out the ticks that changed nothing else, forgets the same at the same events."""
    minute = now // SWEEP_EVERY
    if minute <= agent.swept:
        return []
    agent.swept = minute
    start = minute * SWEEP_EVERY
    cutoff = start - agent.forget_after
    expired = []
    for key, at in agent.ended.items():  # oldest first
        if at is None:
            agent.ended[key] = start
        elif at < cutoff:
            expired.append(key)
        else:
            break
    for key in expired:
        del agent.ended[key]
    busy = {(r.workflow, r.gid) for r in agent.running.values()}
    forgotten: set[str] = set()
    for (workflow, gid), generation in list(agent.generations.items()):
        if generation.since is None:
            generation.since = start
        elif generation.since < cutoff and (workflow, gid) not in busy:
            dropped = _end(agent, workflow, gid, start)
            forgotten.add(workflow)
            log.warning(
                "forgot %s %s: not seen to end within %g days%s",
                workflow,
                gid,
                agent.forget_after / DAY,
                f" ({len(dropped)} queued runs dropped)" if dropped else "",
            )
    retiring = sorted(w for w in forgotten if catalogue.retiring(agent, w))
    return [e for workflow in retiring for e in catalogue.collect(agent, workflow)]
