"""A standby's takeover through a real broker: the requests on the wire, the grant kept in the
broker's write-ahead log, and the primary's hello refused until it notes the handover."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.client import Client
from broker.errors import RefusedError
from broker.messages import Hello, LinkDown, LinkUp, Standby, TakeOver
from broker.routing.router import Router
from broker.transport import persistence
from broker.transport.codec import decode, encode
from broker.transport.handshake import HandedOver, handed_over
from broker.transport.server import RouterService
from tests.client.test_reconnect import FAST
from tests.transport.harness import run, uri

KEY = "PAYROLL/JobA"


def test_the_messages_round_trip_through_the_codec() -> None:
    for message in (
        Standby("1", ((KEY, ("agentB-1", "agentC-1"), 5.0),)),
        Standby("2", ()),
        TakeOver("3", "agentA-1", KEY),
        Hello("client", "agentA-1", noted=f"{KEY},W/J"),
    ):
        assert decode(encode(message)[4:]) == message
    assert decode(encode(Hello("client", "a"))[4:]) == Hello("client", "a")  # no noted: as before
    with pytest.raises(ValueError, match="above 0"):
        Standby("1", ((KEY, ("b",), 0.0),))
    with pytest.raises(ValueError, match="noted is a client's"):
        Hello("broker", "B1", noted=KEY)


def test_a_refusal_names_the_grants() -> None:
    reason = f"handed over: {KEY} to agentB-1 at 1800000000.5; W/J to agentC at 1800000001.0"
    assert handed_over(reason) == {KEY: ("agentB-1", 1800000000.5), "W/J": ("agentC", 1800000001.0)}


def test_a_grant_replays_from_the_write_ahead_log(tmp_path: Path) -> None:
    """A broker restarted between the grant and the primary's return replays its log to the same
    tombstone: the primary's hello is still refused."""
    log = persistence.RouterLog(tmp_path)
    router = log.restore(lambda: Router("B1", session_grace=600))
    inputs: list[tuple[float, object, str]] = [
        (1, LinkUp(False), "pri"),
        (2, Standby("1", ((KEY, ("sb",), 5.0),)), "pri"),
        (3, LinkUp(False), "sb"),
        (4, LinkDown(), "pri"),
        (6, TakeOver("2", "pri", KEY), "sb"),  # down 2 s: refused
        (12, TakeOver("3", "pri", KEY), "sb"),  # down 8 s: granted
    ]
    for now, message, hop in inputs:
        log.record(message, hop, now)  # type: ignore[arg-type]
        router.handle(message, hop, now)  # type: ignore[arg-type]
    log.wal.commit()
    assert router.sessions.handed_over("pri", "")
    log.close()
    again = persistence.RouterLog(tmp_path)
    restored = again.restore(lambda: Router("B9"))
    assert restored.sessions.handed_over("pri", "") == f"handed over: {KEY} to sb at 12.0"
    assert restored.sessions.handed_over("pri", KEY) is None
    assert "pri" not in restored.tables.clients
    again.close()


def test_a_real_broker_hands_a_session_over_and_refuses_the_primary_until_it_notes_it(tmp_path: Path) -> None:
    async def scenario() -> None:
        address = uri("B1")
        broker = RouterService(address, session_grace=60.0, data=tmp_path / "b1")
        await broker.start()
        primary = await Client.connect(address, "pri", backoff=FAST)
        await primary.declare_standbys({KEY: (("sb",), 0.5)})
        standby = await Client.connect(address, "sb", backoff=FAST)
        await primary.close(bye=False)  # its host goes: the link drops, the session is kept
        await asyncio.sleep(0.1)
        with pytest.raises(RefusedError, match=r"less than the 0\.5 s"):
            await standby.take_over("pri", KEY)
        await asyncio.sleep(0.5)
        assert (await standby.take_over("pri", KEY)).startswith(f"{KEY} of pri at ")
        await broker.stop()
        broker = RouterService(address, session_grace=60.0, data=tmp_path / "b1")
        await broker.start()
        with pytest.raises(HandedOver) as refused:
            await Client.connect(address, "pri", backoff=FAST)
        assert refused.value.grants[KEY][0] == "sb"
        assert "refused the connection: handed over: PAYROLL/JobA to sb at " in str(refused.value)
        again = await Client.connect(
            address, "pri", backoff=FAST, created=lambda client: setattr(client.connection, "noted", KEY)
        )
        assert again.connected and broker.router.sessions.declared == {}
        for client in (again, standby):
            await client.close()
        await broker.stop()

    run(scenario())
