"""Dependency graphs as plain ``{job: [predecessor, ...]}`` maps: ordering and cycle finding.

Both the definition checks (on Job objects) and the generation tracker (on the graph a JOBINFO
carries as JSON) need these, so they work on names only. Everything is iterative: a chain of
thousands of jobs must not hit Python's recursion limit.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence

__all__ = ["find_cycles", "topological_order"]

Predecessors = Mapping[str, Sequence[str]]


def topological_order(predecessors: Predecessors) -> list[str]:
    """The jobs with every predecessor before them (Kahn's algorithm), ties in the map's order.

    Names that appear only as predecessors (``APPL_START``) are not listed; jobs on a cycle or
    downstream of one cannot be ordered and are left out, which is how cycles are detected."""
    waiting = {job: len({p for p in preds if p in predecessors}) for job, preds in predecessors.items()}
    successors: dict[str, list[str]] = {job: [] for job in predecessors}
    for job, preds in predecessors.items():
        for pred in dict.fromkeys(preds):
            if pred in successors:
                successors[pred].append(job)
    ready = deque(job for job, count in waiting.items() if count == 0)
    order: list[str] = []
    while ready:
        job = ready.popleft()
        order.append(job)
        for successor in successors[job]:
            waiting[successor] -= 1
            if waiting[successor] == 0:
                ready.append(successor)
    return order


def find_cycles(predecessors: Predecessors) -> list[list[str]]:
    """Cycles in execution order, closed: ``["A", "B", "A"]`` means B is after A and A after B.

    Each stuck job (left out by :func:`topological_order`) has a stuck predecessor, so walking
    predecessors from it must come back to a job already on the walk: that loop is a cycle. Walks
    stop at jobs an earlier walk covered, so each cycle is reported once; every cycle starts at its
    job that comes first in the map."""
    rank = {job: index for index, job in enumerate(predecessors)}
    ordered = set(topological_order(predecessors))
    stuck = [job for job in predecessors if job not in ordered]
    stuck_set = set(stuck)
    covered: set[str] = set()
    cycles: list[list[str]] = []
    for start in stuck:
        path: list[str] = []
        position: dict[str, int] = {}
        job = start
        while job not in covered and job not in position:
            position[job] = len(path)
            path.append(job)
            job = next(pred for pred in predecessors[job] if pred in stuck_set)
        covered.update(path)
        if job in position:
            loop = path[position[job] :][::-1]  # a predecessor runs first
            first = loop.index(min(loop, key=rank.__getitem__))
            loop = loop[first:] + loop[:first]
            cycles.append([*loop, loop[0]])
    return cycles
