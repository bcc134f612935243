"""How long the agent's runs took, and how they ended: a cumulative histogram kept in plain
numbers where the agent learns a run's end (:meth:`agents.service.AgentService._outcome`).

The agent imports no metrics library (``tests/test_layers.py``): ``wfm.metrics`` reads this record
at scrape time and exposes it as Prometheus's ``wfm_agent_run_duration_seconds`` histogram and
``wfm_agent_runs_total`` counter. Memory is one integer per bucket, whatever the number of runs.
"""

from __future__ import annotations

import bisect
from collections import Counter

__all__ = ["BUCKETS", "Durations"]

# seconds: a job is a command that takes from a tenth of a second to an hour
BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)


class Durations:
    """Runs' durations by bucket (the last counts those above every bound) and their sum, and the
    runs' ends by outcome: ``success``, ``failure`` (each failed attempt, retried or not) and
    ``lost`` (its supervisor died: no duration)."""

    def __init__(self, buckets: tuple[float, ...] = BUCKETS) -> None:
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.sum = 0.0
        self.outcomes: Counter[str] = Counter()

    def observe(self, seconds: float, ok: bool) -> None:
        self.counts[bisect.bisect_left(self.buckets, seconds)] += 1
        self.sum += seconds
        self.outcomes["success" if ok else "failure"] += 1

    def lost(self) -> None:
        self.outcomes["lost"] += 1

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, runs at most that long)`` per bucket, the last bound infinite."""
        total, counted = 0, []
        for bound, count in zip((*self.buckets, float("inf")), self.counts, strict=True):
            total += count
            counted.append((bound, total))
        return counted
