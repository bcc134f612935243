"""Standby takeover at the primary's broker (``Standby``, ``TakeOver``, ``Sessions.take_over``),
in the simulated overlay: who may take a key over, and when; what a grant ends; the tombstone that
refuses the primary's hello until it says it knows, across a crash of the broker."""

from __future__ import annotations

import pytest

from broker.sim import Overlay
from broker.sim.overlay import RefusedError

KEY = "PAYROLL/JobA"
TAKEOVER = 30.0


def overlay(grace: float = 600) -> Overlay:
    """One broker: the primary (``pri``, declaring ``sb`` its standby for KEY) with a status
    advertisement and a subscription, the standby following its statuses, and another client."""
    overlay = Overlay.line(1, session_grace=grace)
    primary = overlay.add_client("pri", "B1")
    primary.advertise("[class,eq,JOBSTATUS],[jobname,isPresent,''],[status,isPresent,'']")
    primary.subscribe("[class,eq,Trigger]")
    primary.declare_standbys({KEY: (("sb",), TAKEOVER)})
    standby = overlay.add_client("sb", "B1")
    standby.subscribe("[class,eq,JOBSTATUS],[jobname,eq,JobA]")
    overlay.add_client("other", "B1").advertise("[class,eq,Trigger],[GID,isPresent,'']")
    return overlay


def test_a_standby_takes_over_once_the_primary_has_been_down_for_the_takeover() -> None:
    sim = overlay()
    standby = sim.clients["sb"]
    sim.clients["pri"].publish("[class,JOBSTATUS],[jobname,JobA],[status,SUCCESS]")
    sim.drop_client("pri")
    assert sim.routers["B1"].status()["subscriptions"] == 2
    sim.advance(TAKEOVER - 1)
    with pytest.raises(RefusedError, match=r"down 29\.0 s, less than the 30 s"):
        standby.take_over("pri", KEY)
    sim.advance(1)
    assert standby.take_over("pri", KEY).startswith(f"{KEY} of pri at ")
    # the primary's final status reached the broker before: the standby has it before the grant
    assert standby.take() == ["[class,JOBSTATUS],[jobname,JobA],[status,SUCCESS]"]
    # its session stays for its grace: what comes for its other subscriptions is held for it
    status = sim.routers["B1"].status()
    assert status["sessions_waiting"] == 1 and status["counters"]["sessions_handed_over"] == 1
    assert sim.routers["B1"].status()["subscriptions"] == 2
    sim.clients["other"].publish("[class,Trigger],[GID,g1]")
    assert len(sim.routers["B1"].custody.channels["pri"].held) == 1
    assert standby.take_over("pri", KEY)  # asked again (its answer lost): granted again


def test_only_a_declared_identity_may_take_over_and_only_one() -> None:
    sim = overlay()
    sim.add_client("intruder", "B1")
    sim.drop_client("pri")
    sim.advance(TAKEOVER)
    with pytest.raises(RefusedError, match="intruder may not take PAYROLL/JobA of pri over: only sb may"):
        sim.clients["intruder"].take_over("pri", KEY)
    with pytest.raises(RefusedError, match="pri declared no takeover of PAYROLL/JobB here"):
        sim.clients["sb"].take_over("pri", "PAYROLL/JobB")
    sim.clients["sb"].take_over("pri", KEY)
    with pytest.raises(RefusedError, match="sb declared no takeover"):
        sim.clients["intruder"].take_over("sb", KEY)


def test_a_second_standby_is_refused_once_the_key_was_handed_over() -> None:
    sim = overlay()
    sim.clients["pri"].declare_standbys({KEY: (("sb", "sb2"), TAKEOVER)})
    sim.add_client("sb2", "B1")
    sim.drop_client("pri")
    sim.advance(TAKEOVER)
    sim.clients["sb"].take_over("pri", KEY)
    with pytest.raises(RefusedError, match="PAYROLL/JobA of pri was handed over to sb at "):
        sim.clients["sb2"].take_over("pri", KEY)


def test_a_connected_primary_is_never_taken_over() -> None:
    sim = overlay()
    sim.advance(TAKEOVER * 10)
    with pytest.raises(RefusedError, match="pri is connected"):
        sim.clients["sb"].take_over("pri", KEY)
    sim.drop_client("pri")
    sim.advance(TAKEOVER / 2)
    sim.reconnect("pri")  # back in time: its session resumes, and the clock of a takeover stops
    sim.advance(TAKEOVER)
    with pytest.raises(RefusedError, match="pri is connected"):
        sim.clients["sb"].take_over("pri", KEY)


def test_the_primary_hello_is_refused_until_it_notes_the_handover() -> None:
    sim = overlay()
    primary = sim.clients["pri"]
    sim.drop_client("pri")
    sim.advance(TAKEOVER)
    sim.clients["sb"].take_over("pri", KEY)
    sim.reconnect("pri")
    assert primary.refused_hello.startswith(f"handed over: {KEY} to sb at ")
    sim.clients["other"].publish("[class,Trigger],[GID,g1]")  # held for it meanwhile
    primary.noted = KEY
    sim.reconnect("pri")
    assert primary.refused_hello == ""
    assert "pri" in sim.routers["B1"].tables.clients  # its session, resumed
    assert primary.take() == ["[class,Trigger],[GID,g1]"]  # what was held for its other keys
    assert sim.routers["B1"].sessions.declared == {}  # the tombstone went: it declares again
    primary.advertise("[class,eq,JOBSTATUS],[jobname,isPresent,''],[status,isPresent,'']")
    primary.declare_standbys({KEY: (("sb",), TAKEOVER)})
    with pytest.raises(RefusedError, match="pri is connected"):
        sim.clients["sb"].take_over("pri", KEY)


def test_a_takeover_after_the_grace_period_is_still_decided_by_the_link_down_time() -> None:
    sim = overlay(grace=10)
    sim.drop_client("pri")
    sim.advance(11)  # its session is withdrawn: what it declared stays, with when it left
    assert sim.routers["B1"].status()["counters"]["sessions_expired"] == 1
    with pytest.raises(RefusedError, match=r"down 11\.0 s"):
        sim.clients["sb"].take_over("pri", KEY)
    sim.advance(TAKEOVER)
    sim.clients["sb"].take_over("pri", KEY)
    sim.reconnect("pri")
    assert sim.clients["pri"].refused_hello.startswith("handed over: ")


def test_a_primary_back_after_its_grace_without_a_takeover_starts_afresh() -> None:
    sim = overlay(grace=10)
    sim.drop_client("pri")
    sim.advance(20)
    sim.reconnect("pri")
    assert sim.clients["pri"].refused_hello == ""
    assert sim.routers["B1"].sessions.declared == {}
    with pytest.raises(RefusedError, match="pri declared no takeover"):
        sim.clients["sb"].take_over("pri", KEY)


def test_the_tombstone_survives_a_crash_of_the_broker() -> None:
    sim = overlay()
    sim.drop_client("pri")
    sim.advance(TAKEOVER)
    sim.clients["sb"].take_over("pri", KEY)
    sim.crash("B1")
    sim.recover("B1")
    sim.reconnect("pri")
    assert sim.clients["pri"].refused_hello.startswith(f"handed over: {KEY} to sb")


def test_a_primary_that_says_bye_leaves_nothing_to_take_over() -> None:
    sim = overlay()
    sim.clients["pri"].leave()
    sim.advance(TAKEOVER)
    with pytest.raises(RefusedError, match="pri declared no takeover"):
        sim.clients["sb"].take_over("pri", KEY)
