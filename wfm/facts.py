"""History, then live, for conditions on other workflows and on events: what the historians kept
for a workflow's ``<wait>`` and ``<event>`` conditions, handed to the waiting jobs' agents.

A job's agent subscribes each condition when the job's DEPLOY arrives (``agents.conditions``);
from then on it is live. What was published before (a status of the other workflow's run that
ended before this workflow was deployed) only the history has: once every agent has acknowledged
the deployment, ``wfm deploy`` asks the historians for each condition's filter over the last
:data:`HISTORY_DAYS` days, up to the moment it asks, and sends each agent what it found in FACTS
envelopes, signed as the DEPLOY was. The subscription was made first and given
``SUBSCRIPTION_SETTLE`` to reach the publishers' brokers, so a publication is in the answer or
delivered live, possibly both: the agent keeps each once. Nothing polls: the history is asked
once per deployment. No historian answering costs only the past (a warning says so).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

from broker.client import Brokers
from broker.language import Filter, Publication
from wfm.history.asker import HistoryError
from wfm.history.overlay import SUBSCRIPTION_SETTLE, ask_filter, connection
from wfm.workflow import Plan, Workflow
from workflow_messages import AGENT_CTL
from workflow_messages.conditions import facts_content, subscription

__all__ = ["HISTORY_DAYS", "PER_ENVELOPE", "ask_past", "facts_publications", "wanted"]

HISTORY_DAYS = 35  # how far back a deployment looks for what its conditions wait for
PER_ENVELOPE = 200  # facts per FACTS envelope: a few hundred bytes each, well within a frame


def wanted(workflow: Workflow) -> dict[str, list[Filter]]:
    """The distinct subscriptions of each agent's conditions, by agent (none: no conditions)."""
    found: dict[str, list[Filter]] = {}
    for job in workflow.jobs:
        for condition in job.conditions:
            filters = found.setdefault(job.agent, [])
            if (each := subscription(condition)) not in filters:
                filters.append(each)
    return found


async def ask_past(
    uri: Brokers, filters: Iterable[Filter], timeout: float, now: float | None = None
) -> tuple[dict[Filter, list[Publication]], list[str]]:
    """What the historians kept of each filter over the last :data:`HISTORY_DAYS` days, and one
    warning line per problem (a historian that stopped answering, or none that answered)."""
    await asyncio.sleep(SUBSCRIPTION_SETTLE)  # the agents' subscriptions reach the publishers
    until = time.time() if now is None else now
    since = until - HISTORY_DAYS * 86400
    found: dict[Filter, list[Publication]] = {}
    warnings: list[str] = []
    async with connection(uri) as client:
        for wanted_filter in dict.fromkeys(filters):
            try:
                asked = await ask_filter(client, (wanted_filter, since, until), until, timeout)
            except HistoryError as error:
                return found, [
                    *warnings,
                    f"{error}: the conditions see only what is published from now on",
                ]
            warnings += asked.warnings()
            found[wanted_filter] = [result.publication for result in asked.history()]
    return found, warnings


def facts_publications(
    plan: Plan, filters: dict[str, list[Filter]], found: dict[Filter, list[Publication]]
) -> list[Publication]:
    """The FACTS envelopes (unsigned) that hand each agent what was found for its conditions."""
    envelopes: list[Publication] = []
    for agent, wanted_filters in filters.items():
        facts = [(f, p) for f in wanted_filters for p in found.get(f, ())]
        for start in range(0, len(facts), PER_ENVELOPE):
            values = {
                "agentname": agent,
                "command": "FACTS",
                "content": facts_content(facts[start : start + PER_ENVELOPE]),
                "applname": plan.workflow,
                "jobname": "*",
                "version": plan.version,
            }
            envelopes.append(Publication(AGENT_CTL, values))
    return envelopes
