"""What the agent does not act on: envelopes its trust refuses, firings and statuses not signed by
whom they must be. Each is counted (:attr:`Agent.refused <agents.state.Agent.refused>`, by kind)
and logged once per kind and signer, then once a minute: a flood of forged messages must not flood
the log.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from agents.envelope import JobInfo
from agents.trust import Refusal
from broker.language import Publication
from workflow_messages import JOBSTATUS, TRIGGER

if TYPE_CHECKING:
    from agents.state import Agent

__all__ = ["ignore", "refuse", "refuse_firing", "unsigned"]

log = logging.getLogger(__name__)


def refuse(agent: Agent, refusal: Refusal, fields: dict[str, str], now: float) -> str:
    """Count a refused envelope and log it; the reason, for the acknowledgement."""
    agent.refused[refusal.kind] += 1
    unlogged = agent.refusal_log.admit(f"{refusal.kind} {refusal.who}", now)
    if unlogged is not None:
        what = " ".join(fields[name] or "?" for name in ("command", "applname", "jobname"))
        log.warning(
            "refused AGENT_CTL %s from %s: %s (%d %s refusals%s)",
            what,
            refusal.who,
            refusal.reason,
            agent.refused[refusal.kind],
            refusal.kind,
            f", {unlogged} not logged since the last" if unlogged else "",
        )
    return refusal.reason


def unsigned(
    agent: Agent, publications: tuple[Publication, ...], signers: dict[str, str], now: float
) -> Refusal | None:
    """Why ``publications`` may not be acted on, or None: a Trigger not signed by whom may
    start a generation, a status not signed by the agent of its job (``signers``: job ->
    agent). A broker can then only drop, delay or reorder what the agent acts on."""
    for publication in publications:
        try:
            if publication.cls == TRIGGER:
                agent.trust.admit_trigger(publication, now, agent.forget_after)
            elif publication.cls == JOBSTATUS:
                job = str(publication.get("jobname"))
                agent.trust.admit_status(publication, now, signers.get(job))
        except Refusal as refusal:
            agent.refused[refusal.kind] += 1
            what = f"{publication.cls} {publication.get('jobname', '')}".rstrip()
            return Refusal(refusal.kind, refusal.who, f"{what} from {refusal.who}: {refusal.reason}")
    return None


def refuse_firing(agent: Agent, info: JobInfo, reason: str, now: float, signer: str = "") -> None:
    ignore(agent, "firing", f"{info.workflow} {info.job}", reason, now, signer)


def ignore(agent: Agent, what: str, of: str, reason: str, now: float, signer: str = "") -> None:
    """Count a firing or a status not acted on, and log it as :func:`refuse` does an envelope:
    once per workflow and signer of what was refused, then once a minute."""
    agent.refused[what] += 1
    unlogged = agent.refusal_log.admit(f"{what} {of.split()[0]} {signer}", now)
    if unlogged is not None:
        log.warning(
            "ignored a %s of %s: %s (%d %ss refused%s)",
            what,
            of,
            reason,
            agent.refused[what],
            what,
            f", {unlogged} not logged since the last" if unlogged else "",
        )
