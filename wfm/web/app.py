"""``wfm web``: the dashboard as a Starlette application. An ordinary overlay client (a monitor
subscription for the Runs page, status requests for the Overlay page) plus a reader of the history
store; every page is HTML drawn on the server (``pages.py``, SVG from ``svg.py``), refreshed by a
few lines of script when the server says, over server-sent events, that something changed.

Routes: ``/`` (= ``/runs``), ``/overlay``, ``/workflows``, ``/runs``, ``/history`` are pages; each
has ``/fragment/...`` (the part that is redrawn) and ``/api/...`` (the same data as JSON);
``/events`` is the event stream; ``POST /api/trigger`` starts a generation.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from broker.client import ConnectError
from broker.client.reconnect import BrokerList
from broker.errors import WfmError
from broker.transport.tls import Identity
from wfm.monitor import Monitor, MonitorService
from wfm.web import pages
from wfm.web.sources import HistoryReader, OverlayWatcher, Refused, trigger, workflows

__all__ = ["Dashboard", "create_app"]

log = logging.getLogger(__name__)

OVERLAY_EVERY = 2.0  # seconds between two walks of the overlay
RECONNECT_AFTER = 1.0  # seconds before the runs subscription is tried again
CLOSE = ""  # the event that ends a stream
KEEPALIVE = 15.0  # seconds between two comments on an idle event stream (proxies close silent ones)


@dataclass
class Dashboard:
    """What the pages show, kept up to date by the background tasks of :func:`create_app`."""

    brokers: BrokerList
    tls: Identity | None = None
    workflow_dir: Path | None = None
    store: Path | None = None
    monitor: Monitor = field(default_factory=Monitor)
    runs_error: str | None = "connecting ..."
    overlay: dict[str, Any] = field(default_factory=lambda: {"brokers": [], "links": []})
    listeners: set[asyncio.Queue[str]] = field(default_factory=set)
    history: HistoryReader | None = None

    def __post_init__(self) -> None:
        self.watcher = OverlayWatcher(self.brokers, self.tls)
        if self.history is None:
            self.history = HistoryReader(self.store)

    def changed(self, what: str) -> None:
        """Tell every open page that ``what`` (runs, overlay) changed."""
        for queue in self.listeners:
            queue.put_nowait(what)

    def close_streams(self) -> None:
        """End every event stream (the server is stopping: it waits for open responses to end)."""
        self.changed(CLOSE)

    def definitions(self) -> list[dict[str, Any]]:
        return workflows(self.workflow_dir)

    async def follow_runs(self) -> None:
        """The monitor's subscription, for ever: generations are kept across reconnections."""
        while True:
            try:
                async with MonitorService.connect(self.brokers, None, ()) as service:
                    service.monitor = self.monitor
                    self.runs_error = None
                    self.changed("runs")
                    await service.run(True, None, lambda _: self.changed("runs"))
            except (WfmError, ConnectError, ConnectionError, OSError) as error:
                self.runs_error = f"not subscribed: {error}"
                self.changed("runs")
            await asyncio.sleep(RECONNECT_AFTER)

    async def watch_overlay(self) -> None:
        while True:
            try:
                seen = await self.watcher.snapshot()
            except Exception:  # a bug here must not freeze the page silently
                log.exception("walking the overlay failed")
                seen = {"brokers": [], "links": [], "error": "walking the overlay failed (see the log)"}
            if seen != self.overlay:
                self.overlay = seen
                self.changed("overlay")
            await asyncio.sleep(OVERLAY_EVERY)


def create_app(dashboard: Dashboard, background: bool = True) -> Starlette:
    """The application; ``background=False`` starts no task (tests fill ``dashboard`` themselves)."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        tasks = [asyncio.create_task(t()) for t in (dashboard.follow_runs, dashboard.watch_overlay)]
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await dashboard.watcher.close()
            if dashboard.history is not None:
                dashboard.history.close()

    def page(name: str) -> Callable[[Request], Any]:
        async def show(request: Request) -> HTMLResponse:
            return HTMLResponse(pages.shell(name, dashboard.definitions()))

        return show

    def fragment(build: Callable[[Request], Any]) -> Callable[[Request], Any]:
        async def show(request: Request) -> HTMLResponse:
            try:
                return HTMLResponse(await build(request))
            except (Refused, ValueError) as error:
                return HTMLResponse(pages.problem(str(error)), status_code=400)

        return show

    async def overlay_fragment(request: Request) -> str:
        return pages.overlay(dashboard.overlay)

    async def broker_fragment(request: Request) -> str:
        return pages.broker_detail(await _detail(request))

    async def _detail(request: Request) -> dict[str, Any]:
        try:
            return await dashboard.watcher.detail(request.path_params["broker"])
        except (ConnectError, OSError, TimeoutError) as error:
            raise Refused(f"broker {request.path_params['broker']} did not answer: {error}") from None

    async def workflows_fragment(request: Request) -> str:
        return pages.workflows(dashboard.definitions())

    async def runs_fragment(request: Request) -> str:
        return pages.runs(dashboard.monitor, dashboard.definitions(), dashboard.runs_error)

    async def history_fragment(request: Request) -> str:
        query = pages.HistoryQuery.parse(request.query_params, date.today())
        assert dashboard.history is not None
        state, result = dashboard.history.report(query.compute, query)
        return pages.history(query, state, result)

    async def api_overlay(request: Request) -> JSONResponse:
        return JSONResponse(dashboard.overlay)

    async def api_broker(request: Request) -> JSONResponse:
        try:
            return JSONResponse(await _detail(request))
        except Refused as error:
            return JSONResponse({"error": str(error)}, status_code=404)

    async def api_workflows(request: Request) -> JSONResponse:
        return JSONResponse(dashboard.definitions())

    async def api_runs(request: Request) -> JSONResponse:
        return JSONResponse(
            {"error": dashboard.runs_error, "generations": pages.generations(dashboard.monitor)}
        )

    async def api_trigger(request: Request) -> JSONResponse:
        try:
            form = await request.json()
            workflow = form["workflow"] if isinstance(form, dict) else None
            if not isinstance(workflow, str):
                raise Refused('give {"workflow": NAME}')
        except (ValueError, KeyError, Refused) as error:
            return JSONResponse({"error": str(error) or 'give {"workflow": NAME}'}, status_code=400)
        try:
            gid = await asyncio.to_thread(trigger, dashboard.brokers, dashboard.tls, workflow)
        except Refused as error:
            return JSONResponse({"error": str(error)}, status_code=403)
        except (WfmError, ConnectError, OSError, TimeoutError) as error:
            return JSONResponse(
                {"error": f"cannot trigger {workflow}: {error or 'timed out'}"}, status_code=502
            )
        return JSONResponse({"workflow": workflow, "gid": gid})

    async def events(request: Request) -> Response:
        queue: asyncio.Queue[str] = asyncio.Queue()
        dashboard.listeners.add(queue)

        async def stream() -> AsyncIterator[str]:
            try:
                yield "retry: 2000\n\n"
                while True:
                    try:
                        what = await asyncio.wait_for(queue.get(), KEEPALIVE)
                    except TimeoutError:
                        yield ": keepalive\n\n"
                        continue
                    if what == CLOSE:
                        return
                    yield f"event: {what}\ndata: {json.dumps(what)}\n\n"
            finally:
                dashboard.listeners.discard(queue)

        return StreamingResponse(
            stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )

    async def home(request: Request) -> Response:
        return await page("runs")(request)  # type: ignore[no-any-return]

    routes = [
        Route("/", home),
        *(Route(f"/{name}", page(name)) for name in pages.PAGES),
        Route("/fragment/overlay", fragment(overlay_fragment)),
        Route("/fragment/broker/{broker}", fragment(broker_fragment)),
        Route("/fragment/workflows", fragment(workflows_fragment)),
        Route("/fragment/runs", fragment(runs_fragment)),
        Route("/fragment/history", fragment(history_fragment)),
        Route("/api/overlay", api_overlay),
        Route("/api/broker/{broker}", api_broker),
        Route("/api/workflows", api_workflows),
        Route("/api/runs", api_runs),
        Route("/api/trigger", api_trigger, methods=["POST"]),
        Route("/events", events),
        Mount("/static", StaticFiles(directory=Path(__file__).parent / "static"), name="static"),
    ]
    return Starlette(routes=routes, lifespan=lifespan if background else None)
