"""The dashboard's Alerts page: the alerts no operator acknowledged, with their buttons; kept by
its subscriptions to alerts and their acks, against a real broker; acknowledged from one
dashboard, gone from another."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

from broker.client import Client, Delivery
from broker.client.reconnect import BrokerList
from broker.messages import Qos
from broker.transport.server import RouterService
from tests.transport.harness import run, until, uri
from tests.web.test_app import client, dashboard
from wfm.web.alerts import AlertBoard
from workflow_messages import job_status
from workflow_messages.alerts import alert_advertisement, job_alert

FAILED = job_status("PAYROLL", "JobB", "g1", "FAILURE", "exit 1 <oops>", version="v1", agent="agentB")


def alert_delivery() -> Delivery:
    found = job_alert(FAILED)
    assert found is not None
    publication, qos = found
    return Delivery(
        "s",
        publication,
        (),
        "B1/agentB-1/1@s",
        1_800_000_000.0,
        Qos(qos.priority, None, 1e10, True, True, "client", qos.mid, "any"),
    )


def test_the_page_lists_each_alert_with_its_button_and_escapes_its_detail(tmp_path: Path) -> None:
    board = dashboard(tmp_path)
    alert = alert_delivery()
    board.alert_board.alerts[alert.id] = alert
    board.alert_board.error = None
    web = client(board)
    assert web.get("/alerts").status_code == 200
    page = web.get("/fragment/alerts").text
    assert 'data-ack="PAYROLL.JobB.g1"' in page and "exit 1 &lt;oops&gt;" in page and "<oops>" not in page
    listed = web.get("/api/alerts").json()
    assert [(a["id"], a["job"], a["priority"]) for a in listed["alerts"]] == [("PAYROLL.JobB.g1", "JobB", 8)]
    refused = web.post("/api/alerts/ack", json={"id": "PAYROLL.JobB.g1"})  # no broker here
    assert refused.status_code == 502 and "cannot acknowledge PAYROLL.JobB.g1" in refused.json()["error"]
    assert web.post("/api/alerts/ack", json={}).json() == {"error": 'give {"id": ALERT}'}
    board.alert_board.alerts.clear()
    assert "no alert waits for an acknowledgement" in web.get("/fragment/alerts").text


def test_the_page_shows_each_alert_s_priority_expiry_and_publication_id(tmp_path: Path) -> None:
    """Beside what it says: its priority, when it expires (never, or in how long, the time in
    the title) and its publication id (the id cell's title); one whose time to live has run out
    is neither listed nor kept (the overlay no longer keeps it either)."""
    board = dashboard(tmp_path)
    now = time.time()
    lasting = replace(alert_delivery(), qos=replace(alert_delivery().qos, expires=None))
    expiring = replace(
        lasting, id="B1/agentB-1/2@s", time=now, qos=replace(lasting.qos, mid="A.B.g2", expires=now + 3600)
    )
    gone = replace(lasting, id="B1/agentB-1/3@s", qos=replace(lasting.qos, mid="A.B.g3", expires=now - 1))
    for alert in (lasting, expiring, gone):
        board.alert_board.alerts[alert.id] = alert
    board.alert_board.error = None
    web = client(board)
    page = web.get("/fragment/alerts").text
    assert "<th>priority</th>" in page and "<th>expires</th>" in page
    rows = {row.split('"')[0]: row for row in page.split('data-alert="')[1:]}
    assert set(rows) == {"PAYROLL.JobB.g1", "A.B.g2"}
    assert '<td title="publication B1/agentB-1/1@s">PAYROLL.JobB.g1</td>' in rows["PAYROLL.JobB.g1"]
    assert '<td class="number">8</td>' in rows["PAYROLL.JobB.g1"]
    assert "<td>never</td>" in rows["PAYROLL.JobB.g1"]
    assert ">in 60 min</td>" in rows["A.B.g2"] or ">in 59 min</td>" in rows["A.B.g2"]
    assert " UTC" in rows["A.B.g2"].split(">in ")[0]  # the time it expires, in the cell's title
    listed = {a["id"]: a for a in web.get("/api/alerts").json()["alerts"]}
    assert (listed["PAYROLL.JobB.g1"]["expires"], listed["A.B.g2"]["expires"]) == (None, now + 3600)
    assert listed["A.B.g2"]["publication_id"] == "B1/agentB-1/2@s" and listed["A.B.g2"]["priority"] == 8
    assert gone.id not in board.alert_board.alerts


def test_an_alert_acknowledged_on_one_dashboard_leaves_the_other() -> None:
    async def scenario() -> None:
        broker = RouterService(uri("B1"))
        await broker.start()
        agent = await Client.connect(broker.uri, "agentB")
        await agent.advertise(alert_advertisement("agentB"))
        found = job_alert(FAILED)
        assert found is not None
        await agent.publish(found[0], found[1])
        boards = [AlertBoard(), AlertBoard()]
        changes: list[int] = []
        tasks = [
            asyncio.create_task(b.follow(BrokerList([broker.uri]), lambda: changes.append(1))) for b in boards
        ]
        try:
            await until(lambda: all(len(b.alerts) == 1 for b in boards), what="both boards have the alert")
            done = await boards[0].acknowledge("PAYROLL.JobB.g1")
            assert done["id"] == "PAYROLL.JobB.g1" and boards[0].alerts == {}
            await until(lambda: boards[1].alerts == {}, what="the other board saw the ack")
            assert broker.router.status()["retained"] == 0
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await agent.close()
            await broker.stop()

    run(scenario())
