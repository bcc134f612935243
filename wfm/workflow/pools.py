"""Pools in the definition: ``<pool name slots keeper lease>``, declared after the calendars and
before the jobs, and a job's ``pool="NAME"`` (docs/workflows.md, Pools).

:func:`problems` are the rules every Workflow is checked with, however it was made: names that are
names, declared once, at least one slot, a lease in range, a keeper that is one of the workflow's
agents (it learns the pool from its DEPLOY, and only agents of the workflow get one), and every
job's ``pool`` declared.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from wfm.workflow.errors import Problem, declared
from workflow_messages import check_name
from workflow_messages.pools import LEASE_RULE, MAX_SLOTS, SLOTS_RULE, is_lease

if TYPE_CHECKING:
    from wfm.workflow.model import Workflow

__all__ = ["problems"]


def problems(workflow: Workflow) -> Iterator[Problem]:
    yield from declared(((pool.name, pool.line) for pool in workflow.pools), "pool")
    names = {pool.name for pool in workflow.pools}
    agents = set(workflow.agents)
    for pool in workflow.pools:
        label = f"pool {pool.name!r}"
        slots = pool.slots
        if isinstance(slots, bool) or not isinstance(slots, int) or not 1 <= slots <= MAX_SLOTS:
            yield Problem(pool.line, f"{label}: {SLOTS_RULE}, not {slots!r}")
        if not is_lease(pool.lease):
            yield Problem(pool.line, f"{label}: {LEASE_RULE}, not {pool.lease!r}")
        if pool.keeper is not None:
            try:
                check_name(pool.keeper, f"{label}: keeper")
            except ValueError as error:
                yield Problem(pool.line, str(error))
            else:
                if pool.keeper not in agents:
                    yield Problem(
                        pool.line,
                        f"{label}: keeper {pool.keeper!r} runs no job of the workflow"
                        f" (one of {', '.join(sorted(agents))})",
                    )
    for job in workflow.jobs:
        if job.pool is not None and job.pool not in names:
            known = f"declared: {', '.join(sorted(names))}" if names else "none is declared"
            yield Problem(job.line, f"job {job.name!r}: unknown pool {job.pool!r} ({known})")
