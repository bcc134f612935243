"""The headers every answer of the dashboard carries (``wfm.web.headers``), for every kind of
answer: pages, fragments, JSON, actions, static files, the event stream, the guard's refusals and
redirect, 404, 405 and Starlette's own 500; and that what it serves needs no inline script or style,
which the policy forbids."""

from __future__ import annotations

import asyncio
import re
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

import wfm.web.app as app_module
from tests.web.test_app import TOKEN, Agents, client, dashboard, status
from tests.web.test_guard import _client, _scope
from wfm.history.report import JobPeriod, JobSummary
from wfm.web import create_app, pages
from wfm.web.guard import Guard
from wfm.web.headers import HEADERS, POLICY
from wfm.web.sources import overlay_view

EXPECTED = {
    "content-security-policy": POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
}


def secured(headers: Any) -> dict[str, str]:
    """The four headers as a response has them, each once."""
    for name in EXPECTED:
        assert len(headers.get_list(name)) == 1, (name, headers)
    return {name: headers[name] for name in EXPECTED}


def test_the_policy_allows_the_dashboards_own_files_only() -> None:
    directives = dict(d.split(" ", 1) for d in POLICY.split("; "))
    assert directives == {
        "default-src": "'self'",
        "object-src": "'none'",
        "base-uri": "'none'",
        "frame-ancestors": "'none'",
        "form-action": "'self'",
    }
    assert "unsafe" not in POLICY and len(HEADERS) == len(EXPECTED)


@pytest.fixture
def board(tmp_path: Path) -> Any:
    """A dashboard with something on every page: a generation, the agents' answer, two brokers."""
    board = dashboard(tmp_path)
    board.runs_error = None
    board.monitor.receive({"class": "Trigger", "applname": "PAYROLL", "GID": "g1", "schedule": "2026.11.23"})
    board.monitor.receive(status("JobA", "SUCCESS", started=100.0, duration=1.5))
    asyncio.run(board.ask_agents(Agents(), set()))
    board.session = Agents()
    board.overlay = overlay_view({"B1": {"id": "B1", "neighbors": ["B2"], "counters": {}}}, {})
    return board


LOG = {"workflow": "PAYROLL", "gid": "g1", "job": "JobA"}
READS = [
    ("/", 200),
    *((f"/{page}", 200) for page in pages.PAGES),
    *((f"/fragment/{page}", 200) for page in pages.PAGES),
    ("/fragment/logs", 200),
    ("/fragment/run?workflow=PAYROLL&gid=g1", 200),
    ("/fragment/run?workflow=PAYROLL&gid=nosuch", 400),
    ("/api/runs", 200),
    ("/api/workflows", 200),
    ("/api/overlay", 200),
    ("/api/logs", 200),
    ("/static/dashboard.js", 200),
    ("/static/dashboard.css", 200),
    ("/static/nothing.js", 404),
    ("/nowhere", 404),
    ("/api/trigger", 405),  # a GET of an action
    ("/fragment/history?since=yesterday", 400),
    ("/api/logs?workflow=PAYROLL&gid=g1&job=JobZ", 404),
]


@pytest.mark.parametrize("path, code", READS)
def test_every_answer_carries_the_headers(board: Any, path: str, code: int) -> None:
    params = LOG if path in ("/fragment/logs", "/api/logs") else None
    answer = client(board).get(path, params=params)
    assert answer.status_code == code, answer.text
    assert secured(answer.headers) == EXPECTED


def test_actions_carry_the_headers_done_or_refused(board: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app_module, "trigger", lambda uri, tls, workflow: "g9")
    web = client(board)
    answers = [
        web.post("/api/trigger", json={"workflow": "PAYROLL"}),
        web.post("/api/rerun", json={"workflow": "PAYROLL", "gid": "old"}),
        web.post("/api/cancel", json={"workflow": 7}),
    ]
    assert [(a.status_code, secured(a.headers)) for a in answers] == [
        (200, EXPECTED),
        (200, EXPECTED),
        (400, EXPECTED),
    ]


def test_the_guards_refusals_and_redirect_carry_the_headers(board: Any) -> None:
    anyone = client(board, token=None)
    refused = [
        anyone.get("/api/runs"),  # 401, JSON
        anyone.get("/runs", headers={"Accept": "text/html"}),  # 401, a page a person reads
        anyone.get("/runs", headers={"Host": "evil.example"}),  # 403: DNS rebinding
        client(board).post("/api/trigger", content="workflow=PAYROLL"),  # 403: not JSON
        anyone.get(f"/runs?token={TOKEN}", follow_redirects=False),  # 303 with the cookie
    ]
    assert [a.status_code for a in refused] == [401, 401, 403, 403, 303]
    assert all(secured(a.headers) == EXPECTED for a in refused)


def test_an_internal_error_carries_the_headers(board: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Starlette's own 500 page, made outside every middleware given to it."""

    def broken(*args: object) -> str:
        raise RuntimeError("a bug")

    monkeypatch.setattr(pages, "shell", broken)
    app = create_app(board, Guard.listening("testserver", 80, TOKEN), background=False)
    web = TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}, raise_server_exceptions=False)
    answer = web.get("/runs")
    assert answer.status_code == 500 and secured(answer.headers) == EXPECTED


def test_the_event_stream_carries_the_headers(board: Any) -> None:
    """As an ASGI call (a stream served through TestClient would never end)."""
    app = create_app(board, Guard.listening("testserver", 80, TOKEN), background=False)
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message.get("body"):  # the stream's first words: it is open
            board.close_streams()

    async def call() -> None:
        gone = asyncio.Event()
        try:
            await asyncio.wait_for(app(_scope("/events"), _client(gone), send), 5)
        finally:
            gone.set()

    asyncio.run(call())
    start = sent[0]
    assert start["type"] == "http.response.start" and start["status"] == 200
    headers = {name.decode(): value.decode() for name, value in start["headers"]}
    assert headers["content-type"].startswith("text/event-stream")
    assert {name: headers[name] for name in EXPECTED} == EXPECTED
    assert len(start["headers"]) == len({name for name, _ in start["headers"]})  # none twice


INLINE = [
    re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.I),  # a script written in the page
    re.compile(r"<style\b", re.I),
    re.compile(r"\sstyle=", re.I),
    re.compile(r"\son[a-z]+=", re.I),  # onclick= and the like
    re.compile(r"javascript:", re.I),
]


def test_nothing_served_needs_what_the_policy_forbids(board: Any) -> None:
    """Every page and fragment, full of data: scripts only from files, styles only from the
    stylesheet, no event-handler attributes. (The browser test checks the console too.)"""
    web = client(board)
    served = [web.get(f"/{page}").text for page in pages.PAGES]
    served += [web.get(f"/fragment/{page}").text for page in pages.PAGES]
    served += [
        web.get("/fragment/logs", params=LOG).text,
        web.get("/fragment/run", params={"workflow": "PAYROLL", "gid": "g1"}).text,
        client(board, token=None).get("/", headers={"Accept": "text/html"}).text,
    ]
    rows = [JobPeriod("PAYROLL", "JobA", date(2026, 11, d), 2, 1, 0, 1.0, 2.0, ()) for d in (1, 2)]
    summary = [JobSummary("PAYROLL", "JobA", 4, 2, 0, 1.0, 0.9, 2.0)]
    query = pages.HistoryQuery(date(2026, 11, 1), date(2026, 11, 30))
    served.append(pages.history(query, "ready", (rows, summary)))
    table = {"entries": [{"id": "s1", "filter": "[class,eq,JOBSTATUS]", "hop": "B2"}], "total": 1}
    served.append(pages.broker_detail({"id": "B1", "srt": table, "prt": table}))
    assert all("<" in text for text in served)
    found = [(pattern.pattern, text[:80]) for text in served for pattern in INLINE if pattern.search(text)]
    assert found == []
    assert '<script src="/static/dashboard.js">' in served[0] and served[-2].count("<svg") == 2
