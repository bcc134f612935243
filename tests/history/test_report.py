"""``job_report`` figures on a small hand-made JOBSTATUS history, and the HTML page."""

from __future__ import annotations

import shutil
from datetime import UTC, date, datetime
from pathlib import Path

from broker.language import Publication
from tests.history.conftest import land
from wfm.history.html import render_html
from wfm.history.report import job_report, job_summary
from wfm.history.store import HistoryStore

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


def test_rollups_follow_each_compaction_and_rebuild_when_deleted(store: HistoryStore, tmp_path: Path) -> None:
    """Whole days come from the daily rollups: a day compacted twice, a rollup deleted, and rows
    still landing must all give the figures of one report over the raw rows."""
    rows = [
        (MONDAY + n * 3600, status(f"g{n}", "JobA", ("SUCCESS", "FAILURE", "NORUN")[n % 3], 10.0 + n))
        for n in range(36)  # a day and a half: Monday and Tuesday morning
    ]
    published = [(f"r{n}", t, p) for n, (t, p) in enumerate(rows)]
    reference = HistoryStore(tmp_path / "reference", store.spark)
    land(reference, published)  # never compacted: the report reads its landing rows
    expected = {by: job_report(reference, by=by) for by in ("day", "week")}

    land(store, published[:10])
    store.compact()
    assert [r.runs for r in job_report(store)] == [7]  # Monday's rollup, from one table file
    land(store, published[10:30])
    store.compact()  # Monday gets a second file, so its rollup is recomputed
    assert [r.runs for r in job_report(store)] == [11, 9]  # Monday's 16 rows, Tuesday's first 14
    land(store, published[30:33])
    store.compact()  # Tuesday recomputed; Monday's rollup copied into the month's new file
    assert [r.runs for r in job_report(store)] == [11, 11]
    shutil.rmtree(store.rollups.path / "month=2026-03")
    land(store, published[33:])  # Tuesday's last rows are still landing
    assert {by: job_report(store, by=by) for by in ("day", "week")} == expected
    week = expected["week"][0]
    assert (week.runs, week.failures, week.noruns) == (24, 12, 12)
    assert week.slowest == (("g34", 44.0), ("g33", 43.0), ("g31", 41.0))
    assert week.p95_duration == 43.0  # the 23rd of the 24 durations 10, 11, 13, 14, ..., 43, 44


def test_a_summary_merges_every_day_of_the_range_per_job(store: HistoryStore) -> None:
    history(store)
    found = {(s.workflow, s.job): s for s in job_summary(store, "PAYROLL")}
    assert sorted(found) == [("PAYROLL", "JobA"), ("PAYROLL", "JobB")]
    job_a = found["PAYROLL", "JobA"]
    assert (job_a.runs, job_a.failures, job_a.noruns) == (4, 1, 1)
    assert (job_a.mean_duration, job_a.p50_duration, job_a.p95_duration) == (20, 20, 30)
    monday = job_summary(store, "PAYROLL", until=date(2026, 3, 2))
    assert [(s.job, s.runs) for s in monday] == [("JobA", 3)]


def test_landing_rows_read_in_python_report_as_parsed_by_spark(store: HistoryStore) -> None:
    """A small landing log goes to the report as rows made in Python (``python_landing_bytes``),
    a large one through Spark's JSON parsing: the same figures, with attributes of the other
    type (read as missing by the table's typed columns), a NORUN with a duration, classes and jobs
    left out, a --since inside a day, and a row both landing and in the table (a compaction that
    died before removing its segment), counted once."""
    odd = [
        (
            MONDAY + 300,
            Publication(
                "JOBSTATUS",
                {"applname": "PAYROLL", "jobname": "JobA", "GID": "o1", "status": "SUCCESS", "duration": "7"},
            ),
        ),
        (
            MONDAY + 360,
            Publication(
                "JOBSTATUS",
                {"applname": "PAYROLL", "jobname": "JobA", "GID": 5, "status": "FAILURE", "duration": 3},
            ),
        ),
        (
            MONDAY + 420,
            Publication("JOBSTATUS", {"applname": "PAYROLL", "jobname": "JobA", "status": 1, "duration": 4}),
        ),
        (MONDAY + 480, Publication("JOBSTATUS", {"applname": "PAYROLL", "jobname": 9, "status": "SUCCESS"})),
        (MONDAY + 540, status("o5", "JobC", "NORUN", 12)),
        (
            MONDAY + 600,
            Publication("Trigger", {"applname": "PAYROLL", "jobname": "JobA", "status": "SUCCESS"}),
        ),
        (MONDAY + DAY + 600, status("o6", "APPL_START", "SUCCESS", 2)),
        (MONDAY + DAY + 660, status("o7", "JobB", "SUCCESS", 6.5)),
    ]
    history(store)
    store.compact()
    land(store, [("r1", MONDAY + 60, status("g2", "JobA", "FAILURE", 30))])  # in the table too
    land(store, [(f"o{n}", t, p) for n, (t, p) in enumerate(odd)])
    reports = []
    for limit in (store.python_landing_bytes, 0):  # in Python, then parsed by Spark
        store.python_landing_bytes = limit
        reports.append(
            [job_report(store, by=by) for by in ("day", "week")]
            + [job_report(store, "PAYROLL", since=MONDAY + 200)]
        )
    assert reports[0] == reports[1]
    daily = {(r.workflow, r.job, r.period): r for r in reports[0][0]}
    monday = daily["PAYROLL", "JobA", date(2026, 3, 2)]
    assert (monday.runs, monday.failures, monday.noruns) == (5, 2, 1)  # g2 once; o1 and o2 added
    assert daily["PAYROLL", "JobC", date(2026, 3, 2)].mean_duration is None  # a NORUN has none
    assert daily["PAYROLL", "JobB", date(2026, 3, 3)].runs == 2
