"""Deadlines watched: a job of this agent (or, on the coordinator, the generation's APPL_END) that
has not published its status when its deadline (``JobInfo.deadline``,
:mod:`workflow_messages.deadlines`) comes publishes a deadline's ALERT at once, without waiting for
the job to end.

Each agent watches its own jobs: every agent of a workflow hears every APPL_START of it
(:mod:`agents.coordinator`), so it knows the generation started (``GenerationState.since``, its
own clock) even while its job waits for late predecessors; and it knows, from its own state,
whether the job has published its status (``jobs[job] == "done"``). No message is added to any
generation. A job that ends on time, a generation cancelled (here or upstream) or over here
(forgotten: expired, ended) has no alert.

A job with standby agents (the coordinator's APPL_END with its first start job's) is watched by
whoever runs it: its agent, until it was handed over; the standby that took it over from then on,
the runs it took over included (:mod:`agents.standby`). A standby follows the deadlines' alerts of
the copies it holds (``missed``): one the primary published is not published again.

Checked after every event (:meth:`agents.state.Agent.handle`, the adapter's one-second ticks
included), like :func:`agents.forgetting.sweep`: the event whose check published an alert is
journaled with its time, the alert is remembered in the generation (``missed``, in the snapshot),
so a restart replaying the journal decides the same and publishes no alert twice; an alert is
emitted before the journal record is written, as every status is (a crash between the two sends it
twice, under the same id: the broker keeps one retained copy per id).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from agents import publishing, standby
from agents.events import Effect, Emit
from workflow_messages.deadlines import Deadline, deadline_alert, parse_deadline

if TYPE_CHECKING:
    from agents.catalogue import Deployment
    from agents.state import Agent

__all__ = ["check"]


def check(agent: Agent, now: float) -> list[Effect]:
    """The alerts of the deadlines missed by ``now`` and not alerted yet."""
    watched = {
        key: mine
        for key, deployment in agent.deployments.items()
        if deployment.complete
        and (jobs := _watched(agent.name, *key, deployment))
        and (mine := _mine(agent, deployment, jobs))
    }
    if not watched:  # most agents, at most events: no scan of the generations
        return []
    effects: list[Effect] = []
    for (workflow, gid), generation in agent.generations.items():
        if generation.since is None or generation.halted or generation.queued:
            continue  # (queued: it has not started, agents.overlap)
        for job, deadline in watched.get((workflow, generation.version or ""), ()):
            if job in generation.missed or generation.jobs.get(job) == "done":
                continue
            due = deadline.due(generation.since)
            if now < due:
                continue
            generation.missed.append(job)
            # kept with the outcome too, which RUNS answers after the generation is forgotten
            missed = publishing.outcome(agent, workflow, gid).setdefault("missed", [])
            if job not in missed:
                missed.append(job)
            alert = deadline_alert(workflow, job, gid, deadline.text, generation.since, due, agent.name)
            effects.append(Emit(alert))
    return effects


def _mine(
    agent: Agent, deployment: Deployment, jobs: tuple[tuple[str, Deadline], ...]
) -> tuple[tuple[str, Deadline], ...]:
    """Those of ``jobs`` this agent runs: not a standby's copy it has not taken over (its
    primary watches), nor a job it handed over (its standby does, :mod:`agents.standby`)."""
    if not agent.handed and not any(deployment.jobs[job].primary for job, _ in jobs):
        return jobs  # (most agents: nothing of standbys)
    return tuple(
        (job, deadline)
        for job, deadline in jobs
        if not standby.passive(agent, info := deployment.jobs[job]) and not standby.ignored(agent, info)
    )


# (agent, workflow, version, jobs) -> the jobs with a deadline: a complete version's jobs do not
# change, and most versions have none, so an event costs a lookup per generation, not a scan
_WATCHED: dict[tuple[str, str, str, int], tuple[tuple[str, Deadline], ...]] = {}


def _watched(
    agent: str, workflow: str, version: str, deployment: Deployment
) -> tuple[tuple[str, Deadline], ...]:
    key = (agent, workflow, version, len(deployment.jobs))
    watched = _WATCHED.get(key)
    if watched is None:
        if len(_WATCHED) >= 1024:
            _WATCHED.clear()
        watched = _WATCHED[key] = tuple(
            (job, _parsed(info.deadline))
            for job, info in deployment.jobs.items()
            if info.deadline is not None  # (a standby's copy too, watched once taken over: _mine)
        )
    return watched


@lru_cache(maxsize=256)
def _parsed(text: str) -> Deadline:
    return parse_deadline(text)  # checked when the envelope was read
