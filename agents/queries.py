"""Answers to the queries of ``wfm workflows``, ``wfm runs`` and ``wfm logs``, from the agent's state.

Pure and read-only: a query changes nothing, so the adapter answers it at once, outside the
journal, and publishes the answer past its outbox (an answer lost in a restart is asked again). An
answer is one message: one that would be too large keeps what fits (the newest generations, the
current deployments first) and says ``truncated``.

A log lives on disk, so a LOGS query is checked here (a valid gid, the job deployed, the
generation known) and handed back as a :class:`LogRequest` for the adapter to read
(:func:`agents.runner.log_tail`, which reads nothing outside the state directory's logs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents import standby
from agents.conditions import waiting_for
from agents.envelope import JobInfo
from agents.holds import on_hold, shown
from agents.state import Agent
from broker.language import Publication
from broker.transport import MAX_FRAME
from workflow_messages import APPL_END, APPL_START, check_gid, weekday_words
from workflow_messages.conditions import records as condition_records
from workflow_messages.operations import ANY, answer, decode_content, encode_content
from workflow_messages.params import records

__all__ = ["ANSWER_BUDGET", "DEFAULT_RUNS", "MAX_RUNS", "LogRequest", "answer_query"]

DEFAULT_RUNS, MAX_RUNS = 20, 200  # generations a RUNS answer holds at most
# bytes of content an answer carries at most: half a frame leaves room for the frames a broker
# wraps it in to reach the asker (a publication that fits a frame may not fit a delivery)
ANSWER_BUDGET = MAX_FRAME // 2
COMMAND_SHOWN = 1000  # characters of a job's command a WORKFLOWS answer too large for one keeps
VIRTUAL = (APPL_START, APPL_END)


@dataclass(frozen=True, slots=True)
class LogRequest:
    """Read the log of ``job`` in generation ``gid`` (``attempt`` 0: the latest) and answer ``request``."""

    request: str
    workflow: str
    gid: str
    job: str
    attempt: int


def answer_query(agent: Agent, query: Publication) -> Publication | LogRequest | None:
    """The answer to ``query``, a log to read, or None when it is not addressed to this agent (or
    has no request id to answer to). A bad query is answered with result ERROR and the reason."""
    request = query.get("request")
    if query.get("agentname") not in (agent.name, ANY) or not isinstance(request, str) or not request:
        return None
    try:
        content = decode_content(query.get("content"))
        kind = query.get("query")
        if kind == "WORKFLOWS":
            deployments = _deployments(agent)
            if cut := _size({"deployments": deployments}) > ANSWER_BUDGET:  # long commands first
                deployments = _deployments(agent, COMMAND_SHOWN)
            return _fitted(agent, request, "deployments", deployments, cut)
        if kind == "RUNS":
            workflow = _text(content, "workflow")
            limit = content.get("limit", DEFAULT_RUNS)
            if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= MAX_RUNS:
                raise ValueError(f"limit must be an integer from 1 to {MAX_RUNS}")
            prefix = content.get("gid", "")
            if not isinstance(prefix, str):
                raise ValueError("gid must be a string")
            runs = _runs(agent, workflow, prefix, limit)
            # the generation named exactly, if it ended and what it published is no longer kept
            # (wfm backfill: its Trigger would be a duplicate, and no end would come of it)
            gone = (workflow, prefix) in agent.ended and (workflow, prefix) not in agent.outcomes
            return _fitted(agent, request, "generations", runs, extra={"ended": [prefix]} if gone else {})
        if kind == "LOGS":
            return _log_request(agent, request, content)
        raise ValueError(f"unknown query {kind!r} (WORKFLOWS, RUNS or LOGS)")
    except ValueError as error:
        return answer(agent.name, request, "ERROR", {"error": str(error)})


def _fitted(
    agent: Agent,
    request: str,
    name: str,
    items: list[dict[str, Any]],
    cut: bool = False,
    extra: dict[str, Any] | None = None,
) -> Publication:
    """An OK answer with ``items`` under ``name``, as many of the first as fit ANSWER_BUDGET;
    ``truncated`` if some were left out, or ``cut`` (shortened) already."""
    count = len(items)
    if _size({name: items}) > ANSWER_BUDGET:
        low, high = 0, count - 1  # none fits: an empty list is a few bytes
        while low < high:
            middle = (low + high + 1) // 2
            low, high = (
                (middle, high) if _size({name: items[:middle]}) <= ANSWER_BUDGET else (low, middle - 1)
            )
        count = low
    content = {name: items[:count], "truncated": cut or count < len(items), **(extra or {})}
    return answer(agent.name, request, "OK", content)


def _size(content: dict[str, Any]) -> int:
    return len(encode_content(content))  # ASCII: as many bytes as characters


def _deployments(agent: Agent, command_limit: int | None = None) -> list[dict[str, Any]]:
    """Every deployed version, the ones new generations start on (marked ``current``) first; the
    coordinator's carries the workflow's graph (``{job: [[predecessor, on], ...]}``). Commands
    are cut to ``command_limit`` characters if given."""
    found = []
    for (workflow, version), deployment in sorted(agent.deployments.items()):
        end = deployment.jobs.get(APPL_END)
        jobs = {
            job: {
                "command": info.command[:command_limit],
                "schedule": weekday_words(info.calendar.weekdays),
                "timeout": info.timeout,
                "retries": info.retries,
                **({"calendar": info.named.record()} if info.named is not None else {}),
                **({"conditions": condition_records(info.conditions)} if info.conditions else {}),
                **({"approval": list(info.approval)} if info.approval else {}),
            }
            for job, info in deployment.jobs.items()
            if job not in VIRTUAL
        }
        found.append(
            {
                "workflow": workflow,
                "version": version,
                "current": agent.current(workflow) == version,
                "coordinator": end is not None and _coordinates(agent, end),
                "graph": end.graph if end is not None else None,
                "jobs": jobs,
                "params": records(deployment.params),
                # wfm hold's rules of the workflow here, [[job or *, gid or *], ...], when any
                **({"holds": held} if (held := on_hold(agent, workflow)) else {}),
            }
        )
    return sorted(found, key=lambda deployment: not deployment["current"])  # stable: by name then


def _coordinates(agent: Agent, end: JobInfo) -> bool:
    """Whether this agent runs APPL_END: not a standby's copy it has not taken over, nor one it
    handed over with its first start job (:mod:`agents.standby`)."""
    return not standby.passive(agent, end) and not standby.ignored(agent, end)


def _runs(agent: Agent, workflow: str, prefix: str, limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` generations of ``workflow`` (whose gid starts with ``prefix``) this agent
    took part in: the date, the statuses it published, and its jobs queued, running or waiting."""
    found = []
    for (w, gid), record in reversed(agent.outcomes.items()):
        if w != workflow or not gid.startswith(prefix):
            continue
        generation = agent.generations.get((w, gid))
        busy = (  # a standby's held copy is not busy here: its primary runs it
            {}
            if generation is None
            else {j: s for j, s in generation.jobs.items() if s not in ("done", "standby")}
        )
        busy = {j: shown(agent, w, gid, j, s) for j, s in busy.items()}  # queued but held: held
        cancelled = generation is not None and generation.cancelled
        held = {r.job: waiting_for(agent, r) for r in agent.held if (r.workflow, r.gid) == (w, gid)}
        found.append(
            {
                "gid": gid,
                "date": record["date"],
                "jobs": record["jobs"],
                "busy": busy,
                "cancelled": cancelled,
                "params": record.get("params", {}),  # absent from older outcomes
                **({"missed": record["missed"]} if record.get("missed") else {}),  # deadlines
                **({"waiting": held} if held else {}),  # held jobs: the conditions they wait for
            }
        )
        if len(found) == limit:
            break
    return found


def _log_request(agent: Agent, request: str, content: dict[str, Any]) -> LogRequest:
    workflow, gid, job = (_text(content, name) for name in ("workflow", "gid", "job"))
    check_gid(gid)
    attempt = content.get("attempt", 0)
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 0:
        raise ValueError("attempt must be a non-negative integer")
    if not any(w == workflow and job in d.jobs for (w, _), d in agent.deployments.items()):
        raise ValueError(f"job {job} of {workflow} is not deployed on {agent.name}")
    if (workflow, gid) not in agent.outcomes and (workflow, gid) not in agent.generations:
        raise ValueError(f"{agent.name} knows no generation {gid} of {workflow}")
    return LogRequest(request, workflow, gid, job, attempt)


def _text(content: dict[str, Any], name: str) -> str:
    value = content.get(name)
    if not isinstance(value, str) or not value:
        raise ValueError(f"the query needs a non-empty string {name}")
    return value
