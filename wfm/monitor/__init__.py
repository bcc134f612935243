"""The monitor: a sans-IO model of generations and job states, its rich rendering, and the loop
that feeds it deliveries."""

from wfm.monitor.model import SKIPPED, Generation, JobState, Model, StatusEvent
from wfm.monitor.view import render
from wfm.monitor.watch import TIMED_OUT, monitor

__all__ = ["SKIPPED", "TIMED_OUT", "Generation", "JobState", "Model", "StatusEvent", "monitor", "render"]
