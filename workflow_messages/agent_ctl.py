"""AGENT_CTL and AGENT_ACK: how a deployer hands a workflow's pieces to the agents, and how each
agent says what it did with every envelope.
"""

from __future__ import annotations

import hashlib

from broker.language import Filter, Publication, Value
from workflow_messages._build import filter_of, text_value
from workflow_messages.names import AGENT_ACK, AGENT_CTL

__all__ = [
    "ACK_FIELDS",
    "ack",
    "ack_advertisement",
    "ack_subscription",
    "control_subscription",
    "deployer_advertisement",
    "digest",
]

ACK_FIELDS = ("applname", "version", "jobname", "command", "digest", "result", "detail")


def deployer_advertisement(workflow: str, version: str) -> Filter:
    """What the deployer advertises to publish the AGENT_CTL envelopes of one plan."""
    return filter_of(
        AGENT_CTL,
        {"applname": workflow, "version": version},
        present=("agentname", "command", "content", "jobname"),
    )


def control_subscription(agent: str) -> Filter:
    """Every AGENT_CTL envelope addressed to ``agent``."""
    return filter_of(AGENT_CTL, {"agentname": agent})


def ack_advertisement(agent: str) -> Filter:
    """What ``agent`` advertises to acknowledge the envelopes it processed."""
    return filter_of(AGENT_ACK, {"agentname": agent}, present=ACK_FIELDS)


def ack_subscription(workflow: str, version: str) -> Filter:
    """Every agent's acknowledgements of one version of ``workflow``: what the deployer waits on."""
    return filter_of(AGENT_ACK, {"applname": workflow, "version": version}, present=("agentname",))


def ack(agent: str, fields: dict[str, str], result: str, detail: str) -> Publication:
    """An AGENT_ACK publication, fitting :func:`ack_advertisement`; ``fields`` gives the envelope's
    applname, version, jobname, command and the :func:`digest` of its content ('' when missing)."""
    values: dict[str, Value] = {name: text_value(fields.get(name, "")) for name in ACK_FIELDS[:5]}
    values |= {"result": result, "detail": text_value(detail)}
    return Publication(AGENT_ACK, {"agentname": agent, **values})


def digest(content: str) -> str:
    """Names an envelope's content in its acknowledgement (two envelopes may share agent, command
    and job, e.g. the coordinator's two SUBSCRIBEs for APPL_END)."""
    return hashlib.sha256(content.encode()).hexdigest()[:12]
