"""Generation ids, trigger dates and workflow names: what ``wfm trigger`` accepts; and its
outbox, where a Trigger the broker did not acknowledge waits for the next run."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime
from pathlib import Path
from typing import Any

import pytest

from broker.client import BlockingClient
from broker.messages import Publish
from broker.transport.server import RouterService
from tests.processes import WFM
from tests.transport.harness import uri
from wfm.triggers import (
    CUSTODY_AFTER_EXPIRY,
    NotAcknowledged,
    TriggerPublisher,
    check_gid,
    check_workflow,
    new_gid,
    parse_date,
    parse_ttl,
)
from workflow_messages.signature import check_publication


def test_new_gid_is_short_sortable_and_unique() -> None:
    early, late = datetime(2026, 11, 23, 9, 5, 7), datetime(2026, 11, 23, 10, 0, 0)
    assert new_gid(early, "3f9a") == "20261123-090507-3f9a"
    assert new_gid(early) < new_gid(late)
    assert len({new_gid(early) for _ in range(50)}) > 40  # random suffix apart within one second
    assert all(check_gid(new_gid(early)) for _ in range(5))


@pytest.mark.parametrize("gid", ["g001", "20261123-ab12cd", "a.b:c_d-e", "x" * 64])
def test_valid_gids(gid: str) -> None:
    assert check_gid(gid) == gid


@pytest.mark.parametrize("gid", ["", "-x", ".x", "a b", "a'b", "x" * 65, "é"])
def test_invalid_gids(gid: str) -> None:
    with pytest.raises(ValueError, match="invalid gid"):
        check_gid(gid)


@pytest.mark.parametrize("text", ["2026-11-23", "2024-02-29"])
def test_valid_dates(text: str) -> None:
    assert parse_date(text).isoformat() == text


@pytest.mark.parametrize("text", ["20261123", "2026-11-31", "2025-02-29", "2026.11.23", "today", "2026-1-2"])
def test_invalid_dates(text: str) -> None:
    with pytest.raises(ValueError, match=r"invalid date .* \(use YYYY-MM-DD"):
        parse_date(text)


@pytest.mark.parametrize(
    ("name", "ok"), [("PAYROLL", True), ("pay_roll-2", True), ("2PAY", False), ("a b", False)]
)
def test_workflow_names(name: str, ok: bool) -> None:
    if ok:
        assert check_workflow(name) == name
    else:
        with pytest.raises(ValueError, match="invalid workflow name"):
            check_workflow(name)


@contextmanager
def broker_in_a_thread() -> Iterator[RouterService]:
    """A broker on its own event loop, for the blocking TriggerPublisher of the test's thread."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    broker = RouterService(uri("B1"))
    asyncio.run_coroutine_threadsafe(broker.start(), loop).result(5)
    try:
        yield broker
    finally:
        asyncio.run_coroutine_threadsafe(broker.stop(), loop).result(5)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def test_a_trigger_not_acknowledged_waits_in_the_outbox_for_the_next_run(tmp_path: Path) -> None:
    day = date(2026, 11, 23)
    with broker_in_a_thread() as broker:
        handle = broker.router.handle

        def deaf_to_publications(message: object, hop: str, now: float) -> list[Any]:
            return [] if isinstance(message, Publish) else handle(message, hop, now)  # type: ignore[arg-type]

        broker.router.handle = deaf_to_publications  # type: ignore[assignment]
        with (
            pytest.raises(
                NotAcknowledged, match=rf"generation g1 waits in outbox {tmp_path}/outbox and the next"
            ),
            TriggerPublisher(broker.uri, timeout=0.5, outbox=tmp_path / "outbox") as publisher,
        ):
            publisher.publish("PAYROLL", "g1", day)
        broker.router.handle = handle  # type: ignore[method-assign]
        with BlockingClient(broker.uri) as subscriber:
            subscriber.subscribe("[class,eq,Trigger]")
            with TriggerPublisher(broker.uri, outbox=tmp_path / "outbox") as publisher:
                publisher.publish("PAYROLL", "g2", day)
                assert publisher.resent == 1
            got = [subscriber.receive(timeout=5) for _ in range(2)]
            assert [d.publication["GID"] for d in got if d is not None] == ["g1", "g2"]


@pytest.mark.parametrize(
    ("point", "first_arrives"),
    [("outbox.stored", False), ("outbox.acknowledged", True)],
)
def test_wfm_trigger_killed_between_its_outbox_and_the_acknowledgement(
    tmp_path: Path, point: str, first_arrives: bool
) -> None:
    """A real ``wfm trigger`` killed -9 (a failpoint) once its Trigger is on disk and before it is
    sent, or once the broker acknowledged it and before the outbox forgot it: the next run sends
    it first, under the same id, and the subscriber gets each generation exactly once."""
    day = "2026-11-23"
    with broker_in_a_thread() as broker, BlockingClient(broker.uri) as subscriber:
        subscriber.subscribe("[class,eq,Trigger]")

        def trigger(gid: str, failpoints: str = "") -> subprocess.CompletedProcess[str]:
            argv = [WFM, "trigger", "PAYROLL", "--gid", gid, "--date", day, "--wait", "0", "--no-check"]
            argv += ["--broker", str(broker.uri), "--outbox", str(tmp_path / "outbox")]
            env = {**os.environ, "WFM_FAILPOINTS": failpoints}
            return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)

        killed = trigger("g1", point)
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        assert f"failpoint {point} (pass 1): killed" in killed.stderr
        first = subscriber.receive(timeout=1)
        assert (first is not None) == first_arrives
        again = trigger("g2")
        assert again.returncode == 0, again.stderr
        assert "sent again 1 Trigger(s)" in again.stderr
        got = [subscriber.receive(timeout=5) for _ in range(1 if first_arrives else 2)]
        got.append(subscriber.receive(timeout=1))  # a copy of g1 would come here
        gids = [d.publication["GID"] for d in [first, *got] if d is not None]
        assert gids == ["g1", "g2"]


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30.0), ("5m", 300.0), ("250ms", 0.25), ("365d", 365 * 86400.0)]
)
def test_valid_ttls(text: str, seconds: float) -> None:
    assert parse_ttl(text) == seconds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0", "'0' is not a time to live above 0 and at most 365d"),
        ("0ms", "'0ms' is not a time to live above 0"),
        ("366d", "'366d' is not a time to live above 0 and at most 365d"),
        ("-1s", "'-1s' is not a duration"),
        ("soon", "'soon' is not a duration"),
    ],
)
def test_invalid_ttls(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_ttl(text)


def test_a_trigger_with_a_ttl_carries_its_expiry_signed_and_lives_in_custody_a_while_longer() -> None:
    with broker_in_a_thread() as broker, BlockingClient(broker.uri) as subscriber:
        subscriber.subscribe("[class,eq,Trigger]")
        with TriggerPublisher(broker.uri) as publisher:
            before = time.time()
            expires = publisher.publish("PAYROLL", "g1", date(2026, 11, 23), ttl=60.0)
            publisher.publish("PAYROLL", "g2", date(2026, 11, 23))  # no ttl: as before
        late, plain = subscriber.receive(timeout=5), subscriber.receive(timeout=5)
    assert late is not None and plain is not None
    assert expires is not None and before + 60 - 0.001 <= expires <= time.time() + 60  # to the ms
    assert late.publication["expires"] == expires
    check_publication(late.publication)  # the expiry is under the signature
    assert late.qos.expires is not None and late.qos.expires >= expires + CUSTODY_AFTER_EXPIRY
    assert "expires" not in plain.publication and plain.qos.expires is None
