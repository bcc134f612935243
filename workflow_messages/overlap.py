"""A workflow's limit on the generations running at once, and its overlap policy: what becomes of
a Trigger that reaches the coordinator while the limit is reached (``<workflow max-active="N"
overlap="queue|skip|cancel">``; Argo's ``concurrencyPolicy``, Airflow's ``max_active_runs``,
Dagster's ``max_concurrent_runs``).

* ``queue`` (the default): the generation waits, its APPL_START not published, until one ends;
  waiting generations start in the order their Triggers reached the coordinator.
* ``skip``: the generation does not start; its APPL_END, status :data:`SKIPPED`, goes out at once.
* ``cancel``: the oldest running generation is cancelled (as ``wfm cancel`` does) and the new one
  starts as soon as it has ended, so never more than the limit run.

The coordinator decides (``agents.overlap``); this module holds what the definition, the DEPLOY
record and the agents agree on. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_POLICY",
    "MAX_ACTIVE_RULE",
    "POLICIES",
    "QUEUED",
    "SKIPPED",
    "Overlap",
    "overlap_problems",
    "parse_max_active",
    "read_overlap",
    "skipped_detail",
]

SKIPPED = "SKIPPED"  # APPL_END of a generation not started: the limit was reached (overlap="skip")
# a generation waiting its turn, as wfm runs and the dashboard show it: its APPL_START's state in
# the coordinator's answer to RUNS (``busy``), upper-cased as every job state is
QUEUED = "QUEUED"
POLICIES = ("queue", "skip", "cancel")
DEFAULT_POLICY = "queue"
MAX_ACTIVE = 10_000  # more is no limit at all, and most likely a typing slip
MAX_ACTIVE_RULE = f"max-active must be an integer from 1 to {MAX_ACTIVE}"
_INTEGER = re.compile(r"[0-9]{1,9}\Z")


@dataclass(frozen=True, slots=True)
class Overlap:
    """At most ``max_active`` generations of the workflow run at once; ``policy`` says what
    becomes of a Trigger beyond them (:data:`POLICIES`). Checked with the rest of the definition
    (:func:`overlap_problems`), so that a workflow built in code lists it among its problems."""

    max_active: int
    policy: str = DEFAULT_POLICY

    def record(self) -> dict[str, Any]:
        """The DEPLOY record (APPL_START's entry) and the definition's part of the version."""
        return {"max_active": self.max_active, "policy": self.policy}

    def describe(self) -> str:
        """``at most 2 generations at once; a Trigger beyond waits its turn (overlap=queue)`` (``wfm
        validate``)."""
        beyond = {
            "queue": "waits its turn",
            "skip": "is skipped",
            "cancel": "cancels the oldest running",
        }[self.policy]
        plural = "s" if self.max_active != 1 else ""
        at_once = f"at most {self.max_active} generation{plural} at once"
        return f"{at_once}; a Trigger beyond {beyond} (overlap={self.policy})"


def overlap_problems(overlap: Overlap) -> list[str]:
    """Why ``overlap`` is not a valid setting (empty: it is), each a one-line message."""
    problems = []
    limit = overlap.max_active
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_ACTIVE:
        problems.append(f"{MAX_ACTIVE_RULE}, not {limit!r}")
    if overlap.policy not in POLICIES:
        problems.append(f"overlap must be one of {', '.join(POLICIES)}, not {overlap.policy!r}")
    return problems


def parse_max_active(text: str) -> int:
    """The XML attribute's value; ValueError (one line) if it is not a whole number in range."""
    if not _INTEGER.match(text) or not 1 <= int(text) <= MAX_ACTIVE:
        raise ValueError(f"{MAX_ACTIVE_RULE}, not {text!r}")
    return int(text)


def read_overlap(record: object) -> Overlap | None:
    """APPL_START's ``overlap`` in a DEPLOY (None: unlimited, as from a deployer older than the
    setting); ValueError (one line) if it is misshapen: the envelope is refused."""
    if record is None:
        return None
    if not isinstance(record, dict) or set(record) != {"max_active", "policy"}:
        raise ValueError("overlap must be {max_active, policy}")
    overlap = Overlap(record["max_active"], record["policy"])
    problems = overlap_problems(overlap)
    if problems:
        raise ValueError(f"overlap: {problems[0]}")
    return overlap


def skipped_detail(running: Sequence[str], limit: int) -> str:
    """APPL_END's detail of a generation skipped because ``running`` (gids) already run."""
    count = len(running)
    return (
        f"skipped: {count} generation{'s' if count != 1 else ''} running (limit {limit}):"
        f" {', '.join(running)}; nothing ran"
    )
