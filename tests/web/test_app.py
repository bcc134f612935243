"""The dashboard's endpoints with Starlette's TestClient: no broker, no Spark; the data sources are
filled in by the test (the monitor fed by hand, a history reader with a stand-in store)."""

from __future__ import annotations

import shutil
import threading
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from broker.client.reconnect import brokers
from broker.transport.tls import Identity
from wfm.history.report import JobPeriod
from wfm.web import Dashboard, create_app
from wfm.web.pages import HistoryQuery, history
from wfm.web.sources import HistoryReader, overlay_view, summary

WORKFLOWS = Path(__file__).parents[2] / "workflows"
URI = "socket://127.0.0.1:1/B1"


def dashboard(tmp_path: Path, tls: Identity | None = None, **options: Any) -> Dashboard:
    shutil.copy(WORKFLOWS / "payroll.xml", tmp_path)
    (tmp_path / "broken.xml").write_text("<workflow name='X'>")
    return Dashboard(brokers(URI).secured(tls), tls, tmp_path, **options)


def client(board: Dashboard) -> TestClient:
    return TestClient(create_app(board, background=False))


def status(job: str, state: str, gid: str = "g1", **extra: object) -> dict[str, object]:
    return {"class": "JOBSTATUS", "applname": "PAYROLL", "jobname": job, "GID": gid, "status": state, **extra}


def test_runs_show_each_job_state_on_the_dag_and_the_timeline(tmp_path: Path) -> None:
    board = dashboard(tmp_path)
    board.runs_error = None
    board.monitor.receive({"class": "Trigger", "applname": "PAYROLL", "GID": "g1", "schedule": "2026.11.23"})
    board.monitor.receive(status("JobA", "SUCCESS", started=100.0, duration=1.5))
    board.monitor.receive(status("JobC", "NORUN"))
    web = client(board)
    page = web.get("/fragment/runs").text
    assert 'data-gid="g1" data-outcome="running"' in page
    assert 'data-job="JobA" data-state="SUCCESS"' in page and 'data-job="JobC" data-state="NORUN"' in page
    assert 'class="row state-waiting" data-job="JobD"' in page  # on the timeline, not started yet
    board.monitor.receive(status("APPL_END", "SUCCESS"))
    (run,) = web.get("/api/runs").json()["generations"]
    assert run["outcome"] == "SUCCESS" and run["date"] == "2026-11-23"
    assert run["jobs"]["JobA"] == {"status": "SUCCESS", "started": 100.0, "duration": 1.5, "detail": ""}


def test_the_workflows_page_draws_each_definition_and_names_a_broken_file(tmp_path: Path) -> None:
    web = client(dashboard(tmp_path))
    listed = web.get("/api/workflows").json()
    assert [d.get("name", d["file"]) for d in listed] == ["broken.xml", "PAYROLL"]
    assert "error" in listed[0] and listed[1]["agents"] == ["agentA", "agentB", "agentC"]
    page = web.get("/fragment/workflows").text
    assert page.count('class="job state-none"') == 5 and "on-failure" in page
    assert 'value="PAYROLL"' in web.get("/runs").text  # the Trigger button's choice


def test_the_overlay_view_links_brokers_once_and_names_those_not_reached() -> None:
    statuses = {
        "B1": {
            "id": "B1",
            "neighbors": ["B2"],
            "counters": {"in.Publish": 3, "dropped.ttl": 1, "refused.acl": 2},
        },
        "B2": {"id": "B2", "neighbors": ["B1", "B3"], "counters": {}},
    }
    view = overlay_view(statuses, {})
    assert view["links"] == [["B1", "B2"], ["B2", "B3"]]
    assert [(b["id"], b["reached"]) for b in view["brokers"]] == [("B1", True), ("B2", True), ("B3", False)]
    assert summary(statuses["B1"])["publications"] == 3
    assert (summary(statuses["B1"])["drops"], summary(statuses["B1"])["refusals"]) == (1, 2)


def test_the_trigger_button_is_refused_unless_the_identity_is_a_deployer(tmp_path: Path, certs: Path) -> None:
    web = client(dashboard(tmp_path, Identity(certs, "monitor")))
    answer = web.post("/api/trigger", json={"workflow": "PAYROLL"})
    assert answer.status_code == 403
    assert answer.json()["error"].startswith(
        "the dashboard runs as monitor (role monitor): triggering needs role deployer"
    )
    assert web.post("/api/trigger", content=b"{").status_code == 400
    assert web.post("/api/trigger", json={"workflow": 7}).json() == {"error": 'give {"workflow": NAME}'}


def test_a_trigger_the_broker_cannot_take_is_one_line(tmp_path: Path) -> None:
    answer = client(dashboard(tmp_path)).post("/api/trigger", json={"workflow": "PAYROLL"})
    assert answer.status_code == 502 and answer.json()["error"].startswith("cannot trigger PAYROLL: ")


def test_history_says_spark_is_starting_without_blocking_then_shows_the_charts(tmp_path: Path) -> None:
    started = threading.Event()
    reader = HistoryReader(tmp_path, open_store=lambda path: started.wait(10) and "store")
    rows = [JobPeriod("PAYROLL", "JobA", date(2026, 11, d), 2, 1, 0, 1.0, 2.0, ()) for d in (1, 2)]
    query = HistoryQuery(date(2026, 11, 1), date(2026, 11, 30))
    assert reader.report(lambda store: rows, query) == ("starting", None)
    started.set()
    for _ in range(100):
        state, result = reader.report(lambda store: rows if store == "store" else [], query)
        if state == "ready":
            break
        threading.Event().wait(0.05)
    assert (state, result) == ("ready", rows)
    page = history(query, state, result)
    assert page.count("<svg") == 2 and "PAYROLL/JobA: runs, failures" in page
    reader.close()


def test_history_without_a_store_or_with_a_bad_range_says_so(tmp_path: Path) -> None:
    web = client(dashboard(tmp_path))
    assert "no history store" in web.get("/fragment/history").text
    bad = web.get("/fragment/history", params={"since": "2026-11-30", "until": "2026-11-01"})
    assert bad.status_code == 400 and "ends (2026-11-01) before it starts (2026-11-30)" in bad.text
    assert "invalid date" in web.get("/fragment/history", params={"since": "yesterday"}).text


@pytest.mark.parametrize("page", ["/", "/overlay", "/workflows", "/runs", "/history", "/static/dashboard.js"])
def test_every_page_is_served(tmp_path: Path, page: str) -> None:
    assert client(dashboard(tmp_path)).get(page).status_code == 200
