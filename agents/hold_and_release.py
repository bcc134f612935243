"""HOLD and RELEASE envelopes (``wfm hold``, ``wfm release``): add or remove a hold rule
(:mod:`agents.holds`), answering the acknowledgement's result and detail, and effects
(:data:`agents.cancel_and_rerun.Operated`).

A release removes the rule it names, exactly: releasing one job of a workflow held whole leaves
the workflow held (the detail says what is still held), so that what is held is always what was
asked, not what a set of overlapping holds and releases happens to leave.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agents import run_queue
from agents.commands import Hold
from agents.holds import described, held

if TYPE_CHECKING:
    from agents.cancel_and_rerun import Operated
    from agents.state import Agent

__all__ = ["hold"]


def hold(agent: Agent, command: Hold, now: float) -> Operated:
    """HOLD: runs the rule covers do not start until it is released; RELEASE: they may again."""
    workflow = command.control.workflow
    rule = (workflow, command.job, command.gid)
    what = described(rule)
    if command.release:
        if rule not in agent.holds:
            return "UNCHANGED", f"{what} was not held{_still(agent, workflow)}", []
        agent.holds.discard(rule)
        effects = run_queue.pump(agent, now)
        waiting = sum(
            p.run.workflow == workflow and held(agent, workflow, p.run.gid, p.run.job) for p in agent.pending
        )
        detail = f"{what} released: {len(effects)} started{_still(agent, workflow, waiting)}"
        return "OK", detail, effects
    if rule in agent.holds:
        return "UNCHANGED", f"{what} was held already", []
    if (workflow, command.gid) in agent.ended:  # its holds were forgotten with it: never again
        return "UNCHANGED", f"generation {command.gid} is over here: nothing to hold", []
    agent.holds.add(rule)
    waiting = sum(
        held(agent, workflow, p.run.gid, p.run.job) for p in agent.pending if p.run.workflow == workflow
    )
    running = sum(
        held(agent, workflow, run.gid, run.job) for run in agent.running.values() if run.workflow == workflow
    )
    return "OK", f"{what} held: {waiting} queued here wait, {running} running go on", []


def _still(agent: Agent, workflow: str, waiting: int = 0) -> str:
    """What of ``workflow`` is still held here, for a release's detail."""
    rules = sorted(rule for rule in agent.holds if rule[0] == workflow)
    if not rules:
        return ""
    queued = f"; {waiting} queued here still wait" if waiting else ""
    return f" (still held: {'; '.join(map(described, rules))}{queued})"
