"""Workflow -> deployment plan: the AGENT_CTL envelopes each agent receives. Pure: no I/O.

For workflow W at version V, each agent gets one DEPLOY envelope (more only when its jobs' text
would not fit in one message, see :data:`PART_LIMIT`): JSON naming its jobs as the definition says
them (what to run, when, after what). The agent derives from them the filters and composites it
advertises and subscribes (:mod:`workflow_messages`, the same functions for every agent), so
nothing in the envelope is parsed but JSON, and an agent costs one envelope, one signature check
and one acknowledgement, whatever its number of jobs. The coordinator (the agent of the first start
job) also runs the virtual jobs: APPL_START fires on the trigger; APPL_END on the statuses of the
end jobs (every job publishes one in every generation, a skip status on a branch not taken), and
its entry carries the graph from which the coordinator names the failed and skipped jobs. When the
first start job has standby agents, both virtual jobs go with it: they carry its standbys and
takeover (``with``: the job), each standby gets them as passive copies, and the DEPLOY's
``coordinator`` names the coordinator and its standbys (docs/workflows.md, "Standby agents").
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker.language import Filter, Publication
from wfm.workflow import calendars
from wfm.workflow.model import Workflow
from workflow_messages import AGENT_CTL, APPL_END, APPL_START, deployer_advertisement, digest
from workflow_messages.params import records

__all__ = ["PART_LIMIT", "Envelope", "Plan", "encode", "translate"]


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


PART_LIMIT = 128 * 1024  # characters of one DEPLOY content: a frame (1 MiB) holds it escaped twice


def translate(workflow: Workflow) -> Plan:
    """The deployment plan of ``workflow``; equal definitions give equal plans."""
    name, version, coordinator = workflow.name, workflow.version(), workflow.coordinator
    # the coordinator's virtual jobs go with its first start job: to that job's standbys too, as
    # passive copies under the same takeover (one grant makes a standby the job's agent and the
    # coordinator at once: agents.standby)
    first = next(job for job in workflow.jobs if not job.after)
    coordinators = " ".join((coordinator, *first.standby))
    # the coordinator signs every generation's APPL_START and APPL_END: each agent is told who
    # (with its standbys, space-separated: any of them may have taken it over)
    base: dict[str, Any] = {"workflow": name, "version": version, "coordinator": coordinators}
    if workflow.source is not None:  # commands run in the workflow file's directory
        base["cwd"] = posixpath.dirname(workflow.source)
    if workflow.params:  # every agent checks a Trigger's parameters and fills in their defaults
        base["params"] = records(workflow.params)
    # every agent: its jobs' keepers and limits, and the keeper its pools' jobs (a pool no job
    # uses limits nothing: it is not sent)
    used = [declared for pool in workflow.pools if (declared := workflow.pool_declaration(pool)).jobs]
    if used:
        base["pools"] = [declared.record() for declared in used]
    graph = {
        job.name: [(a.job, a.on) for a in job.after] or [(APPL_START, "success")] for job in workflow.jobs
    }
    # whose signature a job's statuses carry: its agent's, or one of its standbys' (who may have
    # taken it over), space-separated
    placed = {
        APPL_START: coordinators,
        **{job.name: " ".join((job.agent, *job.standby)) for job in workflow.jobs},
    }
    waited_for = {pred for edges in graph.values() for pred, _ in edges}
    ends = [job for job in graph if job not in waited_for]
    agents = [coordinator, *(agent for agent in workflow.agents if agent != coordinator)]
    agents += [s for s in dict.fromkeys(s for job in workflow.jobs for s in job.standby) if s not in agents]
    entries: dict[str, list[dict[str, Any]]] = {agent: [] for agent in agents}
    start: dict[str, Any] = {"job": APPL_START, "virtual": True}
    if workflow.overlap is not None:  # the coordinator decides when a generation starts
        start["overlap"] = workflow.overlap.record()
    # with standbys: which job's takeover the virtual jobs go with, and that job's standbys
    bound = {"with": first.name, "standby": list(first.standby), "takeover": first.takeover_seconds()}
    if first.standby:
        start.update(bound)
    entries[coordinator].append(start)
    for job in workflow.jobs:
        definition = job.definition()
        del definition["agent"]  # the envelope's agentname says it
        after = graph[job.name]
        signers = {pred: placed[pred] for pred, _ in after}  # whose signature their statuses carry
        if (named := calendars.of(workflow, job)) is not None:  # whole: the agent needs nothing else
            definition["calendar"] = named.record()
        entries[job.agent].append({**definition, "after": after, "agents": signers})
        for standby in job.standby:  # a passive copy: held until its standby takes the job over
            entries[standby].append({**definition, "after": after, "agents": signers, "primary": job.agent})
    end_signers = {job: placed[job] for job in ends}
    end = {"job": APPL_END, "virtual": True, "graph": graph, "agents": end_signers}
    if workflow.deadline is not None:  # the generation's: the coordinator watches it
        end["deadline"] = workflow.deadline
    if first.standby:
        end.update(bound)
    entries[coordinator].append(end)
    for standby in first.standby:  # passive copies, as of the first start job
        entries[standby][:0] = [{**start, "primary": coordinator}]
        entries[standby].append({**end, "primary": coordinator})
    envelopes = [
        Envelope(agent, "DEPLOY", content, "*")
        for agent in agents
        for content in _parts(base, entries[agent])
    ]
    return Plan(name, version, tuple(envelopes))


def _parts(base: dict[str, Any], entries: list[dict[str, Any]]) -> list[str]:
    """The DEPLOY contents of one agent: its entries in order, as few per content as fit in
    :data:`PART_LIMIT` (a single entry larger than that goes alone: a command may be 128 KiB).
    Several are numbered, ``part`` of ``parts``: the agent takes the version only once it holds
    them all (APPL_START comes in the first, APPL_END in the last: a generation started between
    them would never end). They also carry the ``split``, a digest of which jobs went in which
    part: the same version sent again split otherwise (a longer cwd) is counted afresh, and never
    completed by parts of two splits that leave a job out between them."""
    overhead = len(encode({**base, "jobs": [], "part": PART_LIMIT, "parts": PART_LIMIT, "split": digest("")}))
    parts: list[list[dict[str, Any]]] = [[]]
    size = overhead
    for entry in entries:
        length = len(encode(entry)) + 1
        if parts[-1] and size + length > PART_LIMIT:
            parts.append([])
            size = overhead
        parts[-1].append(entry)
        size += length
    if len(parts) == 1:  # a content without part numbers is whole
        return [encode({**base, "jobs": parts[0]})]
    split = digest(encode({"jobs": [[entry["job"] for entry in part] for part in parts]}))
    numbered = {"parts": len(parts), "split": split}
    return [encode({**base, "jobs": part, "part": n, **numbered}) for n, part in enumerate(parts, 1)]
