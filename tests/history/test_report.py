"""``job_report`` figures on a small hand-made JOBSTATUS history, and the HTML page."""

from __future__ import annotations

from datetime import UTC, date, datetime

from broker.language import Publication
from tests.history.conftest import land
from wfm.history import HistoryStore
from wfm.history.html import render_html
from wfm.history.report import job_report

MONDAY = datetime(2026, 3, 2, 8, tzinfo=UTC).timestamp()
DAY = 86400


def status(gid: str, job: str, state: str, duration: float | None, app: str = "PAYROLL") -> Publication:
    attributes: dict[str, object] = {"applname": app, "jobname": job, "GID": gid, "status": state}
    if duration is not None:
        attributes["duration"] = duration
    return Publication("JOBSTATUS", attributes)  # type: ignore[arg-type]


def history(store: HistoryStore) -> None:
    rows = [
        # Monday: JobA runs three times, fails once, one NORUN; durations 10, 20, 30
        (MONDAY, status("g1", "JobA", "SUCCESS", 10)),
        (MONDAY + 60, status("g2", "JobA", "FAILURE", 30)),
        (MONDAY + 120, status("g3", "JobA", "SUCCESS", 20)),
        (MONDAY + 180, status("g4", "JobA", "NORUN", None)),
        (MONDAY + 240, status("g1", "APPL_END", "SUCCESS", 1)),  # virtual: left out
        # Tuesday: JobA once, without a duration; JobB once
        (MONDAY + DAY, status("g5", "JobA", "SUCCESS", None)),
        (MONDAY + DAY + 60, status("g5", "JobB", "SUCCESS", 5)),
        # another workflow
        (MONDAY, status("x1", "JobA", "SUCCESS", 99, app="BILLING")),
    ]
    land(store, [(f"r{n}", t, p) for n, (t, p) in enumerate(rows)])


def test_daily_figures(store: HistoryStore) -> None:
    history(store)
    report = {(r.job, r.period): r for r in job_report(store, "PAYROLL")}
    assert sorted(report) == [
        ("JobA", date(2026, 3, 2)),
        ("JobA", date(2026, 3, 3)),
        ("JobB", date(2026, 3, 3)),
    ]
    monday = report["JobA", date(2026, 3, 2)]
    assert (monday.runs, monday.failures, monday.noruns) == (3, 1, 1)
    assert monday.mean_duration == 20 and monday.p95_duration == 30
    assert monday.slowest == (("g2", 30), ("g3", 20), ("g1", 10))
    tuesday = report["JobA", date(2026, 3, 3)]
    assert (tuesday.runs, tuesday.mean_duration, tuesday.p95_duration, tuesday.slowest) == (1, None, None, ())


def test_weekly_since_and_all_workflows(store: HistoryStore) -> None:
    history(store)
    store.compact()
    weekly = job_report(store, by="week")
    assert [(r.workflow, r.job, r.period, r.runs) for r in weekly] == [
        ("BILLING", "JobA", date(2026, 3, 2), 1),
        ("PAYROLL", "JobA", date(2026, 3, 2), 4),
        ("PAYROLL", "JobB", date(2026, 3, 2), 1),
    ]
    later = job_report(store, "PAYROLL", since=MONDAY + DAY / 2)
    assert [(r.job, r.runs) for r in later] == [("JobA", 1), ("JobB", 1)]
    page = render_html(weekly, "weekly <report>")
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "<polyline" in page
    assert "weekly &lt;report&gt;" in page and "PAYROLL/JobA" in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
