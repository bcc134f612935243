"""A generation the coordinator ends without starting it: its Trigger came after its expiry
(``wfm trigger --ttl``), or beyond the workflow's limit on generations at once with
``overlap="skip"`` (:mod:`agents.overlap`), or it was cancelled or replaced while it waited its turn.

No APPL_START is published, so no job of it fires on any agent; its APPL_END goes out at once,
which clears the brokers' join state of it and shows monitors and the history that it ended, and
the generation is over here: a firing of it delivered again, before or after a restart, is a
duplicate.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from agents import forgetting, publishing
from agents.envelope import firing_date
from agents.events import Effect, Emit
from broker.language import Publication
from workflow_messages import APPL_END, APPL_START

if TYPE_CHECKING:
    from agents.state import Agent

__all__ = ["end"]


def end(
    agent: Agent,
    workflow: str,
    version: str,
    gid: str,
    status: str,
    detail: str,
    publications: tuple[Publication, ...],
    now: float,
) -> list[Effect]:
    """Publish the generation's APPL_END (``status``, ``detail``) and forget the generation."""
    generation = agent.generations[workflow, gid]
    generation.jobs[APPL_START] = "done"
    generation.ended = True
    with contextlib.suppress(ValueError):  # a bad date does not matter to a generation that does not run
        publishing.outcome(agent, workflow, gid)["date"] = firing_date(publications).isoformat()
    emitted = publishing.publication(agent, workflow, version, APPL_END, gid, status, detail, started=now)
    return [Emit(emitted), *forgetting.forget(agent, workflow, gid, version, now)]
