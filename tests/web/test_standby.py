"""The dashboard's run view, and ``wfm runs``' record, say which jobs a standby took over."""

from __future__ import annotations

from wfm.monitor import Monitor
from wfm.operations import generation_record
from wfm.web import pages


def test_the_run_view_and_the_runs_record_name_the_jobs_taken_over() -> None:
    monitor = Monitor()
    monitor.receive({"class": "Trigger", "applname": "PAYROLL", "GID": "g1", "schedule": "2026.11.23"})
    assert "taken-over" not in pages.run(monitor, [], "PAYROLL", "g1")
    status = {
        "class": "JOBSTATUS",
        "applname": "PAYROLL",
        "GID": "g1",
        "jobname": "JobB",
        "status": "SUCCESS",
    }
    monitor.receive({**status, "detail": "taken over from agentA by agentB: exit 0 after 1.0 s"})
    page = pages.run(monitor, [], "PAYROLL", "g1")
    assert '<p class="taken-over">Taken over: JobB from agentA by agentB</p>' in page
    (generation,) = monitor.generations.values()
    assert generation_record(generation)["taken_over"] == {"JobB": "agentA by agentB"}
