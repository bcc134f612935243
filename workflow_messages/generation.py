"""When is a generation over, and how did it end? The coordinator's decision for APPL_END. Pure.

A plan of ``wfm deploy`` makes APPL_END a composite over the end jobs: every job publishes a status
in every generation (a skip status on a branch not taken), so once the end jobs have, the
generation is over, and :func:`end_of` says how it ended from the failures the end jobs' statuses
carry. Envelopes of the older shape (JOBINFO, COMPOSITESUBSCRIBE, where a job on a branch not taken
never publishes) make the coordinator follow every status instead and ask :func:`decide_end`.
The rule lives here, not in the agent, because the monitor reads what it wrote (:func:`skipped_jobs`)
and the tests state it as a table, without an agent.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from workflow_messages.graph import topological_order
from workflow_messages.names import ACCEPTS, APPL_START, FAILURE, SUCCESS

__all__ = ["Graph", "decide_end", "end_of", "outcome", "skipped_jobs"]

Graph = Mapping[str, Sequence[Sequence[str]]]  # job -> [(predecessor, on), ...], as in JOBINFO


def decide_end(graph: Graph, statuses: Mapping[str, str]) -> tuple[str, str] | None:
    """The coordinator's decision: APPL_END's ``(status, detail)`` once the generation is over, else
    None. Nothing ends before APPL_START has a status; a graph with a cycle ends the generation as
    FAILURE rather than leave it hanging."""
    if APPL_START not in statuses:
        return None
    try:
        return outcome(graph, statuses)
    except ValueError as error:
        return FAILURE, str(error)


def end_of(graph: Graph, failed: Iterable[str]) -> tuple[str, str]:
    """APPL_END's ``(status, detail)`` once every end job has a status, given the jobs that failed
    (APPL_START included if its trigger was bad). Which jobs were skipped follows from those: a
    job runs unless a predecessor was skipped or ended as its ``on`` does not accept, and SUCCESS
    and NORUN are accepted alike by every ``on``."""
    failed = set(failed)
    statuses = {APPL_START: FAILURE if APPL_START in failed else SUCCESS}
    order = topological_order({job: [pred for pred, _ in edges] for job, edges in graph.items()})
    if len(order) != len(graph):
        return FAILURE, "the graph has a cycle"
    for job in order:
        if not any(_blocks(pred, on, statuses, set()) or pred not in statuses for pred, on in graph[job]):
            statuses[job] = FAILURE if job in failed else SUCCESS
    over = outcome(graph, statuses)
    assert over is not None  # every job has a status or is blocked
    return over


def outcome(graph: Graph, statuses: Mapping[str, str]) -> tuple[str, str] | None:
    """None while some job of ``graph`` may still run; else APPL_END's ``(status, detail)``.

    ``statuses`` maps jobs (and APPL_START) to the status they published in this generation. A job
    without a status can no longer run when a predecessor cannot run either, or ended with a
    status its ``on`` does not accept. The status is FAILURE if any job failed, else SUCCESS; the
    detail names the failed and the skipped jobs (``"failed: B; skipped: C, D"``, or empty)."""
    order = topological_order({job: [pred for pred, _ in edges] for job, edges in graph.items()})
    if len(order) != len(graph):
        raise ValueError("the graph has a cycle")
    skipped: set[str] = set()
    for job in order:
        if job in statuses:
            continue
        if not any(_blocks(pred, on, statuses, skipped) for pred, on in graph[job]):
            return None  # it may still run
        skipped.add(job)
    failed = [job for job in graph if statuses.get(job) == FAILURE]
    named = (("failed", failed), ("skipped", [job for job in graph if job in skipped]))
    detail = "; ".join(f"{what}: {', '.join(jobs)}" for what, jobs in named if jobs)
    return (FAILURE if failed else SUCCESS), detail


def _blocks(pred: str, on: str, statuses: Mapping[str, str], skipped: set[str]) -> bool:
    """Whether this predecessor edge can no longer be satisfied."""
    return pred in skipped or (pred in statuses and statuses[pred] not in ACCEPTS[on])


def skipped_jobs(detail: str) -> list[str]:
    """The jobs an APPL_END detail written by :func:`outcome` names as skipped (the monitor shows
    them, since a skipped job never publishes a status of its own)."""
    for part in detail.split(";"):
        what, _, jobs = part.strip().partition(": ")
        if what == "skipped":
            return [job.strip() for job in jobs.split(",") if job.strip()]
    return []
