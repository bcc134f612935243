"""Standby agents: the words and rules that ``wfm validate``, the deployer and the agents share.

A job may name ``standby`` agents (``<job ... standby="agentB agentC" takeover="10m">``): they
get the job too, as a passive copy, and one of them takes the job over, exactly once, when the
job's agent has been gone from its broker for ``takeover`` (docs/workflows.md, "Standby agents").
The broker knows a job's takeover by its *key*, ``WORKFLOW JOB``: names hold no space nor ``,``.
"""

from __future__ import annotations

from broker.messages.qos import parse_duration

__all__ = [
    "DEFAULT_TAKEOVER",
    "MAX_TAKEOVER",
    "MIN_TAKEOVER",
    "TAKEOVER_RULE",
    "key",
    "parse_key",
    "parse_takeover",
]

DEFAULT_TAKEOVER = 600.0  # seconds: a job with standbys and no takeover waits ten minutes
MIN_TAKEOVER = 2.0  # seconds: the primary fences its runs after half of it, a heartbeat or two
MAX_TAKEOVER = 7 * 86_400.0  # a week: a longer one is a typo
TAKEOVER_RULE = f"takeover must be a duration from {MIN_TAKEOVER:g} s to 7 days with its unit (30s, 10m, 2h)"


def parse_takeover(text: str) -> float:
    """The seconds ``text`` says (``90s``, ``10m``, ``2h``, ``1d``); ValueError (one line:
    :data:`TAKEOVER_RULE`) for anything else."""
    try:
        seconds = parse_duration(text)
    except (ValueError, TypeError):
        raise ValueError(f"{TAKEOVER_RULE}, not {text!r}") from None
    if text.strip() != text or not text[-1:].isalpha() or not MIN_TAKEOVER <= seconds <= MAX_TAKEOVER:
        raise ValueError(f"{TAKEOVER_RULE}, not {text!r}")
    return seconds


def key(workflow: str, job: str) -> str:
    """The key the broker knows a job's takeover by."""
    return f"{workflow} {job}"


def parse_key(text: str) -> tuple[str, str]:
    """(workflow, job) of a :func:`key`; ValueError if it is not one."""
    workflow, space, job = text.partition(" ")
    if not space or not workflow or not job or " " in job:
        raise ValueError(f"{text!r} is not a standby key 'WORKFLOW JOB'")
    return workflow, job
