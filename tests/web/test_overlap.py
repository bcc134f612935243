"""Generations held or skipped by their workflow's ``max-active``, as ``wfm runs`` and the
dashboard show them: QUEUED (the coordinator's answer to RUNS says its APPL_START is queued)
and SKIPPED (its APPL_END)."""

from __future__ import annotations

from pathlib import Path

from tests.web.test_app import client, dashboard, status
from wfm.monitor import Monitor
from wfm.operations import generation_record


def trigger(gid: str) -> dict[str, object]:
    return {"class": "Trigger", "applname": "PAYROLL", "GID": gid, "schedule": "2026.11.23"}


def test_wfm_runs_says_queued_until_the_generation_starts() -> None:
    monitor = Monitor()
    monitor.receive(trigger("g2"))
    monitor.receive(status("APPL_START", "QUEUED", "g2"))  # as Session.runs feeds RUNS' busy in
    assert generation_record(monitor.generations["PAYROLL", "g2"])["status"] == "QUEUED"
    monitor.receive(status("APPL_START", "SUCCESS", "g2", attempt=0))  # its turn came
    assert generation_record(monitor.generations["PAYROLL", "g2"])["status"] == "RUNNING"


def test_the_dashboard_shows_queued_and_skipped_generations_and_filters_them(tmp_path: Path) -> None:
    board = dashboard(tmp_path)
    board.runs_error = None
    for gid in ("waits", "skipped"):
        board.monitor.receive(trigger(gid))
    board.monitor.receive(status("APPL_START", "QUEUED", "waits"))
    detail = "skipped: 1 generation running (limit 1): g1; nothing ran"
    board.monitor.receive(status("APPL_END", "SKIPPED", "skipped", detail=detail))
    web = client(board)
    grid = web.get("/fragment/runs").text
    assert 'data-gid="waits" data-outcome="queued"' in grid and 'class="outcome state-queued">queued<' in grid
    assert 'data-gid="skipped" data-outcome="SKIPPED"' in grid
    page = web.get("/").text
    assert (
        '<option value="queued">queued</option>' in page
        and '<option value="SKIPPED">SKIPPED</option>' in page
    )
    only = web.get("/api/runs", params={"status": "queued"}).json()
    assert [(r["gid"], r["outcome"]) for r in only["generations"]] == [("waits", "queued")]
    run = web.get("/fragment/run", params={"workflow": "PAYROLL", "gid": "skipped"}).text
    assert f"SKIPPED</span> ({detail})" in run
