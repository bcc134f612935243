"""Which asyncio event loop a long-running process runs on: the standard one, or uvloop (libuv
underneath: readiness, socket reads and writes and timers in C rather than in Python, so each
frame a broker receives or sends costs less interpreter time).

``WFM_LOOP`` chooses, for every process started with it (``wfm up`` hands its environment to
its brokers and agents): ``asyncio`` (the default) or ``uvloop``. Asking for uvloop where it is
not installed (it has no wheel for every platform) is a one-line error, not a quiet fallback: a
figure measured on the wrong loop would mislead. Everything the product does runs on both; the
suite runs its process tests on the standard loop and a few on uvloop
(``tests/transport/test_loops.py``), and ``benchmarks/overlay.py --loops`` measures the one
against the other in the same run.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from broker.errors import LocalError

__all__ = ["DEFAULT", "ENV", "LOOPS", "Factory", "chosen", "loop_factory", "run"]

ENV = "WFM_LOOP"
LOOPS = ("asyncio", "uvloop")
DEFAULT = "asyncio"

T = TypeVar("T")
Factory = Callable[[], asyncio.AbstractEventLoop] | None  # None: the standard loop


def chosen(environ: dict[str, str] | os._Environ[str] = os.environ) -> str:
    """The loop ``WFM_LOOP`` names (the default when unset or empty); LocalError for another."""
    name = environ.get(ENV, "").strip() or DEFAULT
    if name not in LOOPS:
        raise LocalError(f"{ENV}={name!r:.40}: the event loop is one of {', '.join(LOOPS)}")
    return name


def loop_factory(name: str) -> Factory:
    """What makes a loop named ``name``: None for the standard one (asyncio's own default)."""
    if name == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        raise LocalError(f"{ENV}=uvloop, but uvloop is not installed here (pip install uvloop)") from None
    return uvloop.new_event_loop  # type: ignore[no-any-return]


def run(main: Coroutine[Any, Any, T], factory: Factory = None) -> T:
    """``asyncio.run(main)`` on a loop ``factory`` makes (None: the standard loop)."""
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
