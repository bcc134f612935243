"""The monitor: a sans-IO :class:`Monitor` of generations and job states, its rich rendering, and
the :class:`MonitorService` that feeds it deliveries."""

from wfm.monitor.model import Generation, JobState, Monitor, StatusEvent
from wfm.monitor.service import MonitorService
from wfm.monitor.view import render

__all__ = [
    "Generation",
    "JobState",
    "Monitor",
    "MonitorService",
    "StatusEvent",
    "render",
]
