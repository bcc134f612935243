"""Running a long-lived asyncio service from a command until SIGINT or SIGTERM.

The signal asks the service to stop and the command returns once it has, so a broker closes its
links, an agent its journal and a historian flushes its landing log, instead of dying in a
KeyboardInterrupt traceback. The exit status says which signal it was: 0 after SIGTERM (asked to
stop), 130 after SIGINT (Ctrl-C), as for any command interrupted (``INTERRUPTED``, read by
:func:`wfm.cli.main`).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

import click

from broker import loops
from broker.errors import LocalError

if TYPE_CHECKING:
    from wfm.metrics import Address
    from wfm.metrics.exposition import Exposition, Families

__all__ = ["INTERRUPTED", "Running", "Server", "Service", "exposed", "on_signals", "serve", "stop_event"]

INTERRUPTED = threading.Event()  # a SIGINT stopped the command: its exit status is 130


class Service(Protocol):
    """Runs until :meth:`stop` is called (from the same event loop)."""

    async def run(self) -> None: ...

    def stop(self) -> None: ...


class Server(Protocol):
    """Serves between :meth:`start` and :meth:`stop`."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class Running:
    """A :class:`Server` as a :class:`Service`: ``run`` starts it and stops it once asked to."""

    def __init__(self, server: Server, log: logging.Logger) -> None:
        self.server = server
        self.log = log
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        await self.server.start()
        await self._stopping.wait()
        self.log.info("stopping")
        await self.server.stop()


def on_signals(callback: Callable[[], object]) -> None:
    """SIGINT and SIGTERM call ``callback`` in the running loop instead of interrupting it."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, _stopping, sig, callback)


def _stopping(sig: int, callback: Callable[[], object]) -> None:
    if sig == signal.SIGINT:
        INTERRUPTED.set()
    callback()


def exposed(address: Address | None, families: Families) -> Exposition | None:
    """``--metrics HOST:PORT``: ``families`` served at ``/metrics`` there, listening already (a
    port in use is a one-line error before the service starts), for :func:`serve`; None without."""
    if address is None:
        return None
    from wfm.metrics.exposition import expose  # prometheus_client: loaded only when asked for

    try:
        return expose(address, families)
    except LocalError as error:
        raise click.ClickException(str(error)) from None


def serve(service: Service, metrics: Exposition | None = None) -> None:
    """Run ``service`` in a new event loop (the one ``WFM_LOOP`` chooses: :mod:`broker.loops`)
    until it returns; SIGINT and SIGTERM ask it to stop. ``metrics`` (``--metrics``, already
    listening) reads the service's state on that loop, and stops serving when the service has
    stopped."""
    try:
        factory = loops.loop_factory(loops.chosen())
    except LocalError as error:
        raise click.ClickException(str(error)) from None
    try:
        loops.run(_serve(service, metrics), factory)
    finally:
        if metrics is not None:
            metrics.close()


async def _serve(service: Service, metrics: Exposition | None) -> None:
    if metrics is not None:
        metrics.attach(asyncio.get_running_loop())
    on_signals(service.stop)
    await service.run()


@contextmanager
def stop_event() -> Iterator[threading.Event]:
    """For a command that blocks without an event loop: an event that SIGINT and SIGTERM set while
    the block runs (the previous handlers come back after it)."""
    stop = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda sig, _: _stopping(sig, stop.set))
        for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
