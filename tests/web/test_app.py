"""The dashboard's endpoints with Starlette's TestClient: no broker, no Spark; the data sources are
filled in by the test (the monitor fed by hand, a history reader with a stand-in store)."""

from __future__ import annotations

import asyncio
import shutil
import threading
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from broker.client.reconnect import brokers
from broker.transport.tls import Identity
from wfm.history.report import JobPeriod, JobSummary
from wfm.monitor import Monitor
from wfm.operations import Deployed, NoReply, UnknownWorkflow
from wfm.web import Dashboard, create_app, pages
from wfm.web import app as app_module
from wfm.web.guard import Guard
from wfm.web.pages import HistoryQuery, history
from wfm.web.sources import HistoryReader, overlay_view, summary
from workflow_messages.operations import CANCEL, operation

WORKFLOWS = Path(__file__).parents[2] / "workflows"
URI = "socket://127.0.0.1:1/B1"
TOKEN = "t" * 43


def dashboard(tmp_path: Path, tls: Identity | None = None, **options: Any) -> Dashboard:
    shutil.copy(WORKFLOWS / "payroll.xml", tmp_path)
    (tmp_path / "broken.xml").write_text("<workflow name='X'>")
    return Dashboard(brokers(URI).secured(tls), tls, tmp_path, **options)


def client(board: Dashboard, token: str | None = TOKEN) -> TestClient:
    """A client of the dashboard (as TestClient's host, ``testserver``) sending ``token``."""
    app = create_app(board, Guard.listening("testserver", 80, TOKEN), background=False)
    return TestClient(app, headers={"Authorization": f"Bearer {token}"} if token else None)


GRAPH = {"JobA": [], "JobB": [["JobA", "success"]], "JobC": [["JobA", "failure"]]}


class Agents:
    """A stand-in for ``wfm.operations.Session``: PAYROLL deployed on two agents (version v2, v1
    still deployed), one remembered generation, a log; what it was asked to do, in ``done``."""

    def __init__(self) -> None:
        self.done: list[tuple[object, ...]] = []

    async def workflows(self) -> tuple[list[Deployed], list[str]]:
        jobs = {
            "JobA": {"agent": "agentA", "schedule": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]},
            "JobB": {"agent": "agentB", "schedule": ["fri"]},
        }
        payroll = Deployed(
            "PAYROLL", "v2", {"v1", "v2"}, {"agentA": ["JobA"], "agentB": ["JobB"]}, jobs, GRAPH, "agentA"
        )
        return [payroll], ["agentA", "agentB"]

    async def deployed(self, workflow: str) -> Deployed:
        found, agents = await self.workflows()
        for each in found:
            if each.workflow == workflow:
                return each
        raise UnknownWorkflow(f"no agent has workflow {workflow} deployed ({len(agents)} agents answered)")

    async def runs(self, workflow: str, limit: int, gid: str = "", into: Monitor | None = None) -> Monitor:
        assert into is not None
        into.receive({"class": "Trigger", "applname": workflow, "GID": "old", "schedule": "2026.11.20"})
        into.receive(status("JobA", "SUCCESS", "old", started=50.0, duration=1.0))
        into.receive(status("APPL_END", "SUCCESS", "old"))
        return into

    async def logs(self, workflow: str, job: str, gid: str, attempt: int) -> dict[str, Any]:
        if job == "JobZ":
            raise UnknownWorkflow(f"{workflow} has no job JobZ (jobs: JobA, JobB)")
        if job == "JobB":
            raise NoReply("no answer within 5 s from agentB", ["agentB"])
        text = "<payroll> done\n"
        return {
            "agent": "agentA",
            "attempts": [1, 2],
            "attempt": 2,
            "size": 70000,
            "truncated": True,
            "ended": True,
            "text": text,
        }

    async def cancel(self, workflow: str, gid: str, sign: Any) -> dict[str, tuple[str, str]]:
        self.done.append(("cancel", workflow, gid, sign(operation("agentA", workflow, CANCEL, {"gid": gid}))))
        return {"agentA": ("OK", "cancelled"), "agentB": ("REFUSED", "not signed by a deployer")}

    async def rerun(self, workflow: str, gid: str, start: str | None, sign: Any) -> str:
        self.done.append(("rerun", workflow, gid, start))
        return f"{gid}-r1"


def status(job: str, state: str, gid: str = "g1", **extra: object) -> dict[str, object]:
    return {"class": "JOBSTATUS", "applname": "PAYROLL", "jobname": job, "GID": gid, "status": state, **extra}


def test_runs_show_each_job_state_on_the_dag_and_the_timeline(tmp_path: Path) -> None:
    board = dashboard(tmp_path)
    board.runs_error = None
    board.monitor.receive({"class": "Trigger", "applname": "PAYROLL", "GID": "g1", "schedule": "2026.11.23"})
    board.monitor.receive(status("JobA", "SUCCESS", started=100.0, duration=1.5))
    board.monitor.receive(status("JobC", "NORUN"))
    web = client(board)
    grid = web.get("/fragment/runs").text
    assert 'data-gid="g1" data-outcome="running"' in grid
    assert (
        'class="cell state-SUCCESS" data-job="JobA"' in grid
        and 'class="cell state-NORUN" data-job="JobC"' in grid
    )
    page = web.get("/fragment/run", params={"workflow": "PAYROLL", "gid": "g1"}).text
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
        "the dashboard runs as monitor (role monitor): triggering needs role deployer or operator"
    )
    malformed = web.post("/api/trigger", content=b"{", headers={"Content-Type": "application/json"})
    assert malformed.status_code == 400
    assert web.post("/api/trigger", json={"workflow": 7}).json() == {"error": 'give {"workflow": NAME}'}


def test_a_trigger_the_broker_cannot_take_is_one_line(tmp_path: Path) -> None:
    board = dashboard(tmp_path)
    board.session = Agents()
    answer = client(board).post("/api/trigger", json={"workflow": "PAYROLL"})
    assert answer.status_code == 502 and answer.json()["error"].startswith("cannot trigger PAYROLL: ")


def test_a_trigger_of_a_workflow_nobody_deployed_is_refused_before_anything_is_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[str] = []
    monkeypatch.setattr(app_module, "trigger", lambda uri, tls, workflow: sent.append(workflow) or "g9")
    board = dashboard(tmp_path)
    web = client(board)
    waiting = web.post("/api/trigger", json={"workflow": "NOSUCH"})  # the agents not asked yet
    assert waiting.status_code == 503 and waiting.json()["error"].startswith("not connected to the agents")
    board.session = Agents()
    answer = web.post("/api/trigger", json={"workflow": "NOSUCH"})
    assert answer.status_code == 404
    assert answer.json() == {"error": "no agent has workflow NOSUCH deployed (2 agents answered)"}
    assert web.post("/api/trigger", json={"workflow": "PAYROLL"}).json() == {
        "workflow": "PAYROLL",
        "gid": "g9",
    }
    assert sent == ["PAYROLL"]


def test_a_generation_nobody_started_is_starting_then_not_shown_and_never_has_a_cancel_button(
    tmp_path: Path,
) -> None:
    board = dashboard(tmp_path)
    board.runs_error = None
    board.monitor.receive({"class": "Trigger", "applname": "NOSUCH", "GID": "g9", "schedule": "2026.11.23"})
    board.monitor.receive({"class": "Trigger", "applname": "PAYROLL", "GID": "g1", "schedule": "2026.11.23"})
    board.monitor.receive(status("APPL_START", "SUCCESS", started=100.0))
    web = client(board)
    page = web.get("/fragment/runs").text
    assert 'data-gid="g9" data-outcome="starting"' in page and 'data-gid="g1" data-outcome="running"' in page

    def opened(gid: str) -> str:
        return web.get(
            "/fragment/run", params={"workflow": "NOSUCH" if gid == "g9" else "PAYROLL", "gid": gid}
        ).text

    assert "data-action" not in opened("g9") and 'data-action="cancel"' in opened("g1")
    board.first_seen["NOSUCH", "g9"] -= pages.NOT_STARTED_AFTER  # 30 s later: no coordinator started it
    assert 'data-gid="g9"' not in web.get("/fragment/runs").text
    shown = web.get("/fragment/runs", params={"status": "not started"}).text  # unless asked for
    assert 'data-gid="g9" data-outcome="not started"' in shown and 'data-gid="g1"' not in shown
    assert "data-action" not in opened("g9")
    assert [r["gid"] for r in web.get("/api/runs").json()["generations"]] == ["g1"]


def test_history_says_spark_is_starting_without_blocking_then_shows_the_charts(tmp_path: Path) -> None:
    started = threading.Event()
    reader = HistoryReader(tmp_path, open_store=lambda path: started.wait(10) and "store")
    rows = [JobPeriod("PAYROLL", "JobA", date(2026, 11, d), 2, 1, 0, 1.0, 2.0, ()) for d in (1, 2)]
    query = HistoryQuery(date(2026, 11, 1), date(2026, 11, 30))
    summary = [JobSummary("PAYROLL", "JobA", 4, 2, 0, 1.0, 0.9, 2.0)]
    assert reader.report(lambda store: (rows, summary), query) == ("starting", None)
    started.set()
    for _ in range(100):
        state, result = reader.report(lambda store: (rows, summary) if store == "store" else [], query)
        if state == "ready":
            break
        threading.Event().wait(0.05)
    assert (state, result) == ("ready", (rows, summary))
    page = history(query, state, result)
    assert page.count("<svg") == 2 and "PAYROLL/JobA: runs, failures" in page
    table = page[: page.index("<svg")]  # the summary first
    assert '<tr class="summary failing" data-job="JobA"><td>PAYROLL</td>' in table
    assert [cell in table for cell in (">4<", ">2<", ">50 %<", ">1.0<", ">0.9<", ">2.0<")] == [True] * 6
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


def test_the_workflows_page_shows_what_the_agents_say_is_deployed_and_files_not_deployed(
    tmp_path: Path,
) -> None:
    board = dashboard(tmp_path)
    (tmp_path / "other.xml").write_text(
        (WORKFLOWS / "payroll.xml").read_text().replace('name="PAYROLL"', 'name="OTHER"')
    )
    asyncio.run(board.ask_agents(Agents(), set()))
    listed = {d.get("name", d.get("file")): d for d in client(board).get("/api/workflows").json()}
    payroll = listed["PAYROLL"]
    assert payroll["deployed"] and payroll["version"] == "v2" and payroll["older"] == ["v1"]
    assert payroll["agents"] == ["agentA", "agentB"] and payroll["missing"] == ["JobC"]
    assert [j["job"] for j in payroll["jobs"]] == ["JobA", "JobB", "JobC"]
    assert payroll["jobs"][1] == {
        "job": "JobB",
        "agent": "agentB",
        "schedule": ["fri"],
        "after": [["JobA", "success"]],
    }
    assert payroll["file"] == "payroll.xml" and payroll["file_version"] != "v2"  # the file is not what runs
    assert listed["OTHER"]["deployed"] is False and "error" in listed["broken.xml"]
    page = client(board).get("/fragment/workflows").text
    assert 'data-workflow="PAYROLL" data-deployed="true"' in page and "no answer for JobC" in page
    assert "agentA · daily" in page and "agentB · fri" in page and "? · ?" in page  # JobC: silent agent
    assert 'data-workflow="OTHER" data-deployed="false"' in page and "from other.xml, not deployed" in page


def test_the_runs_page_lists_the_generations_the_agents_remember_newest_first(tmp_path: Path) -> None:
    board = dashboard(tmp_path)
    board.monitor.receive(status("JobA", "SUCCESS", "live", started=100.0))  # followed live, newer
    remembered: set[str] = set()
    asyncio.run(board.ask_agents(Agents(), remembered))
    assert remembered == {"PAYROLL"}
    runs = client(board).get("/api/runs").json()["generations"]
    assert [(r["gid"], r["outcome"]) for r in runs] == [("live", "running"), ("old", "SUCCESS")]
    web = client(board)
    page = web.get("/fragment/runs").text
    assert page.index('data-gid="live"') < page.index('data-gid="old"')
    running = web.get("/fragment/run", params={"workflow": "PAYROLL", "gid": "live"}).text
    ended = web.get("/fragment/run", params={"workflow": "PAYROLL", "gid": "old"}).text
    assert 'data-action="cancel"' in running and 'data-action="rerun"' in ended
    assert '<option value="JobC">JobC</option>' in ended  # rerun from any job of the deployed graph
    unknown = web.get("/fragment/run", params={"workflow": "PAYROLL", "gid": "nosuch"})
    assert unknown.status_code == 400 and "no generation nosuch of PAYROLL" in unknown.text


def test_a_jobs_log_is_fetched_from_its_agent_and_shown_truncated_as_the_agent_says(tmp_path: Path) -> None:
    board = dashboard(tmp_path)
    web = client(board)
    query = {"workflow": "PAYROLL", "gid": "g1", "job": "JobA"}
    assert web.get("/fragment/logs", params=query).status_code == 503  # no session with the agents yet
    board.session = Agents()
    panel = web.get("/fragment/logs", params=query).text
    assert "<pre>&lt;payroll&gt; done\n</pre>" in panel and 'data-log="JobA"' in panel
    assert "attempt 2 (attempts: 1, 2); on agentA; the last 15 of 70000 bytes" in panel
    assert web.get("/api/logs", params=query).json()["truncated"] is True
    unknown = web.get("/fragment/logs", params={**query, "job": "JobZ"})
    assert unknown.status_code == 404 and "has no job JobZ" in unknown.text
    silent = web.get("/api/logs", params={**query, "job": "JobB"})
    assert silent.status_code == 504 and silent.json()["error"] == "no answer within 5 s from agentB"
    assert web.get("/api/logs", params={**query, "gid": "a b"}).status_code == 400


def test_cancel_and_rerun_are_refused_unless_the_identity_is_a_deployer(tmp_path: Path, certs: Path) -> None:
    board = dashboard(tmp_path, Identity(certs, "monitor"))
    board.session = agents = Agents()
    web = client(board)
    for action, doing in (("cancel", "cancelling"), ("rerun", "rerunning")):
        answer = web.post(f"/api/{action}", json={"workflow": "PAYROLL", "gid": "g1"})
        assert answer.status_code == 403
        assert answer.json()["error"].startswith(
            f"the dashboard runs as monitor (role monitor): {doing} needs role deployer or operator"
        )
        assert web.post(f"/api/{action}", json={"workflow": "PAYROLL"}).json() == {
            "error": 'give {"workflow": NAME, "gid": GID}'
        }
    assert agents.done == []


def test_cancel_and_rerun_as_a_deployer_sign_and_say_what_the_agents_answered(
    tmp_path: Path, certs: Path
) -> None:
    board = dashboard(tmp_path, Identity(certs, "deployer"))
    web = client(board)
    body = {"workflow": "PAYROLL", "gid": "g1"}
    assert web.post("/api/cancel", json=body).status_code == 503  # not connected to the agents yet
    board.session = agents = Agents()
    refused = web.post("/api/cancel", json=body)
    assert refused.status_code == 502
    assert (
        refused.json()["error"]
        == "cannot cancel g1: cancel of g1 refused by agentB: REFUSED not signed by a deployer"
    )
    ((_, _, _, signed),) = agents.done
    assert "signature" in dict(signed) and dict(signed)["sequence"]  # signed, by the dashboard's deployer
    rerun = web.post("/api/rerun", json={**body, "from": "JobB"})
    assert rerun.json() == {"workflow": "PAYROLL", "gid": "g1-r1", "rerun_of": "g1", "from": "JobB"}
    assert web.post("/api/rerun", json=body).json()["from"] is None
    assert agents.done[1:] == [("rerun", "PAYROLL", "g1", "JobB"), ("rerun", "PAYROLL", "g1", None)]
    assert web.post("/api/rerun", json={**body, "from": 3}).status_code == 400


class Running(Agents):
    """Agents asked while generation g1 runs: JobA done, JobB running (its second attempt)."""

    def __init__(self, started: float | None = None) -> None:
        super().__init__()
        self.asked: list[tuple[str, str]] = []
        self.started = started  # when JobB's attempt started, as its agent recorded it

    async def runs(self, workflow: str, limit: int, gid: str = "", into: Monitor | None = None) -> Monitor:
        assert into is not None
        self.asked.append(("runs", workflow))
        into.receive(status("JobB", "RUNNING", agentname="agentB"))  # as Session._feed passes "busy"
        return into

    async def logs(self, workflow: str, job: str, gid: str, attempt: int) -> dict[str, Any]:
        self.asked.append(("logs", job))
        return {
            "agent": "agentB",
            "attempts": [1, 2],
            "attempt": 2,
            "ended": False,
            "text": "",
            "started": self.started,
        }


@pytest.mark.parametrize(
    ("started", "since"),
    [(102.25, "102.250"), (None, "101.500")],  # the attempt's own start; else since it was ready
)
def test_a_running_job_is_asked_about_and_shown_running_with_its_attempt_agent_and_elapsed_time(
    tmp_path: Path, started: float | None, since: str
) -> None:
    board = dashboard(tmp_path)
    board.runs_error = None
    agents = Running(started)
    asyncio.run(board.ask_agents(agents, {"PAYROLL"}))  # deployed (its remembered runs asked already)
    board.monitor.receive({"class": "Trigger", "applname": "PAYROLL", "GID": "g1", "schedule": "2026.11.23"})
    board.monitor.receive(status("APPL_START", "SUCCESS", started=100.0))
    board.monitor.receive(status("JobA", "SUCCESS", started=100.0, duration=1.5))
    board.monitor.receive({"class": "Trigger", "applname": "NOSUCH", "GID": "g9", "schedule": "2026.11.23"})
    asyncio.run(board.ask_running(agents))
    assert agents.asked == [("runs", "PAYROLL"), ("logs", "JobB")]  # not NOSUCH: nobody has it
    assert board.attempts == {("PAYROLL", "g1", "JobB"): (2, started)}
    assert 'class="cell state-RUNNING" data-job="JobB"' in client(board).get("/fragment/runs").text
    page = client(board).get("/fragment/run", params={"workflow": "PAYROLL", "gid": "g1"}).text
    assert 'data-job="JobB" data-state="RUNNING"' in page  # on the DAG
    assert 'class="row state-RUNNING" data-job="JobB"' in page  # and the timeline, from JobA's end
    assert f'data-since="{since}" data-rest=" · attempt 2 · agentB"' in page
    asyncio.run(board.ask_running(agents))  # the attempt is asked once
    assert agents.asked.count(("logs", "JobB")) == 1
    board.monitor.receive(status("JobB", "SUCCESS", started=101.6, duration=3.0, attempt=2))
    asyncio.run(board.ask_running(agents))  # a stale answer does not undo the status
    assert board.monitor.generations["PAYROLL", "g1"].jobs["JobB"].status == "SUCCESS"
    assert ("PAYROLL", "g1", "JobB") not in board.attempts


def test_the_runs_grid_has_a_row_per_generation_a_column_per_job_filters_and_pages(tmp_path: Path) -> None:
    board = dashboard(tmp_path)
    asyncio.run(board.ask_agents(Agents(), {"PAYROLL"}))
    board.runs_error = None
    for number in range(120):  # days 2026-11-01 .. 2026-11-30, four a day; every fifth failed
        gid, day = f"g{number:03d}", 1 + number // 4
        board.monitor.receive(
            {"class": "Trigger", "applname": "PAYROLL", "GID": gid, "schedule": f"2026.11.{day:02d}"}
        )
        board.monitor.receive(status("JobA", "SUCCESS", gid, started=1000.0 + number, duration=1.0))
        board.monitor.receive(status("APPL_END", "FAILURE" if number % 5 == 0 else "SUCCESS", gid))
    web = client(board)
    first = web.get("/fragment/runs").text
    assert first.count('<tr class="run"') == pages.RUNS_PAGE and "1-50 of 120 generations" in first
    assert first.index('data-gid="g119"') < first.index('data-gid="g118"')  # newest first
    head = first[first.index("<thead>") : first.index("</thead>")]  # the jobs in the DAG's order
    assert [head.index(f'title="{job}"') for job in ("JobA", "JobB", "JobC")] == sorted(
        head.index(f'title="{job}"') for job in ("JobA", "JobB", "JobC")
    )
    assert 'data-page-to="2">older</button>' in first and "newer" not in first
    last = web.get("/fragment/runs", params={"page": "3"}).text
    assert (
        last.count('<tr class="run"') == 20 and "101-120 of 120" in last and 'data-page-to="2">newer' in last
    )
    failed = web.get(
        "/fragment/runs", params={"status": "FAILURE", "since": "2026-11-10", "until": "2026-11-19"}
    )
    rows = failed.text.count('<tr class="run"')
    assert rows == 8 and "1-8 of 8 generations (120 in all)" in failed.text
    assert web.get("/fragment/runs", params={"workflow": "OTHER"}).text.count('<tr class="run"') == 0
    assert web.get("/fragment/runs", params={"status": "GREEN"}).status_code == 400
    assert web.get("/fragment/runs", params={"page": "0"}).status_code == 400
    api = web.get("/api/runs", params={"page": "3"}).json()  # the same page as JSON
    assert (len(api["generations"]), api["page"], api["pages"], api["total"]) == (20, 3, 3, 120)
    assert api["generations"][0]["gid"] == "g019" and api["generations"][0]["outcome"] == "SUCCESS"
    chosen = {"status": "FAILURE", "since": "2026-11-10", "until": "2026-11-19"}
    assert web.get("/api/runs", params=chosen).json()["total"] == 8
    assert web.get("/api/runs", params={"status": "GREEN"}).status_code == 400


def test_the_overlay_shows_the_clients_of_each_broker_its_rates_and_what_each_refusal_means() -> None:
    from wfm.web.sources import hosted, rates

    table = {
        "entries": [
            {"id": "s1", "filter": "f", "hop": "agentB:agentB-1"},
            {"id": "s2", "filter": "f", "hop": "B1"},  # a neighbour's
            {"id": "s3", "filter": "f", "hop": "Local.DETECTOR"},
            {"id": "s4", "filter": "f", "hop": "deployer:c-1"},
        ],
        "total": 4,
    }
    status = {"id": "B2", "neighbors": ["B1"], "srt": table, "prt": {"entries": [], "total": 0}}
    assert hosted(status) == ["agentB", "deployer"]
    assert hosted({"id": "B2", "withheld": "tables"}) is None  # not this role's to see
    assert rates(None, (10.0, {"in.Publish": 5})) == {}
    assert rates((10.0, {"in.Publish": 5, "delivered": 1}), (12.0, {"in.Publish": 9, "delivered": 7})) == {
        "publications": 2.0,
        "deliveries": 3.0,
        "carried": 0.0,
    }
    counters = {"in.Publish": 9, "delivered": 7, "refused": 2, "refused.acl": 2, "dropped.ttl": 1}
    view = overlay_view(
        {"B2": status | {"counters": counters, "rates": {"publications": 2.0, "deliveries": 3.0}}}, {}
    )
    page = pages.overlay(view)
    assert '<g class="client" data-client="agentB" data-at="B2">' in page
    assert "2 in/s · 3 out/s" in page and "<td>agentB, deployer</td>" in page
    assert '<tr data-counter="refused.acl"><td><code>refused.acl</code></td><td>a client' in page
    assert '<tr data-counter="dropped.ttl">' in page and 'class="number">1</td></tr>' in page


def test_each_link_shows_its_frames_per_second_each_way() -> None:
    """Each end reports the frames it sent the other; two walks make a rate, drawn at the link's
    middle (a to b, then b to a) with a hover naming the directions."""
    from wfm.web.sources import SENT, rates

    before = (10.0, {SENT + "B2": 100})
    assert rates(before, (12.0, {SENT + "B2": 130}), {"B2": SENT + "B2"}) == {"B2": 15.0}
    assert rates(before, (12.0, {SENT + "B2": 3}), {"B2": SENT + "B2"}) == {"B2": 0.0}  # B2 relinked
    statuses = {
        "B1": {"id": "B1", "neighbors": ["B2"], "link_rates": {"B2": 15.0}},
        "B2": {"id": "B2", "neighbors": ["B1", "B3"], "link_rates": {"B1": 2.5}},
        "B3": {"id": "B3", "neighbors": ["B2"]},  # seen once: no rate yet
    }
    view = overlay_view(statuses, {})
    assert view["link_rates"] == [["B1", "B2", 15.0, 2.5]]
    page = pages.overlay(view)
    assert '<text class="link-rate" data-link="B1-B2"' in page and "15 ⇄ 2.5 /s" in page
    assert "<title>B1 → B2: 15 frames/s; B2 → B1: 2.5 frames/s</title>" in page
    assert 'class="link-rate" data-link="B2-B3"' not in page


def test_an_expired_generation_is_shown_expired_and_can_be_filtered(tmp_path: Path) -> None:
    board = dashboard(tmp_path)
    board.runs_error = None
    for gid in ("late", "ran"):
        board.monitor.receive(
            {"class": "Trigger", "applname": "PAYROLL", "GID": gid, "schedule": "2026.11.23"}
        )
    board.monitor.receive(
        status("APPL_END", "EXPIRED", "late", detail="expired: the Trigger reached agentA late")
    )
    board.monitor.receive(status("JobA", "SUCCESS", "ran", started=100.0, duration=1.0))
    board.monitor.receive(status("APPL_END", "SUCCESS", "ran"))
    web = client(board)
    grid = web.get("/fragment/runs").text
    assert (
        'data-gid="late" data-outcome="EXPIRED"' in grid and 'class="outcome state-EXPIRED">EXPIRED<' in grid
    )
    assert '<option value="EXPIRED">EXPIRED</option>' in web.get("/").text  # the status filter offers it
    only = web.get("/api/runs", params={"status": "EXPIRED"}).json()
    assert [(r["gid"], r["outcome"]) for r in only["generations"]] == [("late", "EXPIRED")]
    page = web.get("/fragment/run", params={"workflow": "PAYROLL", "gid": "late"}).text
    assert "EXPIRED</span> (expired: the Trigger reached agentA late)" in page
    assert 'data-action="rerun"' in page  # over: it may be triggered again, as a rerun
