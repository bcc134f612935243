"""Run parameters at the command line and in what shows generations: ``wfm trigger --param`` and
``wfm rerun --param`` check them against what the agents describe before anything is published;
the monitor, ``wfm runs`` and the dashboard show them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import date
from typing import Any

import pytest
from rich.console import Console

from wfm.cli import main
from wfm.monitor import Monitor, render
from wfm.operations import BadParams, Deployed, Session, generation_record
from wfm.web import pages
from wfm.workflow.model import Param
from workflow_messages import JOBSTATUS, TRIGGER, encode_params

URI = "socket://127.0.0.1:1/B1"
DECLARED = [
    {"name": "REGION", "type": "string", "default": "eu"},
    {"name": "LIMIT", "type": "int"},
]
DEPLOYMENT = {
    "workflow": "W",
    "version": "v1",
    "current": True,
    "coordinator": True,
    "graph": {"J": [["APPL_START", "success"]]},
    "jobs": {"J": {"command": "true", "schedule": "daily", "timeout": None, "retries": 0}},
    "params": DECLARED,
}


@pytest.fixture
def published(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Agents that describe W with DECLARED; what would be published, instead of publishing."""
    sent: list[dict[str, Any]] = []

    async def ask(kind: str, *_: object, **__: object) -> dict[str, dict[str, object]]:
        assert kind == "WORKFLOWS"
        return {"agentA": {"deployments": [DEPLOYMENT], "truncated": False}}

    @asynccontextmanager
    async def connect(uri: object, timeout: float) -> AsyncIterator[Session]:
        session = Session(None, uri, timeout)  # type: ignore[arg-type]
        monkeypatch.setattr(session, "ask", ask)
        yield session

    class Publisher:
        resent = 0

        def __init__(self, *_: object, **__: object) -> None:
            pass

        def __enter__(self) -> Publisher:
            return self

        def __exit__(self, *_: object) -> None:
            pass

        def publish(self, workflow: str, gid: str, day: date, **options: Any) -> None:
            sent.append({"workflow": workflow, "gid": gid, **options})

    monkeypatch.setattr(Session, "connect", connect)
    monkeypatch.setattr("wfm.cli.run.TriggerPublisher", Publisher)
    return sent


def test_trigger_publishes_the_parameters_checked_with_the_defaults_filled_in(
    published: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["trigger", "W", "--gid", "g1", "--broker", URI, "--param", "LIMIT=007", "-o", "json"]
    assert main(args) == 0
    [sent] = published
    assert sent["params"] == {"REGION": "eu", "LIMIT": "7"}
    assert json.loads(capsys.readouterr().out)["params"] == {"REGION": "eu", "LIMIT": "7"}


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (["LIMIT=1", "COLOR=red"], "W: unknown parameter COLOR (declared: REGION, LIMIT); nothing published"),
        ([], "W: required parameter LIMIT (int) not given; nothing published"),
        (["LIMIT=many"], "W: parameter LIMIT (int): 'many' is not an integer; nothing published"),
        (["LIMIT=1", "LIMIT=2"], "Invalid value for '--param': parameter LIMIT given twice"),
        (["LIMIT"], "Invalid value for '--param': 'LIMIT' is not KEY=VALUE"),
        (["9=1"], "Invalid value for '--param': invalid parameter name '9'"),
    ],
)
def test_trigger_refuses_parameters_that_do_not_fit_in_one_line_and_publishes_nothing(
    params: list[str], message: str, published: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["trigger", "W", "--broker", URI, *(f"--param={p}" for p in params)]
    assert main(args) == 2
    assert published == []
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_rerun_keeps_the_generations_parameters_and_overrides_those_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deployed = Deployed("W", "v1", {"v1"}, {"a": ["J"]}, graph=DEPLOYMENT["graph"], coordinator="a")  # type: ignore[arg-type]
    deployed.jobs = {"J": {"agent": "a"}}
    deployed.params = (Param("REGION", "string", "eu"), Param("LIMIT", "int"))
    monitor = Monitor()
    old = {"REGION": "us", "LIMIT": "3", "GONE": "x"}  # GONE: no longer declared
    monitor.receive(
        {
            "class": TRIGGER,
            "applname": "W",
            "GID": "g1",
            "schedule": "2026.11.23",
            "params": encode_params(old),
        }
    )
    monitor.receive(
        {"class": JOBSTATUS, "applname": "W", "GID": "g1", "jobname": "APPL_END", "status": "SUCCESS"}
    )
    triggered: list[tuple[str, dict[str, str]]] = []

    def trigger(
        uri: object, workflow: str, gid: str, day: date, outbox: object, params: dict[str, str]
    ) -> None:
        triggered.append((gid, params))

    session = Session(None, None, 1.0)  # type: ignore[arg-type]
    monkeypatch.setattr(session, "deployed", lambda workflow: asyncio.sleep(0, deployed))
    monkeypatch.setattr(session, "_runs", lambda deployed, limit, gid: asyncio.sleep(0, monitor))
    monkeypatch.setattr(session, "advertise_operations", lambda workflow: asyncio.sleep(0))
    monkeypatch.setattr("wfm.operations._trigger", trigger)
    assert asyncio.run(session.rerun("W", "g1", None, lambda p: p)) == "g1-r1"
    assert asyncio.run(session.rerun("W", "g1", None, lambda p: p, params={"LIMIT": "4"})) == "g1-r1"
    assert triggered == [("g1-r1", {"REGION": "us", "LIMIT": "3"}), ("g1-r1", {"REGION": "us", "LIMIT": "4"})]
    with pytest.raises(BadParams, match=r"^W: parameter LIMIT \(int\): 'x' is not an integer$"):
        asyncio.run(session.rerun("W", "g1", None, lambda p: p, params={"LIMIT": "x"}))
    assert len(triggered) == 2


def test_the_monitor_runs_and_the_dashboard_show_a_generations_parameters() -> None:
    monitor = Monitor()
    params = {"REGION": "us", "NOTE": "<b>"}
    monitor.receive(
        {
            "class": TRIGGER,
            "applname": "W",
            "GID": "g1",
            "schedule": "2026.11.23",
            "params": encode_params(params),
        }
    )
    event = monitor.receive(
        {"class": JOBSTATUS, "applname": "W", "GID": "g1", "jobname": "APPL_START", "status": "SUCCESS"}
    )
    assert event is not None and event.record()["params"] == params
    generation = monitor.generations["W", "g1"]
    assert generation_record(generation)["params"] == params
    console = Console(width=200, record=True)
    console.print(render(monitor))
    assert "params: NOTE=<b>  REGION=us" in console.export_text()
    html = pages.run(monitor, [], "W", "g1")
    assert '<p class="params">Parameters: <code>NOTE=&lt;b&gt;</code> <code>REGION=us</code></p>' in html
    assert pages.generations(monitor)["generations"][0]["params"] == params
    # a garbled one is shown as it came, not a crash
    monitor.receive(
        {"class": TRIGGER, "applname": "W", "GID": "g2", "schedule": "2026.11.23", "params": "{oops"}
    )
    assert monitor.generations["W", "g2"].params == {"?": "{oops"}
    # no Trigger with params: no params key in a status's line, as before
    plain = monitor.receive(
        {"class": JOBSTATUS, "applname": "W", "GID": "g3", "jobname": "J", "status": "SUCCESS"}
    )
    assert plain is not None and "params" not in plain.record()
