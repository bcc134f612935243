"""Standby agents in the definition: a job's ``standby="agentB agentC"`` and ``takeover="10m"``
(docs/workflows.md, "Standby agents").

:func:`problems` are the rules every Workflow is checked with, however it was made: standbys that
are agent names, each once, none the job's own agent; a takeover in range, and only with standbys;
no standby for a job in a pool (its slots are asked for by the job's own agent).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from wfm.workflow.errors import Problem
from workflow_messages import check_name
from workflow_messages.standby import parse_takeover

if TYPE_CHECKING:
    from wfm.workflow.model import Workflow

__all__ = ["problems"]


def problems(workflow: Workflow) -> Iterator[Problem]:
    for job in workflow.jobs:
        label = f"job {job.name!r}"
        seen: set[str] = set()
        for agent in job.standby:
            try:
                check_name(agent, f"{label}: standby")
            except ValueError as error:
                yield Problem(job.line, str(error))
                continue
            if agent == job.agent:
                yield Problem(job.line, f"{label}: standby {agent!r} is the job's own agent")
            elif agent in seen:
                yield Problem(job.line, f"{label}: standby {agent!r} is named twice")
            seen.add(agent)
        if job.takeover is not None:
            if not job.standby:
                yield Problem(job.line, f'{label}: takeover={job.takeover!r} needs standby="AGENT ..."')
            try:
                parse_takeover(job.takeover)
            except ValueError as error:
                yield Problem(job.line, f"{label}: {error}")
        if job.standby and job.pool is not None:
            yield Problem(job.line, f"{label}: a job in a pool ({job.pool}) has no standby agents")
        if job.standby and job.approval:
            yield Problem(job.line, f"{label} is an approval step: it has no standby agents")
