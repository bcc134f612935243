"""The injected clock: the manual one moves only when told, and never backwards."""

from __future__ import annotations

import pytest

from broker.clock import SYSTEM, ManualClock


def test_manual_clock_moves_both_readings_together() -> None:
    clock = ManualClock(now=5.0, wall=1000.0)
    clock.advance(2.5)
    assert (clock.monotonic(), clock.time()) == (7.5, 1007.5)


def test_manual_clock_refuses_to_go_back() -> None:
    with pytest.raises(ValueError, match="cannot go back"):
        ManualClock().advance(-1)


def test_system_clock_reads_the_process_clocks() -> None:
    first = SYSTEM.monotonic()
    assert SYSTEM.monotonic() >= first
    assert SYSTEM.time() > 1_600_000_000
