"""``benchmarks/qos.py``'s expiry figure runs on the installed build (it watches the broker's
driver; a compiled router's methods cannot be replaced, which once stopped ``make bench``)."""

from __future__ import annotations

import asyncio

from benchmarks.qos import expiry_delays


def test_the_expiry_figure_sees_every_publication_removed() -> None:
    delays = asyncio.run(asyncio.wait_for(expiry_delays(20), 30))
    assert len(delays) == 20 and all(0 <= delay < 2.0 for delay in delays)
