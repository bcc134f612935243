"""The agent's whole state as JSON-able data, and back: the journal (:mod:`agents.journal`) keeps
a snapshot, and the events after it, so that a restarted agent has the state it had.

Deployments are kept as the envelopes that built them and rebuilt by applying those again, so the
snapshot needs no second encoding of filters, composites and calendars. Snapshots of older agents
are read: fields added since are optional.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import asdict, astuple
from typing import TYPE_CHECKING, Any

from agents import catalogue, conditions, live, pools, standby
from agents.approvals import Awaiting
from agents.commands import DeploymentCommand, read_command
from agents.envelope import Control
from agents.events import Run
from agents.generations import GenerationState
from agents.run_queue import Pending

if TYPE_CHECKING:
    from agents.state import Agent

__all__ = ["restore", "snapshot"]

log = logging.getLogger(__name__)


def snapshot(agent: Agent) -> dict[str, Any]:
    """The state of ``agent``: :func:`restore` on a new agent gives the same state."""
    return {
        "installs": agent.installs,
        "deployments": [
            {"order": d.order, "ended": d.ended, "envelopes": [astuple(c) for c in d.envelopes.values()]}
            for d in sorted(agent.deployments.values(), key=lambda d: d.order)
        ],
        "generations": [
            [
                workflow,
                gid,
                g.version,
                g.jobs,
                g.statuses,
                g.ended,
                g.since,
                g.cancelled,
                g.rerun_of,
                g.reused,
                g.cancelled_upstream,
                g.missed,
                g.queued,
            ]
            for (workflow, gid), g in agent.generations.items()
        ],
        "pending": [[asdict(p.run), p.at] for p in agent.pending],
        "running": [asdict(run) for run in agent.running.values()],
        "ended": [[workflow, gid, at] for (workflow, gid), at in agent.ended.items()],
        "swept": agent.swept,
        "trust": agent.trust.snapshot(),
        "outcomes": [[workflow, gid, record] for (workflow, gid), record in agent.outcomes.items()],
        "retired": sorted(agent.retired),
        **conditions.snapshot(agent),
        # only when there are (most agents have none): agents.holds, agents.approvals
        **({"holds": sorted(map(list, agent.holds))} if agent.holds else {}),
        **(
            {"approvals": [[asdict(a.run), a.since] for a in agent.approvals.values()]}
            if agent.approvals
            else {}
        ),
        **pools.snapshot(agent),  # only when the agent keeps or asks for a pool's slots
        **standby.snapshot(agent),  # only when it holds, took or handed a job over
        **live.snapshot(agent),  # only while a job is held, waiting, awaiting or queued
    }


def restore(agent: Agent, saved_state: dict[str, Any]) -> None:
    """Give ``agent`` (new, before any event) the state of :func:`snapshot`."""
    for saved in saved_state["deployments"]:
        controls = [Control(*fields) for fields in saved["envelopes"]]
        for control in controls:
            _reapply(agent, control)
        deployment = agent.deployments.get((controls[0].workflow, controls[0].version)) if controls else None
        if deployment is not None:
            deployment.order, deployment.ended = saved["order"], saved["ended"]
    agent.installs = saved_state["installs"]
    # snapshots without times (written before generations had an age bound) get the first sweep's
    for workflow, gid, version, jobs, statuses, ended, *later in saved_state["generations"]:
        agent.generations[workflow, gid] = GenerationState(version, jobs, statuses, ended, *later)
    agent.pending = [Pending(Run(**run), at) for run, at in saved_state["pending"]]
    agent.running = {(r.workflow, r.gid, r.job): r for r in (Run(**run) for run in saved_state["running"])}
    agent.ended = OrderedDict()
    for workflow, gid, *at in saved_state["ended"]:
        agent.ended[workflow, gid] = at[0] if at else None
    agent.swept = saved_state.get("swept", 0.0)
    if "trust" in saved_state:  # without it (an older snapshot): trust on first use again
        agent.trust.restore(saved_state["trust"])
    agent.outcomes = OrderedDict(((w, g), record) for w, g, record in saved_state.get("outcomes", []))
    # after the deployments, whose envelopes (applied again) would end the retirements
    agent.retired = {(w, v) for w, v in saved_state.get("retired", []) if (w, v) in agent.deployments}
    conditions.restore(agent, saved_state)
    agent.holds = {(w, j, g) for w, j, g in saved_state.get("holds", [])}  # none in older snapshots
    for run, since in saved_state.get("approvals", []):
        awaiting = Awaiting(Run(**run), since)
        agent.approvals[awaiting.run.workflow, awaiting.run.gid, awaiting.run.job] = awaiting
    pools.restore(agent, saved_state.get("pools"))
    standby.restore(agent, saved_state.get("standby"))  # after the deployments, which reset it
    live.restore(agent, saved_state)


def _reapply(agent: Agent, control: Control) -> None:
    """Apply a deployment's envelope again. One taken by an older agent, or half-taken by a bug,
    is skipped: an agent that cannot start is worse than one version missing."""
    try:
        command = read_command(control)
        if not isinstance(command, DeploymentCommand):
            raise ValueError("not a deployment's envelope")
        catalogue.apply(agent, command)
    except ValueError as error:
        log.warning(
            "snapshot: skipped a %s envelope of %s version %s: %s",
            control.command,
            control.workflow,
            control.version,
            error,
        )
