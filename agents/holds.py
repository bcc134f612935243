"""Holds (``wfm hold``, ``wfm release``): which runs may not start now.

A hold is a rule ``(workflow, job, gid)``, ``*`` standing for every job or every generation (new
ones included). A run it covers stays in the run queue, queued or waiting for its retry, and
:func:`agents.run_queue.pump` passes it by; releasing the rule lets it start, once, as any queued
run. A run already started goes on: a hold only keeps what has not started from starting (as
Control-M's hold). The rules are the agent's state (:attr:`Agent.holds
<agents.state.Agent.holds>`), set by envelopes in the journal and kept in its snapshot, so a
restart holds what was held.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workflow_messages.operations import ANY

if TYPE_CHECKING:
    from agents.state import Agent

__all__ = ["HELD", "Rule", "described", "forget", "held", "on_hold", "shown"]

HELD = "held"  # how wfm runs shows a queued job a hold keeps from starting

Rule = tuple[str, str, str]  # (workflow, job or *, gid or *)


def held(agent: Agent, workflow: str, gid: str, job: str) -> bool:
    """Whether a hold keeps ``job`` of generation ``gid`` from starting."""
    if not agent.holds:
        return False
    return any((workflow, j, g) in agent.holds for j in (job, ANY) for g in (gid, ANY))


def shown(agent: Agent, workflow: str, gid: str, job: str, state: str) -> str:
    """A job's state as wfm runs shows it: queued (or waiting for a retry) but held is ``held``."""
    return HELD if state in ("queued", "waiting") and held(agent, workflow, gid, job) else state


def on_hold(agent: Agent, workflow: str) -> list[list[str]]:
    """The rules of ``workflow``, ``[[job or *, gid or *], ...]`` sorted: what WORKFLOWS answers."""
    return sorted([job, gid] for w, job, gid in agent.holds if w == workflow)


def forget(agent: Agent, workflow: str, gid: str) -> None:
    """The generation is over here: the holds of it alone hold nothing any more."""
    if agent.holds:
        agent.holds -= {rule for rule in agent.holds if rule[0] == workflow and rule[2] == gid}


def described(rule: Rule) -> str:
    """A rule in words, for acknowledgements: ``job X of W in generation G``, ``every job of W``."""
    workflow, job, gid = rule
    jobs = f"every job of {workflow}" if job == ANY else f"job {job} of {workflow}"
    return jobs if gid == ANY else f"{jobs} in generation {gid}"
