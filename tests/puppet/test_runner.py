"""The runner without processes: what it does before and after them."""

from __future__ import annotations

import time
from pathlib import Path

from tests.puppet.test_chaos import LINE
from wfm.puppet.runner import Entry, Puppet, Settings
from wfm.topology import parse_topology


def test_a_run_without_a_delivery_ends_after_the_linger(tmp_path: Path) -> None:
    """The quiet time is counted from the start of the run, not from the machine's boot (a
    console closed before any traffic once waited for hours)."""
    entries: list[Entry] = []
    with Puppet(parse_topology(LINE), tmp_path, entries.append, print, Settings(linger=0.1)) as puppet:
        began = time.monotonic()
        report = puppet.finish()
    assert time.monotonic() - began < 2.0
    assert report.ok and report.pairs == () and entries == []
