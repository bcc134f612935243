"""The dashboard's Runs page with 10,000 generations kept: its weight and how soon it is drawn,
the grid (one row per generation, one page of 50) against the page it replaced (the newest 20
generations, each drawn in full: DAG and timeline), measured in one run.

The dashboard is filled as ``wfm web`` fills it (its monitor fed Triggers and statuses; the
agents' answer about PAYROLL given by a stand-in), with no broker: what is measured is the page,
not the overlay. The baseline is the old page's content, rebuilt from the same section the grid
opens for one generation (``pages.run``, which is the old page's section unchanged) for each of
the newest 20 generations.

Three figures each: the fragment's bytes; the server's time to build it (the median of ROUNDS,
through Starlette's TestClient: guard, headers and all); and, in headless Chromium (Debian's, by
Playwright, if installed), the time from navigation start until the Runs page has its content
in the document and the browser has painted it (two animation frames later), median of
BROWSER_ROUNDS page loads from a local uvicorn.

Prints one result line: those figures for the grid and the baseline, their ratios, the number of
generations and the core count.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from starlette.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from broker.client.reconnect import brokers
from tests.web.served import JOBS as PAYROLL_AGENTS
from tests.web.served import payroll, serving
from wfm.monitor import Monitor
from wfm.operations import Deployed
from wfm.web import Dashboard, create_app, pages
from wfm.web.guard import Guard

GENERATIONS = 10_000
ROUNDS = 30
BROWSER_ROUNDS = 7
TOKEN = "b" * 43
JOBS = list(PAYROLL_AGENTS)


class Agents:
    """PAYROLL deployed on three agents, as ``Session.workflows`` answers."""

    async def workflows(self) -> tuple[list[Deployed], list[str]]:
        deployed = payroll()
        return [deployed], sorted(deployed.agents)

    async def runs(self, workflow: str, limit: int, gid: str = "", into: Monitor | None = None) -> Monitor:
        return into or Monitor()


def filled() -> Dashboard:
    board = Dashboard(brokers("socket://127.0.0.1:1/B1"), None, None)
    asyncio.run(board.ask_agents(Agents(), set()))
    board.runs_error = None
    start = 1_790_000_000.0
    for number in range(GENERATIONS):
        gid = f"2026{number:08d}"
        at = start + number * 600.0
        day = time.strftime("%Y.%m.%d", time.gmtime(at))
        board.monitor.receive({"class": "Trigger", "applname": "PAYROLL", "GID": gid, "schedule": day})
        for offset, job in enumerate(JOBS):
            state = "FAILURE" if job == "JobD" and number % 7 == 0 else "SUCCESS"
            board.monitor.receive(
                {
                    "class": "JOBSTATUS",
                    "applname": "PAYROLL",
                    "GID": gid,
                    "jobname": job,
                    "status": state if job != "Alert" else "NORUN",
                    "started": at + offset * 2.0,
                    "duration": 1.5,
                    "attempt": 1,
                }
            )
        end = "FAILURE" if number % 7 == 0 else "SUCCESS"
        board.monitor.receive(
            {"class": "JOBSTATUS", "applname": "PAYROLL", "GID": gid, "jobname": "APPL_END", "status": end}
        )
    return board


def old_page(
    monitor: Monitor, definitions: Any, error: str | None, live: Any = None, query: Any = None
) -> str:
    """The Runs page before the grid: the newest 20 generations, each in full."""
    found = pages.shown(monitor, live)
    return "<p>Click a job on a DAG or a timeline for its log.</p>" + "".join(
        pages.run(monitor, definitions, g.workflow, g.gid, live) for g in found
    )


@contextlib.contextmanager
def runs_page(build: Callable[..., str]) -> Iterator[None]:
    grid = pages.runs
    pages.runs = build  # type: ignore[assignment]
    try:
        yield
    finally:
        pages.runs = grid  # type: ignore[assignment]


def served(web: TestClient) -> tuple[int, float]:
    """The fragment's bytes and the median time to serve it (ms)."""
    times = []
    for _ in range(ROUNDS):
        began = time.perf_counter()
        answer = web.get("/fragment/runs")
        times.append((time.perf_counter() - began) * 1000)
        assert answer.status_code == 200
    return len(answer.content), statistics.median(times)


def painted(board: Dashboard) -> dict[str, float] | str:
    """Navigation start to the Runs page painted with its content, in Chromium (ms, median), for
    the grid and the old page; or why it was not measured."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return "no chromium on PATH"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as error:
        return f"not installed: {error.name}"
    found: dict[str, float] = {}
    with serving(board) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(url)  # the cookie
        for name, build, selector in (
            ("grid", pages.runs, "tr.run"),
            ("old", old_page, "section.generation"),
        ):
            with runs_page(build):
                times = []
                for _ in range(BROWSER_ROUNDS):
                    page.goto(url.split("?")[0], wait_until="commit")
                    page.wait_for_selector(selector, state="attached")
                    times.append(
                        page.evaluate(
                            "new Promise((done) => requestAnimationFrame(() =>"
                            " requestAnimationFrame(() => done(performance.now()))))"
                        )
                    )
                found[name] = statistics.median(times)
        browser.close()
    return found


def main() -> None:
    began = time.perf_counter()
    board = filled()
    fill = time.perf_counter() - began
    web = TestClient(
        create_app(board, Guard.listening("testserver", 80, TOKEN), background=False),
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    shell = len(web.get("/runs").content)
    grid_bytes, grid_ms = served(web)
    with runs_page(old_page):
        old_bytes, old_ms = served(web)
    with tempfile.TemporaryDirectory():
        paint = painted(board)
    result: dict[str, Any] = {
        "benchmark": "web-runs-page",
        "generations": len(board.monitor.generations),
        "jobs": len(JOBS),
        "shell_bytes": shell,
        "grid_bytes": grid_bytes,
        "grid_server_ms": round(grid_ms, 1),
        "old_bytes": old_bytes,
        "old_server_ms": round(old_ms, 1),
        "bytes_ratio": round(old_bytes / grid_bytes, 2),
        "server_ratio": round(old_ms / grid_ms, 2),
        "fill_s": round(fill, 1),
        "cores": os.cpu_count(),
    }
    if isinstance(paint, dict):
        result |= {
            "grid_paint_ms": round(paint["grid"], 1),
            "old_paint_ms": round(paint["old"], 1),
            "paint_ratio": round(paint["old"] / paint["grid"], 2),
        }
    else:
        result["paint"] = f"not measured: {paint}"
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
