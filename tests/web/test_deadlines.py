"""The dashboard's run view marks the deadlines a generation missed."""

from __future__ import annotations

from wfm.monitor import Monitor
from wfm.web import pages


def test_the_run_view_says_which_deadlines_were_missed() -> None:
    monitor = Monitor()
    monitor.receive({"class": "Trigger", "applname": "PAYROLL", "GID": "g1", "schedule": "2026.11.23"})
    assert "deadline-missed" not in pages.run(monitor, [], "PAYROLL", "g1")
    for job in ("JobB", "APPL_END"):
        alert = {"class": "ALERT", "applname": "PAYROLL", "jobname": job, "GID": "g1", "status": "DEADLINE"}
        monitor.receive({**alert, "detail": "deadline 30m missed"})
    page = pages.run(monitor, [], "PAYROLL", "g1")
    assert '<p class="deadline-missed">Deadline missed: JobB, the generation</p>' in page
