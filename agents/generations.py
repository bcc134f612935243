"""What an agent knows of one generation of a workflow."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["NOT_RUN", "GenerationState"]

NOT_RUN = "cancelled"  # the detail of a job a cancelled generation does not run


@dataclass
class GenerationState:
    """What this agent knows of one generation: its version, its jobs here, and (coordinator) every
    status of the workflow in it. The monitor's :class:`wfm.monitor.Generation` is what a watcher
    was shown of one; this is what an agent needs to decide."""

    version: str | None = None
    jobs: dict[str, str] = field(default_factory=dict)  # job -> queued|running|waiting|done
    statuses: dict[str, str] = field(default_factory=dict)
    ended: bool = False  # APPL_END published (coordinator)
    since: float | None = None  # when this agent first heard of it (None: restored from an older snapshot)
    cancelled: bool = False  # wfm cancel: its jobs do not run here (NORUN), its APPL_END is CANCELLED
    rerun_of: str | None = None  # wfm rerun --from: the generation whose outcomes it reuses
    reused: dict[str, list[str]] = field(default_factory=dict)  # job -> [status, detail] to republish
    # a predecessor's status says the generation was cancelled, before (or without) the CANCEL
    # reaching this agent: jobs that fire here do not run; only the signed CANCEL stops running ones
    # (anyone may publish a status)
    cancelled_upstream: bool = False
    missed: list[str] = field(default_factory=list)  # jobs whose deadline's alert went out here
    # coordinator: the firing (its publications' text) of a generation waiting its turn under the
    # workflow's limit on generations at once (agents.overlap); empty once started, or if never held
    queued: list[str] = field(default_factory=list)

    @property
    def halted(self) -> bool:
        """Its jobs that fire here do not run: cancelled here, or upstream."""
        return self.cancelled or self.cancelled_upstream
