"""Asking agents and acting on generations: the queries ``wfm workflows``, ``wfm runs`` and ``wfm
logs`` send, the answers, and the envelopes of ``wfm cancel``, ``rerun``, ``hold``, ``release`` and
``approve``.

Queries read and change nothing, so they are a class of their own, ``AGENT_QUERY``, unsigned::

    [class,AGENT_QUERY],[agentname,'*'|A],[query,WORKFLOWS|RUNS|LOGS],[request,ID],[content,JSON]
    [class,AGENT_ANSWER],[agentname,A],[request,ID],[result,OK|ERROR],[content,JSON]

Every agent subscribes to every query and answers those addressed to it or to ``*``; the asker
subscribes to the answers of its own request id. CANCEL, RERUN, HOLD, RELEASE and APPROVE change
what agents run, so they are AGENT_CTL envelopes, signed by a deployer or an operator
(``agents.trust.OPERATOR_ROLES``) and acknowledged with AGENT_ACK; their version and job are ``*``
(they act on generations, whatever version they run on; the job a HOLD or an APPROVE is about is
in its content).
"""

from __future__ import annotations

import json
from typing import Any

from broker.language import Filter, Publication
from workflow_messages._build import filter_of
from workflow_messages.names import AGENT_ACK, AGENT_ANSWER, AGENT_CTL, AGENT_QUERY

__all__ = [
    "ANY",
    "APPROVE",
    "CANCEL",
    "HOLD",
    "MAX_CONTENT",
    "OPERATIONS",
    "QUERIES",
    "RELEASE",
    "RERUN",
    "answer",
    "answer_advertisement",
    "answer_subscription",
    "decode_content",
    "encode_content",
    "operation",
    "operation_acks",
    "query",
    "query_advertisement",
    "query_subscription",
]

ANY = "*"  # every agent (a query), any version or job (an operation)
CANCEL, RERUN = "CANCEL", "RERUN"
HOLD, RELEASE, APPROVE = "HOLD", "RELEASE", "APPROVE"  # wfm hold, wfm release, wfm approve
# the AGENT_CTL commands that act on generations, not on a deployment
OPERATIONS = (CANCEL, RERUN, HOLD, RELEASE, APPROVE)

QUERIES = ("WORKFLOWS", "RUNS", "LOGS")
# characters of content decoded at most: a frame's payload (1 MiB, broker.transport.MAX_FRAME, which
# this layer may not import); anything longer did not come in one message
MAX_CONTENT = 1 << 20


def encode_content(data: dict[str, Any]) -> str:
    """JSON that is a valid string value: ASCII (a log's bytes may be anything), no line break,
    no ``'`` (a string value cannot hold both quote kinds)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":")).replace("'", "\\u0027")


def decode_content(value: object) -> dict[str, Any]:
    """The JSON object a query, an answer or an operation carries; ValueError (one line) otherwise,
    whatever the sender made of it: anyone may publish a query, and nesting a few thousand brackets
    deep makes the decoder raise RecursionError, which would end the reader that decodes it."""
    if not isinstance(value, str):
        raise ValueError("content must be a string")
    if len(value) > MAX_CONTENT:
        raise ValueError(f"content of {len(value)} characters exceeds the limit of {MAX_CONTENT}")
    try:
        data = json.loads(value)
    except json.JSONDecodeError as error:
        raise ValueError(f"content is not JSON: {error.msg} at {error.pos}") from None
    except RecursionError:
        raise ValueError("content is not JSON: nested too deeply") from None
    except ValueError as error:  # a number of more than 4300 digits
        raise ValueError(f"content is not JSON: {error}") from None
    if not isinstance(data, dict):
        raise ValueError("content must be a JSON object")
    return data


def query_advertisement() -> Filter:
    """What an asker advertises before it publishes queries."""
    return filter_of(AGENT_QUERY, {}, present=("agentname", "query", "request", "content"))


def query_subscription() -> Filter:
    """Every query (an agent picks those addressed to it or to every agent)."""
    return filter_of(AGENT_QUERY, {}, present=("agentname", "query", "request"))


def query(agent: str, kind: str, request: str, content: dict[str, Any]) -> Publication:
    return Publication(
        AGENT_QUERY,
        {"agentname": agent, "query": kind, "request": request, "content": encode_content(content)},
    )


def answer_advertisement(agent: str) -> Filter:
    """What ``agent`` advertises to answer queries."""
    return filter_of(AGENT_ANSWER, {"agentname": agent}, present=("request", "result", "content"))


def answer_subscription(request: str) -> Filter:
    """Every agent's answer to one request."""
    return filter_of(AGENT_ANSWER, {"request": request}, present=("agentname",))


def answer(agent: str, request: str, result: str, content: dict[str, Any]) -> Publication:
    return Publication(
        AGENT_ANSWER,
        {"agentname": agent, "request": request, "result": result, "content": encode_content(content)},
    )


def operation(agent: str, workflow: str, command: str, content: dict[str, Any]) -> Publication:
    """An unsigned operation envelope (:data:`OPERATIONS`) for ``agent`` (a deployer or an
    operator signs it)."""
    return Publication(
        AGENT_CTL,
        {
            "agentname": agent,
            "applname": workflow,
            "version": ANY,
            "command": command,
            "jobname": ANY,
            "content": encode_content(content),
        },
    )


def operation_acks(workflow: str, command: str) -> Filter:
    """Every agent's acknowledgements of ``command`` (one of :data:`OPERATIONS`) envelopes of ``workflow``."""
    return filter_of(
        AGENT_ACK, {"applname": workflow, "version": ANY, "command": command}, present=("agentname",)
    )
