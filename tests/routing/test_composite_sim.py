"""Composite subscriptions through the overlay (detection at the subscriber's broker for now)."""

from __future__ import annotations

import pytest

from broker.sim import Overlay
from tests.routing.test_detection import WORKFLOW

MODES = ["off", "lazy", "active"]


@pytest.mark.parametrize("mode", MODES)
def test_and_of_classes_advertised_on_different_branches(mode: str) -> None:
    overlay = Overlay.star(4, covering=mode)
    a, b = overlay.add_client("pa", "B2"), overlay.add_client("pb", "B3")
    a.advertise("[class,eq,a],[x,isPresent,'']")
    b.advertise("[class,eq,b],[x,isPresent,'']")
    sub = overlay.add_client("sub", "B5")
    sub.subscribe_composite("{{[class,eq,a],[x,eq,$S$X]}&{[class,eq,b],[x,eq,$S$X]}}")
    a.publish("[class,a],[x,k1]")
    b.publish("[class,b],[x,k2]")
    assert sub.fired() == []
    b.publish("[class,b],[x,k1]")
    assert sub.fired() == [["[class,a],[x,k1]", "[class,b],[x,k1]"]]
    assert sub.take() == []  # composite firings are notifications, not plain deliveries


def test_workflow_shape_across_brokers() -> None:
    overlay = Overlay.line(3)
    jobs, trigger = overlay.add_client("agentA", "B1"), overlay.add_client("issuer", "B2")
    jobs.advertise(
        "[class,eq,JOBSTATUS],[applname,eq,PAYROLL],[jobname,isPresent,''],[GID,isPresent,''],[status,isPresent,'']"
    )
    trigger.advertise("[class,eq,Trigger],[applname,eq,PAYROLL],[GID,isPresent,'']")
    agent_b = overlay.add_client("agentB", "B3")
    agent_b.subscribe_composite(
        WORKFLOW,
        clear="[class,eq,JOBSTATUS],[applname,eq,PAYROLL],[jobname,eq,APPL_END],[GID,eq,$S$X]",
    )
    jobs.publish("[class,JOBSTATUS],[applname,PAYROLL],[jobname,JobA],[GID,g1],[status,SUCCESS]")
    trigger.publish("[class,Trigger],[applname,PAYROLL],[GID,g2]")
    assert agent_b.fired() == []  # another generation must never complete the join
    trigger.publish("[class,Trigger],[applname,PAYROLL],[GID,g1]")
    assert len(agent_b.fired()) == 1
    status = overlay.routers["B3"].status()
    assert status["composite_subscriptions"] == 1 and status["composite_waiting"] == 1  # g2 waits
    jobs.publish("[class,JOBSTATUS],[applname,PAYROLL],[jobname,APPL_END],[GID,g2],[status,SUCCESS]")
    assert overlay.routers["B3"].status()["composite_waiting"] == 0


def test_unsubscribing_a_composite_removes_every_part_everywhere() -> None:
    overlay = Overlay.star(4)
    overlay.add_client("pa", "B2").advertise("[class,eq,a]")
    overlay.add_client("pb", "B3").advertise("[class,eq,b]")
    sub = overlay.add_client("sub", "B4")
    cid = sub.subscribe_composite("{{[class,eq,a]};{[class,eq,b]}}")
    assert sum(r.status()["subscriptions"] for r in overlay.routers.values()) > 2
    sub.unsubscribe(cid)
    for router in overlay.routers.values():
        assert router.status()["subscriptions"] == 0 and router.status()["composite_subscriptions"] == 0


def test_subscriber_leaving_removes_its_composites() -> None:
    overlay = Overlay.line(2)
    overlay.add_client("p", "B1").advertise("[class,eq,a]")
    overlay.add_client("sub", "B2").subscribe_composite("{{[class,eq,a],[n,=,$I$N]}||{[class,eq,a]}}")
    overlay.remove_client("sub")
    assert all(r.status()["subscriptions"] == 0 for r in overlay.routers.values())
