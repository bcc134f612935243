"""Serving ``/metrics``: prometheus_client's HTTP server in a thread, and a collector that reads
the process's state on its event loop."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import GCCollector, PlatformCollector, ProcessCollector, start_http_server
from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from broker.errors import LocalError
from wfm.metrics import Address

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

__all__ = ["SCRAPE_TIMEOUT", "Exposition", "Families", "LoopCollector", "expose", "registry"]

log = logging.getLogger(__name__)

SCRAPE_TIMEOUT = 5.0  # seconds a scrape waits for the event loop before it fails (HTTP 500)

Families = Callable[[], Iterable[Metric]]


class LoopCollector(Collector):
    """A collector whose metrics ``families`` reads from state owned by an event loop: called on
    that loop (between two of its steps) when the loop runs and the scrape comes from another
    thread, directly otherwise (before the loop starts, or from a test on the loop itself)."""

    def __init__(self, families: Families) -> None:
        self.families = families
        self.loop: asyncio.AbstractEventLoop | None = None  # attached by the running service

    def collect(self) -> Iterator[Metric]:
        loop = self.loop
        if loop is None or not loop.is_running() or _on(loop):
            return iter(list(self.families()))
        answer: concurrent.futures.Future[list[Metric]] = concurrent.futures.Future()

        def read() -> None:
            try:
                answer.set_result(list(self.families()))
            except BaseException as error:  # the scrape fails with it, the loop goes on
                answer.set_exception(error)

        loop.call_soon_threadsafe(read)
        try:
            return iter(answer.result(SCRAPE_TIMEOUT))
        except TimeoutError:  # a loop stuck or stopping: this scrape has the process's metrics only
            log.warning("metrics: the event loop did not answer within %g s", SCRAPE_TIMEOUT)
            return iter(())


def _on(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def registry(*collectors: Collector) -> CollectorRegistry:
    """A registry of the process's own (CPU, memory, open files, garbage collections, Python
    version: prometheus_client's usual ``process_*``, ``python_*``) and ``collectors``; one per
    process or test, not the library's global one."""
    made = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=made)
    PlatformCollector(registry=made)
    GCCollector(registry=made)
    for collector in collectors:
        made.register(collector)
    return made


class Exposition:
    """``/metrics`` served at an address from a thread, until :meth:`close`."""

    def __init__(self, address: Address, collector: LoopCollector) -> None:
        self.address = address
        self.collector = collector
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Listen; LocalError with a one-line reason if that fails (a port in use, say)."""
        try:
            self._server, self._thread = start_http_server(
                self.address.port, self.address.host, registry(self.collector)
            )
        except OSError as error:
            reason = os.strerror(error.errno).lower() if error.errno else str(error)
            raise LocalError(f"cannot serve metrics on {self.address}: {reason}") from None

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self.collector.loop = loop

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(2.0)
            self._thread = None


def expose(address: Address | None, families: Families) -> Exposition | None:
    """Serve ``families`` at ``address`` (started: listening), or nothing without one."""
    if address is None:
        return None
    exposition = Exposition(address, LoopCollector(families))
    exposition.start()
    return exposition
