"""``<workflow max-active="N" overlap="queue|skip|cancel">`` read from XML, and how ``wfm
validate`` shows it (the rules and the DEPLOY record: :mod:`workflow_messages.overlap`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lxml import etree

from wfm.workflow.errors import Problem
from workflow_messages.overlap import DEFAULT_POLICY, Overlap, parse_max_active

if TYPE_CHECKING:
    from wfm.workflow.model import Workflow

__all__ = ["listing", "read"]


def read(root: etree._Element, problems: list[Problem]) -> Overlap | None:
    """The setting of ``<workflow>`` (None: no limit, as without the attributes). A count that is
    not a number is reported here, where the text is; ``overlap`` without ``max-active`` too (a
    policy with no limit would never apply); a policy not known is left for the model's checks."""
    label, line = f"workflow {root.get('name')!r}", root.sourceline
    text, policy = root.get("max-active"), root.get("overlap")
    if text is None:
        if policy is not None:
            problems.append(Problem(line, f'{label}: overlap={policy!r} needs max-active="N" (the limit)'))
        return None
    try:
        limit = parse_max_active(text)
    except ValueError as error:
        problems.append(Problem(line, f"{label}: {error}"))
        return None
    return Overlap(limit, DEFAULT_POLICY if policy is None else policy)


def listing(workflow: Workflow) -> dict[str, Any]:
    """``wfm validate -o json``'s ``overlap`` (only for a workflow that sets it)."""
    assert workflow.overlap is not None
    return workflow.overlap.record()
