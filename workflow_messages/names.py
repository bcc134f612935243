"""The fixed words of workflow messages (docs/workflows.md, Messages): classes, virtual jobs, statuses.

Outside checks match these exact strings, and the translator, the agents and the monitor must agree
on them, so each is spelled once, here.
"""

from __future__ import annotations

from broker.language import Var
from broker.language.values import NAME_RE

__all__ = [
    "ACCEPTS",
    "AGENT_ACK",
    "AGENT_ANSWER",
    "AGENT_CTL",
    "AGENT_QUERY",
    "APPL_END",
    "APPL_START",
    "CANCELLED",
    "EXPIRED",
    "FAILURE",
    "GID",
    "HISTORY_QUERY",
    "HISTORY_RESULT",
    "JOBSTATUS",
    "NORUN",
    "SUCCESS",
    "TRIGGER",
    "check_name",
]

AGENT_CTL, AGENT_ACK, JOBSTATUS, TRIGGER = "AGENT_CTL", "AGENT_ACK", "JOBSTATUS", "Trigger"
SUCCESS, FAILURE, NORUN = "SUCCESS", "FAILURE", "NORUN"
CANCELLED = "CANCELLED"  # APPL_END of a generation wfm cancel stopped
# APPL_END of a generation whose Trigger reached its coordinator after the expiry it carries
# (wfm trigger --ttl): nothing of it ran
EXPIRED = "EXPIRED"
# questions to agents (what is deployed, recent runs, a job's log) and their answers
AGENT_QUERY, AGENT_ANSWER = "AGENT_QUERY", "AGENT_ANSWER"
# history asked and answered over the overlay (wfm.history.protocol)
HISTORY_QUERY, HISTORY_RESULT = "HISTORY_QUERY", "HISTORY_RESULT"
# The virtual jobs every workflow has: APPL_START runs first (when the Trigger arrives), APPL_END
# is published by the coordinator once the generation is over (see workflow_messages.generation).
APPL_START = "APPL_START"
APPL_END = "APPL_END"
GID = Var("S", "X")  # binds one generation id across all atoms of a job's condition
NAME_RULE = "letters, digits and _ - : /, not starting with a digit or -"


def check_name(name: object, what: str) -> str:
    """``name`` if it is a valid name of a workflow, job or agent (an attribute value of the filters
    built from it needs no quoting); ValueError naming ``what`` otherwise. ``wfm validate`` applies
    the rule to a definition and an agent to what a DEPLOY names, so neither takes what the other
    would refuse."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ValueError(f"{what} {name!r} is not a valid name ({NAME_RULE})")
    return name


ACCEPTS: dict[str, tuple[str, ...]] = {  # the predecessor statuses each `on` lets a job run after
    "success": (SUCCESS, NORUN),
    "failure": (FAILURE,),
    "always": (SUCCESS, NORUN, FAILURE),
}
