"""AGENT_CTL and AGENT_ACK: how a deployer hands a workflow's pieces to the agents, and how each
agent says what it did with every envelope.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Literal

from broker.language import Filter, Publication, Value
from workflow_messages._build import filter_of, text_value
from workflow_messages.names import AGENT_ACK, AGENT_CTL
from workflow_messages.operations import decode_content

__all__ = [
    "ACK_FIELDS",
    "ack",
    "ack_advertisement",
    "ack_subscription",
    "control_subscription",
    "deployer_advertisement",
    "digest",
    "envelope_digest",
    "retire_content",
    "undeploy_order",
    "withdraw_content",
]

ACK_FIELDS = ("applname", "version", "jobname", "command", "digest", "result", "detail")


def deployer_advertisement(workflow: str, version: str) -> Filter:
    """What the deployer advertises to publish the signed AGENT_CTL envelopes of one plan
    (:mod:`workflow_messages.signature`)."""
    return filter_of(
        AGENT_CTL,
        {"applname": workflow, "version": version},
        present=("agentname", "command", "content", "jobname", "signer", "signature"),
        numbers=("sequence",),
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
    applname, version, jobname, command and its :func:`envelope_digest`."""
    values: dict[str, Value] = {name: text_value(fields.get(name, "")) for name in ACK_FIELDS[:5]}
    values |= {"result": result, "detail": text_value(detail)}
    return Publication(AGENT_ACK, {"agentname": agent, **values})


def digest(content: str) -> str:
    """A short name of ``content``: the sha256 prefix acknowledgements echo."""
    return hashlib.sha256(content.encode()).hexdigest()[:12]


def envelope_digest(envelope: Publication) -> str:
    """Names an envelope in its acknowledgement: the :func:`digest` of its signature, or of its
    content if unsigned. Two envelopes may share agent, command and job (the coordinator's two
    SUBSCRIBEs for APPL_END), and the deployer must not take the acknowledgement of someone else's
    copy of its envelope (a refusal of it, say) for its own."""
    return digest(str(envelope.get("signature", envelope.get("content", ""))))


MAX_RETIRED = 100  # versions one retirement names: an agent holds a few at a time


def retire_content(versions: Iterable[str]) -> str:
    """The content of an UNDEPLOY that retires an agent a new version leaves out: the versions of
    the workflow it said it had (see ``Agent._undeploy``)."""
    return json.dumps({"retire": sorted(set(versions))})


def withdraw_content() -> str:
    """The content of an UNDEPLOY that takes back the envelope's version from an agent: a
    deployment that did not complete is rolled back (see ``agents.catalogue``)."""
    return json.dumps({"withdraw": True})


def undeploy_order(content: str) -> tuple[str, ...] | Literal[True] | None:
    """What an UNDEPLOY's content asks: None (empty: remove every version), the versions
    :func:`retire_content` names, or True (:func:`withdraw_content`); ValueError (one line) for
    anything else."""
    if not content:
        return None
    try:
        data = decode_content(content)
    except ValueError as error:
        raise ValueError(
            f"UNDEPLOY content must be empty or a retire list or a withdrawal: {error}"
        ) from None
    if data == {"withdraw": True}:
        return True
    named = data.get("retire")
    if (
        set(data) != {"retire"}
        or not isinstance(named, list)
        or not 0 < len(named) <= MAX_RETIRED
        or not all(isinstance(v, str) and 0 < len(v) <= 64 for v in named)
    ):
        shown = content[:80]
        raise ValueError(
            f"UNDEPLOY content must be empty or a retire list of 1 to {MAX_RETIRED} versions or a"
            f" withdrawal, not {shown!r}"
        )
    return tuple(named)
