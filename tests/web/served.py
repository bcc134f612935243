"""A dashboard filled by hand and served by uvicorn in a thread, for the browser: no broker, no
Spark (the History page's report is given). Used by the browser tests and by the screenshots of
docs/web.md (``python -m tests.web.served DIR``: the Runs grid, a run, the History page)."""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, timedelta
from pathlib import Path
from typing import Any

from broker.client.reconnect import brokers
from wfm.history.report import JobPeriod, JobSummary
from wfm.operations import Deployed
from wfm.web import Dashboard, create_app
from wfm.web.guard import Guard
from wfm.web.sources import HistoryReader

TOKEN = "s" * 43
JOBS = {"JobA": "agentA", "JobB": "agentB", "JobC": "agentB", "JobD": "agentC", "Alert": "agentC"}
GRAPH = {
    "JobA": [],
    "JobB": [["JobA", "success"]],
    "JobC": [["JobA", "success"]],
    "JobD": [["JobB", "success"], ["JobC", "success"]],
    "Alert": [["JobA", "failure"]],
}
TODAY = date(2026, 11, 28)


def payroll() -> Deployed:
    """PAYROLL as its agents describe it (``Session.workflows``)."""
    jobs = {
        job: {"agent": agent, "schedule": ["mon", "tue", "wed", "thu", "fri"]} for job, agent in JOBS.items()
    }
    held: dict[str, list[str]] = {}
    for job, agent in JOBS.items():
        held.setdefault(agent, []).append(job)
    return Deployed("PAYROLL", "v1", {"v1"}, held, jobs, GRAPH, "agentA")


def status(gid: str, job: str, state: str, **extra: object) -> dict[str, object]:
    return {"class": "JOBSTATUS", "applname": "PAYROLL", "GID": gid, "jobname": job, "status": state, **extra}


def filled(generations: int = 60) -> Dashboard:
    """PAYROLL deployed; ``generations`` of it, one every 6 hours up to now (every seventh's JobB
    failed, so JobD did not run), the newest still running JobB."""
    board = Dashboard(brokers("socket://127.0.0.1:1/B1"), None, None, store=Path("/nonexistent"))
    board.deployed = [payroll()]  # as the agents answered
    board.runs_error = board.agents_error = None
    start = time.time() - 6 * 3600 * (generations - 1) - 40  # the newest started 40 s ago
    for number in range(generations):
        gid, at = f"20261101-{number:06d}", start + number * 6 * 3600
        day = time.strftime("%Y.%m.%d", time.localtime(at))
        board.monitor.receive({"class": "Trigger", "applname": "PAYROLL", "GID": gid, "schedule": day})
        board.monitor.receive(status(gid, "APPL_START", "SUCCESS", started=at))
        failed = number % 7 == 3
        took = 2.0 + (number % 5)
        board.monitor.receive(status(gid, "JobA", "SUCCESS", started=at, duration=took, attempt=1))
        if number == generations - 1:
            board.monitor.receive(status(gid, "JobB", "RUNNING"))
            board.attempts["PAYROLL", gid, "JobB"] = 1
            continue
        board.monitor.receive(
            status(
                gid, "JobB", "FAILURE" if failed else "SUCCESS", started=at + took, duration=3.0, attempt=1
            )
        )
        board.monitor.receive(status(gid, "JobC", "NORUN", started=at + took))  # not on this day
        board.monitor.receive(
            status(gid, "JobD", "NORUN" if failed else "SUCCESS", started=at + took + 3, duration=1.0)
        )
        board.monitor.receive(status(gid, "Alert", "NORUN", started=at + took, skipped=1))
        board.monitor.receive(
            status(gid, "APPL_END", "FAILURE" if failed else "SUCCESS", started=at + took + 4)
        )
    return board


def report(days: int = 14) -> tuple[list[JobPeriod], list[JobSummary]]:
    """What the History page shows for ``days`` days up to TODAY (the report as Spark gives it)."""
    rows = []
    for n in range(days):
        day = TODAY - timedelta(days=days - 1 - n)
        for job, base in (("JobA", 2.0), ("JobB", 3.0), ("JobD", 1.0)):
            failures = 1 if job == "JobB" and n % 4 == 1 else 0
            rows.append(JobPeriod("PAYROLL", job, day, 4, failures, 0, base + n % 3, base + 2 + n % 4, ()))
    summary = [
        JobSummary("PAYROLL", "JobA", 4 * days, 0, 0, 3.0, 3.0, 4.0),
        JobSummary("PAYROLL", "JobB", 4 * days, days // 4, 0, 4.0, 4.0, 6.0),
        JobSummary("PAYROLL", "JobD", 4 * days, 0, 0, 2.0, 2.0, 4.0),
    ]
    return rows, summary


class Reported(HistoryReader):
    """The History page's reader, answering ``report()`` (every range) at once."""

    def __init__(self, found: Any) -> None:
        super().__init__(None)
        self.found = found

    def report(self, compute: Any, *key: Any) -> tuple[str, Any]:
        return "ready", self.found


@contextmanager
def serving(board: Dashboard) -> Iterator[str]:
    """``board`` served on a free loopback port; the URL that sets the token's cookie."""
    import uvicorn

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    app = create_app(board, Guard.listening("127.0.0.1", port, TOKEN), background=False)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}/runs?token={TOKEN}"
    finally:
        board.close_streams()
        server.should_exit = True
        thread.join(10)


def screenshots(directory: Path, chromium: str = "/usr/bin/chromium") -> list[Path]:
    """The Runs grid (a run opened) and the History page, as PNG files in ``directory``."""
    from playwright.sync_api import sync_playwright

    board = filled()
    board.history = Reported(report())
    saved = []
    with serving(board) as url, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(url)
        page.wait_for_selector("tr.run")
        page.click("tr.run >> nth=0")
        page.wait_for_selector("#run section.generation")
        page.mouse.move(1200, 10)  # no row under the pointer (hovered)
        saved.append(directory / "web-runs.png")
        page.screenshot(path=str(saved[-1]), full_page=True)
        page.goto(url.replace("/runs?", "/history?"))
        page.wait_for_selector("table.history-summary")
        saved.append(directory / "web-history.png")
        page.screenshot(path=str(saved[-1]), full_page=True)
        browser.close()
    return saved


if __name__ == "__main__":
    for path in screenshots(Path(sys.argv[1] if len(sys.argv) > 1 else "docs")):
        print(path)
