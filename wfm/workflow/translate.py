"""Workflow -> deployment plan: the AGENT_CTL envelopes each agent receives. Pure: no I/O.

For workflow W at version V, every job J on agent A gets, in this order: ADVERTISE (its JOBSTATUS),
JOBINFO (JSON: what to run, when, after what) and COMPOSITESUBSCRIBE (JSON: the condition that runs
it, and the filter that clears a generation's join state). Each agent first SUBSCRIBEs to the
workflow's APPL_END, to forget finished generations. The coordinator (the agent of the first start
job) also runs the virtual jobs: APPL_START fires on the trigger; APPL_END is not a composite but
decided by :func:`workflow_messages.decide_end` over every status of a generation, because jobs
on a branch not taken never publish (see docs/workflows.md).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from itertools import chain
from typing import Any

from broker.language import Filter, Publication
from wfm.workflow.model import Workflow
from workflow_messages import (
    AGENT_CTL,
    APPL_END,
    APPL_START,
    cleanup_subscription,
    deployer_advertisement,
    generation_end,
    job_condition,
    status_advertisement,
    status_subscription,
    trigger_atom,
)

__all__ = ["Envelope", "Plan", "encode", "translate"]


@dataclass(frozen=True, slots=True)
class Envelope:
    """One AGENT_CTL message: ``command`` for ``agent`` about ``job``, with its ``content`` text."""

    agent: str
    command: str
    content: str
    job: str


@dataclass(frozen=True, slots=True)
class Plan:
    """The envelopes of one version of a workflow, grouped by agent (coordinator first) and in the
    order each agent must apply them."""

    workflow: str
    version: str
    envelopes: tuple[Envelope, ...]

    def by_agent(self) -> dict[str, tuple[Envelope, ...]]:
        agents: dict[str, list[Envelope]] = {}
        for envelope in self.envelopes:
            agents.setdefault(envelope.agent, []).append(envelope)
        return {agent: tuple(envelopes) for agent, envelopes in agents.items()}

    def publication(self, envelope: Envelope) -> Publication:
        """The AGENT_CTL publication that carries ``envelope``."""
        return Publication(
            AGENT_CTL,
            {
                "agentname": envelope.agent,
                "command": envelope.command,
                "content": envelope.content,
                "applname": self.workflow,
                "jobname": envelope.job,
                "version": self.version,
            },
        )

    def publications(self) -> list[Publication]:
        return [self.publication(envelope) for envelope in self.envelopes]

    def deployer_advertisement(self) -> Filter:
        """What the deployer advertises before publishing :meth:`publications`."""
        return deployer_advertisement(self.workflow, self.version)

    def to_json(self, sign: Callable[[Publication], Publication] | None = None) -> str:
        """One JSON object per envelope and line: agent, command, job, content, publication (signed
        by ``sign``, if given: :meth:`wfm.signing.Deployer.sign`)."""
        sign = sign or (lambda publication: publication)
        return "\n".join(
            json.dumps(
                {
                    "agent": envelope.agent,
                    "command": envelope.command,
                    "job": envelope.job,
                    "content": envelope.content,
                    "publication": str(sign(self.publication(envelope))),
                },
                ensure_ascii=False,
            )
            for envelope in self.envelopes
        )


def encode(data: dict[str, Any]) -> str:
    """Canonical JSON that fits in a publication string: sorted keys, no spaces, no ``'`` (a string
    value may not hold both quote kinds and JSON already has ``"``)."""
    return json.dumps(data, sort_keys=True, separators=(",", ":")).replace("'", "\\u0027")


def translate(workflow: Workflow) -> Plan:
    """The deployment plan of ``workflow``; equal definitions give equal plans."""
    name, version, coordinator = workflow.name, workflow.version(), workflow.coordinator
    base = {"workflow": name, "version": version}
    if workflow.source is not None:  # commands run in the workflow file's directory
        base["cwd"] = posixpath.dirname(workflow.source)
    clear = str(generation_end(name))
    graph = {
        job.name: [(a.job, a.on) for a in job.after] or [(APPL_START, "success")] for job in workflow.jobs
    }
    agents = [coordinator, *(agent for agent in workflow.agents if agent != coordinator)]
    envelopes = {
        agent: [Envelope(agent, "SUBSCRIBE", str(cleanup_subscription(name)), APPL_END)] for agent in agents
    }

    def add(agent: str, job: str, info: dict[str, Any], command: str, content: str) -> None:
        envelopes[agent] += [
            Envelope(agent, "ADVERTISE", str(status_advertisement(name, job)), job),
            Envelope(agent, "JOBINFO", encode({**base, "job": job, **info}), job),
            Envelope(agent, command, content, job),
        ]

    def subscribe(job: str, after: list[tuple[str, str]]) -> str:
        condition = job_condition(name, after) if after else trigger_atom(name)
        return encode({"job": job, "composite": str(condition), "clear": clear})

    add(coordinator, APPL_START, {"virtual": True}, "COMPOSITESUBSCRIBE", subscribe(APPL_START, []))
    for job in workflow.jobs:
        definition = job.definition()
        del definition["agent"]  # the envelope's agentname says it
        info = {**definition, "after": graph[job.name]}
        add(job.agent, job.name, info, "COMPOSITESUBSCRIBE", subscribe(job.name, graph[job.name]))
    end_info = {"virtual": True, "graph": graph}
    add(coordinator, APPL_END, end_info, "SUBSCRIBE", str(status_subscription(name)))
    return Plan(name, version, tuple(chain.from_iterable(envelopes.values())))
