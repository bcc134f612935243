"""The dashboard's holds and approvals: held and awaiting jobs shown on a generation's view with
Hold, Release, Approve and Reject, and ``POST /api/hold``, ``/api/release``, ``/api/approve``
(operators and deployers only), with Starlette's TestClient and a stand-in for the agents."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from broker.transport.tls import Identity
from tests.web.test_app import Agents, client, dashboard, status
from wfm.monitor import Monitor
from wfm.operations import Deployed, UnknownWorkflow

RUN = {"workflow": "PAYROLL", "gid": "g1"}


class Holding(Agents):
    """Agents asked while g1 runs: JobA awaits approval, JobB is held; what they were asked, in ``done``."""

    async def workflows(self) -> tuple[list[Deployed], list[str]]:
        found, agents = await super().workflows()
        found[0].holds = {("JobB", "*"), ("*", "g9")}
        return found, agents

    async def runs(self, workflow: str, limit: int, gid: str = "", into: Monitor | None = None) -> Monitor:
        assert into is not None
        into.receive(status("JobA", "AWAITING", agentname="agentA"))  # as Session._feed passes "busy"
        into.receive(status("JobB", "HELD", agentname="agentB"))
        return into

    async def hold(
        self, workflow: str, sign: Any, job: str | None = None, gid: str | None = None, release: bool = False
    ) -> dict[str, tuple[str, str]]:
        self.done.append(("release" if release else "hold", workflow, job, gid))
        if job == "JobZ":
            raise UnknownWorkflow(f"{workflow} has no job JobZ (jobs: JobA, JobB, JobC)")
        return {"agentA": ("OK", "released" if release else "held"), "agentB": ("UNCHANGED", "held already")}

    async def logs(self, workflow: str, job: str, gid: str, attempt: int) -> dict[str, Any]:
        empty = {"attempts": [], "attempt": 0, "size": 0, "truncated": False, "ended": True, "text": ""}
        return {"agent": "agentA", **empty, "status": "SUCCESS", "detail": "approved by operator ops: ok"}

    async def approve(
        self, workflow: str, job: str, gid: str, sign: Any, approved: bool = True, comment: str = ""
    ) -> tuple[str, str, str]:
        self.done.append(("approve", workflow, job, gid, approved, comment))
        if gid == "g2":
            return "agentA", "REFUSED", "deployer dep may not approve JobA: it takes operator"
        return "agentA", "OK", f"{'approved' if approved else 'rejected'} by operator ops: {comment}"


def holding(tmp_path: Path, tls: Identity | None = None) -> tuple[Any, Holding]:
    board = dashboard(tmp_path, tls)
    board.runs_error = None
    board.session = agents = Holding()
    asyncio.run(board.ask_agents(agents, {"PAYROLL"}))
    board.monitor.receive({"class": "Trigger", "applname": "PAYROLL", "GID": "g1", "schedule": "2026.11.23"})
    board.monitor.receive(status("APPL_START", "SUCCESS", started=100.0))
    asyncio.run(board.ask_running(agents))
    return board, agents


def test_held_and_awaiting_jobs_are_shown_with_their_buttons(tmp_path: Path) -> None:
    board, _ = holding(tmp_path)
    web = client(board)
    grid = web.get("/fragment/runs").text
    assert (
        'class="cell state-AWAITING" data-job="JobA"' in grid
        and 'class="cell state-HELD" data-job="JobB"' in grid
    )
    page = web.get("/fragment/run", params=RUN).text
    assert 'data-job="JobA" data-state="AWAITING"' in page and 'data-job="JobB" data-state="HELD"' in page
    assert 'data-action="hold"' in page and 'data-action="release"' in page
    assert (
        '<option value="*">the workflow</option>' in page
        and '<option value="JobB">JobB, every generation' in page
    )
    assert 'data-action="approve" data-approval-job="JobA"' in page
    assert 'data-action="reject" data-approval-job="JobA"' in page
    assert 'data-approval-job="JobB"' not in page  # held, not awaiting approval
    board.monitor.receive(status("JobA", "SUCCESS"))
    board.monitor.receive(status("JobB", "SUCCESS"))
    board.monitor.receive(status("APPL_END", "SUCCESS"))
    ended = web.get("/fragment/run", params=RUN).text
    assert "data-hold-scope" not in ended and "data-approval-job" not in ended


def test_hold_release_and_approve_are_refused_unless_the_identity_may_operate(
    tmp_path: Path, certs: Path
) -> None:
    board, agents = holding(tmp_path, Identity(certs, "monitor"))
    web = client(board)
    for action, body, doing in (
        ("hold", RUN, "holding"),
        ("release", RUN, "releasing"),
        ("approve", {**RUN, "job": "JobA", "verdict": "approve"}, "approving"),
    ):
        answer = web.post(f"/api/{action}", json=body)
        assert answer.status_code == 403
        assert f"{doing} needs role deployer or operator" in answer.json()["error"]
    assert web.post("/api/approve", json=RUN).json() == {
        "error": 'give {"workflow": NAME, "job": JOB, "gid": GID, "verdict": approve|reject}'
    }
    assert agents.done == []


def test_hold_and_release_as_an_operator_say_what_each_agent_answered(tmp_path: Path, certs: Path) -> None:
    board, agents = holding(tmp_path, Identity(certs, "operator"))
    web = client(board)
    held = web.post("/api/hold", json=RUN)
    assert held.json() == {
        "workflow": "PAYROLL",
        "job": None,
        "gid": "g1",
        "agents": {
            "agentA": {"result": "OK", "detail": "held"},
            "agentB": {"result": "UNCHANGED", "detail": "held already"},
        },
    }
    assert web.post("/api/release", json={"workflow": "PAYROLL", "job": "JobB"}).status_code == 200
    assert web.post("/api/hold", json={"workflow": "PAYROLL", "job": "*"}).status_code == 200  # the workflow
    assert agents.done == [
        ("hold", "PAYROLL", None, "g1"),
        ("release", "PAYROLL", "JobB", None),
        ("hold", "PAYROLL", None, None),
    ]
    unknown = web.post("/api/hold", json={"workflow": "PAYROLL", "job": "JobZ"})
    assert unknown.status_code == 404 and "no job JobZ" in unknown.json()["error"]
    assert web.post("/api/hold", json={"workflow": "PAYROLL", "job": "a b"}).status_code == 400
    assert web.post("/api/hold", json={"workflow": "PAYROLL", "gid": "../x"}).status_code == 400
    assert len(agents.done) == 4  # neither bad one was sent


def test_approve_and_reject_as_an_operator_name_who_decided(tmp_path: Path, certs: Path) -> None:
    board, agents = holding(tmp_path, Identity(certs, "operator"))
    web = client(board)
    approved = web.post("/api/approve", json={**RUN, "job": "JobA", "verdict": "approve", "comment": "fine"})
    assert approved.json() == {
        "workflow": "PAYROLL",
        "job": "JobA",
        "gid": "g1",
        "agent": "agentA",
        "result": "OK",
        "detail": "approved by operator ops: fine",
    }
    rejected = web.post("/api/approve", json={**RUN, "job": "JobA", "verdict": "reject"}).json()
    assert rejected["detail"] == "rejected by operator ops: "
    refused = web.post(
        "/api/approve", json={"workflow": "PAYROLL", "gid": "g2", "job": "JobA", "verdict": "approve"}
    )
    assert refused.status_code == 502
    assert refused.json()["error"] == (
        "cannot decide JobA of g2: agentA: REFUSED deployer dep may not approve JobA: it takes operator"
    )
    for bad in (
        {"verdict": "maybe"},
        {"verdict": "approve", "comment": "x" * 501},
        {"verdict": "approve", "job": "a b"},
    ):
        assert web.post("/api/approve", json={**RUN, "job": "JobA", **bad}).status_code == 400
    assert [d[4] for d in agents.done] == [True, False, True]


def test_an_approval_step_s_log_panel_says_who_decided(tmp_path: Path) -> None:
    board, _ = holding(tmp_path)
    panel = client(board).get("/fragment/logs", params={**RUN, "job": "JobA"}).text
    assert "<p>no log: SUCCESS (approved by operator ops: ok); on agentA</p>" in panel


def test_the_workflows_page_says_what_is_on_hold(tmp_path: Path) -> None:
    board, _ = holding(tmp_path)
    page = client(board).get("/fragment/workflows").text
    assert '<span class="on-hold">on hold: every job in g9; JobB</span>' in page


def test_the_states_agents_publish_show_live_without_asking_them(tmp_path: Path) -> None:
    """JOBSTATEs followed live (workflow_messages.jobstate): the grid, the DAG and the timeline
    show a job held or awaiting approval, with why, before any answer of the agents says so."""
    board = dashboard(tmp_path)
    board.runs_error = None
    board.session = agents = Agents()
    asyncio.run(board.ask_agents(agents, {"PAYROLL"}))
    board.monitor.receive({"class": "Trigger", "applname": "PAYROLL", "GID": "g1", "schedule": "2026.11.23"})
    board.monitor.receive(status("APPL_START", "SUCCESS", started=100.0))
    for job, state, reason in (
        ("JobA", "AWAITING", "awaiting approval by operator (wfm approve)"),
        ("JobB", "HELD", "on hold: job JobB of PAYROLL"),
    ):
        board.monitor.receive(
            {
                "class": "JOBSTATE",
                "applname": "PAYROLL",
                "jobname": job,
                "GID": "g1",
                "state": state,
                "reason": reason,
                "agentname": "agentA",
                "since": 101.0,
            }
        )
    web = client(board)
    grid = web.get("/fragment/runs").text
    assert 'class="cell state-HELD" data-job="JobB" title="JobB: HELD (on hold: job JobB of PAYROLL)"' in grid
    page = web.get("/fragment/run", params=RUN).text
    assert 'data-job="JobB" data-state="HELD"' in page and "HELD: on hold: job JobB of PAYROLL" in page
    assert 'data-action="approve" data-approval-job="JobA"' in page
    board.monitor.receive(status("JobB", "SUCCESS", started=102.0, duration=1.0))
    assert 'data-job="JobB" data-state="SUCCESS"' in web.get("/fragment/run", params=RUN).text
