"""``wfm web``: the dashboard as a Starlette application. An ordinary overlay client (a monitor
subscription for the Runs page, status requests for the Overlay page, a ``wfm.operations.Session``
asking the agents what is deployed, what they remember and what a job printed, and cancelling or
rerunning generations) plus a reader of the history store; every page is HTML drawn on the
server (``pages.py``, SVG from ``svg.py``), refreshed by a few lines of script when the server
says, over server-sent events, that something changed.

Routes: ``/`` (= ``/runs``), ``/overlay``, ``/workflows``, ``/runs``, ``/history`` are pages; each
has ``/fragment/...`` (the part that is redrawn) and ``/api/...`` (the same data as JSON);
``/events`` is the event stream; ``POST /api/trigger``, ``/api/cancel``, ``/api/rerun``,
``/api/hold``, ``/api/release`` and ``/api/approve`` act (as a deployer or an operator only),
``/fragment/logs`` and ``/api/logs`` show a job's log. Every request passes
the guard first (``guard.py``: the token, JSON for actions, this server's Host and Origin); every
response, refusals and errors included, carries the headers of ``headers.py`` (a strict
Content-Security-Policy, nosniff, no Referer, no framing).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from broker.client import ConnectError
from broker.client.reconnect import BrokerList
from broker.errors import RemoteError, WfmError
from broker.transport.tls import Identity
from wfm.monitor import Generation, Monitor, MonitorService
from wfm.operations import Deployed, NoReply, Session, UnknownWorkflow
from wfm.signing import Deployer
from wfm.triggers import check_gid, check_workflow
from wfm.web import holding, pages
from wfm.web.alerts import AlertBoard
from wfm.web.guard import Guard, Guarded
from wfm.web.headers import SecurityHeaders
from wfm.web.pages import RUNNING
from wfm.web.sources import (
    Declined,
    HistoryReader,
    OverlayWatcher,
    deployer,
    described,
    require_operator,
    trigger,
    workflows,
)
from workflow_messages import check_name

__all__ = ["Dashboard", "create_app"]

log = logging.getLogger(__name__)

OVERLAY_EVERY = 2.0  # seconds between two walks of the overlay
RECONNECT_AFTER = 1.0  # seconds before the runs subscription is tried again
KEEPALIVE = 15.0  # seconds between two comments on an idle event stream (proxies close silent ones)
AGENTS_EVERY = 10.0  # seconds between two questions to the agents about what is deployed
AGENTS_TIMEOUT = 5.0  # seconds for the agents to answer (a page's log, a cancel, a rerun)
RUNNING_EVERY = 2.0  # seconds between two questions about the jobs of generations not ended
STRANGER_FOR = 30.0  # seconds a generation of a workflow nobody has deployed may yet be starting
RUNS_REMEMBERED = 200  # generations asked of each agent, per workflow, when the dashboard starts
ATTEMPTS_ASKED = 4  # running jobs whose attempt is asked (their log) at most, per question
NOTICE_GAP = 0.25  # seconds at least between two notices on one event stream (each redraws a page)

Connect = Callable[[BrokerList, float], AbstractAsyncContextManager[Any]]


class Unavailable(WfmError):
    """The dashboard is not (yet) connected to the agents."""


class Notices:
    """What one event stream has yet to say: the pages whose data changed since it last spoke. A
    set, not a queue: however long its reader stalls, it holds at most one name per page, and a
    page told once redraws with the newest data anyway."""

    def __init__(self) -> None:
        self.pending: set[str] = set()
        self.ready = asyncio.Event()
        self.closed = False

    def add(self, what: str) -> None:
        self.pending.add(what)
        self.ready.set()

    def close(self) -> None:
        self.closed = True
        self.ready.set()

    def take(self) -> list[str]:
        taken, self.pending = sorted(self.pending), set()
        self.ready.clear()
        return taken


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
    listeners: set[Notices] = field(default_factory=set)
    history: HistoryReader | None = None
    connect: Connect = Session.connect  # how to open a session with the agents (tests: a stand-in)
    session: Any = None  # the open Session, when connected
    deployed: list[Deployed] | None = None  # what the agents said last (None: not answered yet)
    agents_error: str | None = "asking the agents ..."
    # (workflow, gid, job) -> the attempt a RUNNING job is at and when it started (its agent's
    # log and runs record say)
    attempts: dict[tuple[str, str, str], tuple[int, float | None]] = field(default_factory=dict)
    first_seen: dict[tuple[str, str], float] = field(default_factory=dict)  # (workflow, gid) -> when
    alert_board: AlertBoard = field(default_factory=AlertBoard)  # the alerts no one acknowledged
    _signer: Deployer | None = None

    def __post_init__(self) -> None:
        self.watcher = OverlayWatcher(self.brokers, self.tls)
        if self.history is None:
            self.history = HistoryReader(self.store)

    def changed(self, what: str) -> None:
        """Tell every open page that ``what`` (runs, overlay) changed."""
        for notices in self.listeners:
            notices.add(what)

    def close_streams(self) -> None:
        """End every event stream (the server is stopping: it waits for open responses to end)."""
        for notices in self.listeners:
            notices.close()

    def definitions(self) -> list[dict[str, Any]]:
        return described(self.deployed or [], workflows(self.workflow_dir))

    def agents(self) -> Any:
        """The session with the agents; Unavailable (with why) while there is none."""
        if self.session is None:
            raise Unavailable(f"not connected to the agents: {self.agents_error or 'connecting ...'}")
        return self.session

    def sign(self, envelope: Any) -> Any:
        """Signed as the dashboard's deployer, one :class:`Deployer` kept (its sequence only rises)."""
        if self._signer is None:
            self._signer = deployer(self.tls)
        return self._signer.sign(envelope)

    async def follow_agents(self) -> None:
        """A session with the agents, for ever: what is deployed, asked every AGENTS_EVERY seconds."""
        while True:
            try:
                async with self.connect(self.brokers, AGENTS_TIMEOUT) as session:
                    self.session = session
                    remembered: set[str] = set()
                    loop = asyncio.get_running_loop()
                    asked = loop.time() - AGENTS_EVERY
                    while True:
                        since = loop.time() - asked
                        if since >= AGENTS_EVERY or (since >= RUNNING_EVERY and self.strangers()):
                            asked = loop.time()
                            await self.ask_agents(session, remembered)
                        await self.ask_running(session)
                        await asyncio.sleep(RUNNING_EVERY)
            except (WfmError, ConnectError, ConnectionError, OSError) as error:
                self.agents_error = f"cannot ask the agents: {error}"
                self.changed("workflows")
            except Exception:  # an answer this code did not expect must not stop the asking
                log.exception("asking the agents failed")
                self.agents_error = "asking the agents failed (see the log)"
                self.changed("workflows")
            finally:
                self.session = None
            await asyncio.sleep(RECONNECT_AFTER)

    async def ask_agents(self, session: Any, remembered: set[str]) -> None:
        """What is deployed; and, once per workflow not in ``remembered``, the generations its
        agents remember, fed into the Runs page's monitor beside those followed live."""
        try:
            found, _ = await session.workflows()
        except (NoReply, RemoteError) as error:
            self.agents_error = str(error)
            self.changed("workflows")
            return
        self.agents_error = None
        if found != self.deployed:
            self.deployed = found
            self.changed("workflows")
        for workflow in found:
            if workflow.workflow in remembered:
                continue
            try:
                await session.runs(workflow.workflow, RUNS_REMEMBERED, into=self.monitor)
            except (NoReply, UnknownWorkflow, RemoteError) as error:
                log.info("the runs of %s: %s (asked again later)", workflow.workflow, error)
                continue
            remembered.add(workflow.workflow)
            self.changed("runs")

    def strangers(self) -> bool:
        """Whether a generation not ended, first seen less than STRANGER_FOR ago, is of a workflow
        the agents did not say is deployed: deployed since they were asked (ask again now), or
        triggered though nobody has it (asked again until it is shown as not started)."""
        deployed = {w.workflow for w in self.deployed or []}
        live = self.live()
        return any(
            not g.ended
            and g.workflow not in deployed
            and live.now - live.seen[g.workflow, g.gid] < STRANGER_FOR
            for g in pages.shown(self.monitor, live)
        )

    def live(self) -> pages.Live:
        """What the Runs page shows beyond the statuses (noting when each generation was first seen)."""
        now = time.time()
        for key in self.monitor.generations.keys() - self.first_seen.keys():
            self.first_seen[key] = now
        return pages.Live(now, self.attempts, self.first_seen)

    def unended(self) -> dict[str, list[Generation]]:
        """The generations shown on the Runs page that have not ended, by deployed workflow (a
        generation of a workflow no agent has is nobody's to ask about)."""
        deployed = {w.workflow for w in self.deployed or []}
        found: dict[str, list[Generation]] = {}
        for generation in pages.shown(self.monitor, self.live()):
            if not generation.ended and generation.workflow in deployed:
                found.setdefault(generation.workflow, []).append(generation)
        return found

    async def ask_running(self, session: Any) -> None:
        """What the jobs of the generations not ended are doing (queued, running, waiting for a
        retry): the agents publish a status only at a job's end, and a state (JOBSTATE, followed
        live) only for a job held, waiting or awaiting approval, so they are asked, as ``wfm runs``
        asks them; and the attempt of each job newly seen running (from its log's attempts)."""
        for workflow, generations in self.unended().items():
            before = _states(generations)
            try:
                await session.runs(workflow, pages.RUNS_SHOWN, into=self.monitor)
            except (NoReply, UnknownWorkflow, RemoteError) as error:
                log.info("the running jobs of %s: %s (asked again later)", workflow, error)
                continue
            after = _states(generations)
            for key, (status, _) in after.items():
                if status != RUNNING:
                    self.attempts.pop((workflow, *key), None)
            unknown = [
                key for key, (s, _) in after.items() if s == RUNNING and (workflow, *key) not in self.attempts
            ]
            for gid, job in unknown[:ATTEMPTS_ASKED]:
                try:
                    found = await session.logs(workflow, job, gid, 0)
                except (NoReply, UnknownWorkflow, RemoteError) as error:  # no log yet, say
                    log.debug("the attempt of %s %s %s: %s", workflow, gid, job, error)
                    continue
                started = found.get("started")
                self.attempts[workflow, gid, job] = (
                    int(found["attempt"]),
                    float(started) if isinstance(started, int | float) else None,
                )
                after[gid, job] = (RUNNING, -1)  # a change: the page shows the attempt
            if after != before:
                self.changed("runs")

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

    async def follow_alerts(self) -> None:
        await self.alert_board.follow(self.brokers, lambda: self.changed("alerts"))

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


def _states(generations: list[Generation]) -> dict[tuple[str, str], tuple[str, int]]:
    return {(g.gid, job): (s.status, s.attempt) for g in generations for job, s in g.jobs.items()}


class _Secured(Starlette):
    """Starlette with :class:`SecurityHeaders` around its whole stack: outside its error handler
    too (which user middleware is not), so that a 500 carries the headers like any answer."""

    def build_middleware_stack(self) -> ASGIApp:
        return SecurityHeaders(super().build_middleware_stack())


def create_app(dashboard: Dashboard, guard: Guard, background: bool = True) -> Starlette:
    """The application behind ``guard``; ``background=False`` starts no task (tests fill
    ``dashboard`` themselves)."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        tasks = [
            asyncio.create_task(t())
            for t in (
                dashboard.follow_runs,
                dashboard.watch_overlay,
                dashboard.follow_agents,
                dashboard.follow_alerts,
            )
        ]
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
            except (Declined, ValueError) as error:
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
            raise Declined(f"broker {request.path_params['broker']} did not answer: {error}") from None

    async def workflows_fragment(request: Request) -> str:
        return pages.workflows(dashboard.definitions(), dashboard.agents_error)

    async def runs_fragment(request: Request) -> str:
        query = pages.RunsQuery.parse(request.query_params)
        return pages.runs(
            dashboard.monitor, dashboard.definitions(), dashboard.runs_error, dashboard.live(), query
        )

    async def run_fragment(request: Request) -> str:
        params = request.query_params
        workflow, gid = check_workflow(params.get("workflow", "")), check_gid(params.get("gid", ""))
        return pages.run(dashboard.monitor, dashboard.definitions(), workflow, gid, dashboard.live())

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
        except Declined as error:
            return JSONResponse({"error": str(error)}, status_code=404)

    async def api_workflows(request: Request) -> JSONResponse:
        return JSONResponse(dashboard.definitions())

    async def api_runs(request: Request) -> JSONResponse:
        try:
            query = pages.RunsQuery.parse(request.query_params)
        except ValueError as error:
            return JSONResponse({"error": str(error)}, status_code=400)
        found = pages.generations(dashboard.monitor, dashboard.live(), query)
        return JSONResponse({"error": dashboard.runs_error, **found})

    async def alerts_fragment(request: Request) -> str:
        board = dashboard.alert_board
        return pages.alerts(board.records(), board.error)

    async def api_alerts(request: Request) -> JSONResponse:
        return JSONResponse({"alerts": dashboard.alert_board.records(), "error": dashboard.alert_board.error})

    async def api_ack(request: Request) -> JSONResponse:
        async def act(form: dict[str, str]) -> dict[str, Any]:
            require_operator(dashboard.tls, "acknowledging an alert")
            acknowledged = await dashboard.alert_board.acknowledge(form["id"])
            dashboard.changed("alerts")
            return acknowledged

        return await acted(request, ("id",), act, "cannot acknowledge {id}")

    async def api_trigger(request: Request) -> JSONResponse:
        async def act(form: dict[str, str]) -> dict[str, Any]:
            require_operator(dashboard.tls, "triggering")
            # asked first, as wfm trigger does: a Trigger of a workflow nobody has starts nothing
            await dashboard.agents().deployed(check_workflow(form["workflow"]))
            gid = await asyncio.to_thread(trigger, dashboard.brokers, dashboard.tls, form["workflow"])
            return {"workflow": form["workflow"], "gid": gid}

        return await acted(request, ("workflow",), act, "cannot trigger {workflow}")

    async def api_cancel(request: Request) -> JSONResponse:
        async def act(form: dict[str, str]) -> dict[str, Any]:
            require_operator(dashboard.tls, "cancelling")
            workflow, gid = check_workflow(form["workflow"]), check_gid(form["gid"])
            acks = await dashboard.agents().cancel(workflow, gid, dashboard.sign)
            agents, refused = holding.acks_record(acks)
            if refused:
                raise RemoteError(f"cancel of {gid} refused by {'; '.join(refused)}")
            return {"workflow": workflow, "gid": gid, "agents": agents}

        return await acted(request, ("workflow", "gid"), act, "cannot cancel {gid}")

    def holder(release: bool) -> Callable[[Request], Awaitable[JSONResponse]]:
        verb = "release" if release else "hold"

        async def api_hold(request: Request) -> JSONResponse:
            async def act(form: dict[str, str]) -> dict[str, Any]:
                require_operator(dashboard.tls, "releasing" if release else "holding")
                workflow, job, gid = check_workflow(form["workflow"]), form.get("job"), form.get("gid")
                job = None if not job or job == "*" else check_name(job, "job name")
                gid = check_gid(gid) if gid else None
                acks = await dashboard.agents().hold(workflow, dashboard.sign, job, gid, release)
                agents, refused = holding.acks_record(acks)
                if refused:
                    raise RemoteError(f"{verb} refused by {'; '.join(refused)}")
                return {"workflow": workflow, "job": job, "gid": gid, "agents": agents}

            return await acted(request, ("workflow",), act, f"cannot {verb} {{workflow}}", ("job", "gid"))

        return api_hold

    async def api_approve(request: Request) -> JSONResponse:
        async def act(form: dict[str, str]) -> dict[str, Any]:
            require_operator(dashboard.tls, "approving")
            workflow, gid = check_workflow(form["workflow"]), check_gid(form["gid"])
            job, approved, comment = holding.verdict(form)
            agent, result, detail = await dashboard.agents().approve(
                workflow, job, gid, dashboard.sign, approved, comment
            )
            if result not in ("OK", "UNCHANGED"):
                raise RemoteError(f"{agent}: {result} {detail}")
            return {
                "workflow": workflow,
                "job": job,
                "gid": gid,
                "agent": agent,
                "result": result,
                "detail": detail,
            }

        required = ("workflow", "job", "gid", "verdict")
        return await acted(request, required, act, "cannot decide {job} of {gid}", ("comment",))

    async def api_rerun(request: Request) -> JSONResponse:
        async def act(form: dict[str, str]) -> dict[str, Any]:
            require_operator(dashboard.tls, "rerunning")
            workflow, gid, start = check_workflow(form["workflow"]), check_gid(form["gid"]), form.get("from")
            new = await dashboard.agents().rerun(workflow, gid, start or None, dashboard.sign)
            return {"workflow": workflow, "gid": new, "rerun_of": gid, "from": start or None}

        return await acted(request, ("workflow", "gid"), act, "cannot rerun {gid}", ("from",))

    async def acted(
        request: Request,
        required: tuple[str, ...],
        act: Callable[[dict[str, str]], Awaitable[dict[str, Any]]],
        failing: str,
        optional: tuple[str, ...] = (),
    ) -> JSONResponse:
        """``act`` on the request's JSON object of strings, its answer or ``{"error": ...}``."""
        usage = "give {" + ", ".join(f'"{name}": {PLACEHOLDERS[name]}' for name in required) + "}"
        try:
            form = await request.json()
        except ValueError:
            form = None
        if (
            not isinstance(form, dict)
            or not all(isinstance(form.get(name), str) for name in required)
            or not all(isinstance(form.get(name), str | None) for name in optional)
        ):
            return JSONResponse({"error": usage}, status_code=400)
        try:
            return JSONResponse(await act(form))
        except (WfmError, ValueError, OSError, TimeoutError) as error:
            status, message = failure(error)
            if status == 502:
                message = f"{failing.format(**form)}: {message}"
            return JSONResponse({"error": message}, status_code=status)

    async def job_log(request: Request) -> dict[str, Any]:
        params = request.query_params
        workflow, gid = check_workflow(params.get("workflow", "")), check_gid(params.get("gid", ""))
        job = params.get("job", "")
        attempt = params.get("attempt", "0")
        if not job or not attempt.isdigit():
            raise ValueError("give workflow, gid, job and, if you like, attempt (a number)")
        found: dict[str, Any] = await dashboard.agents().logs(workflow, job, gid, int(attempt))
        return {"workflow": workflow, "gid": gid, "job": job, **found}

    async def logs_fragment(request: Request) -> HTMLResponse:
        try:
            return HTMLResponse(pages.job_log(await job_log(request)))
        except (WfmError, ValueError, OSError, TimeoutError) as error:
            status, message = failure(error)
            return HTMLResponse(pages.problem(message), status_code=status)

    async def api_logs(request: Request) -> JSONResponse:
        try:
            return JSONResponse(await job_log(request))
        except (WfmError, ValueError, OSError, TimeoutError) as error:
            status, message = failure(error)
            return JSONResponse({"error": message}, status_code=status)

    async def events(request: Request) -> Response:
        notices = Notices()
        dashboard.listeners.add(notices)

        async def stream() -> AsyncIterator[str]:
            """What changed, at most once per NOTICE_GAP: changes meanwhile join the next notice."""
            loop = asyncio.get_running_loop()
            try:
                yield "retry: 2000\n\n"
                spoke = loop.time() - NOTICE_GAP
                while True:
                    await asyncio.sleep(max(0.0, spoke + NOTICE_GAP - loop.time()))
                    try:
                        async with asyncio.timeout(KEEPALIVE):
                            await notices.ready.wait()
                    except TimeoutError:
                        yield ": keepalive\n\n"
                        continue
                    if notices.closed:
                        return
                    spoke = loop.time()
                    yield "".join(f"event: {what}\ndata: {json.dumps(what)}\n\n" for what in notices.take())
            finally:
                dashboard.listeners.discard(notices)

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
        Route("/fragment/run", fragment(run_fragment)),
        Route("/fragment/history", fragment(history_fragment)),
        Route("/fragment/alerts", fragment(alerts_fragment)),
        Route("/api/alerts", api_alerts),
        Route("/api/alerts/ack", api_ack, methods=["POST"]),
        Route("/api/overlay", api_overlay),
        Route("/api/broker/{broker}", api_broker),
        Route("/api/workflows", api_workflows),
        Route("/api/runs", api_runs),
        Route("/api/trigger", api_trigger, methods=["POST"]),
        Route("/api/cancel", api_cancel, methods=["POST"]),
        Route("/api/rerun", api_rerun, methods=["POST"]),
        Route("/api/hold", holder(release=False), methods=["POST"]),
        Route("/api/release", holder(release=True), methods=["POST"]),
        Route("/api/approve", api_approve, methods=["POST"]),
        Route("/api/logs", api_logs),
        Route("/fragment/logs", logs_fragment),
        Route("/events", events),
        Mount("/static", StaticFiles(directory=Path(__file__).parent / "static"), name="static"),
    ]
    return _Secured(
        routes=routes,
        middleware=[Middleware(Guarded, guard=guard)],
        lifespan=lifespan if background else None,
    )


PLACEHOLDERS = {"workflow": "NAME", "gid": "GID", "id": "ALERT", "job": "JOB", "verdict": "approve|reject"}


def failure(error: Exception) -> tuple[int, str]:
    """The HTTP status of what went wrong, and its one line."""
    for kind, status in FAILURES:
        if isinstance(error, kind):
            return status, str(error) or type(error).__name__
    return 502, str(error) or "timed out"


FAILURES: tuple[tuple[type[Exception], int], ...] = (
    (Declined, 403),
    (Unavailable, 503),
    (NoReply, 504),
    (UnknownWorkflow, 404),
    (ValueError, 400),
)
