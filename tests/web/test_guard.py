"""Who may use the dashboard (``wfm.web.guard``) through Starlette's TestClient, and the event
stream's coalescing driven as an ASGI application with a reader that stalls."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

import wfm.web.app as app_module
from tests.web.test_app import TOKEN, Agents, client, dashboard
from wfm.web import create_app
from wfm.web.guard import Guard, check_token

ACTION = {"workflow": "PAYROLL"}


@pytest.fixture
def fired(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The workflows the Trigger endpoint triggered (no broker: a stand-in that succeeds)."""
    triggered: list[str] = []
    monkeypatch.setattr(app_module, "trigger", lambda uri, tls, workflow: triggered.append(workflow) or "g9")
    monkeypatch.setattr(app_module.Dashboard, "agents", lambda self: Agents())  # PAYROLL is deployed
    return triggered


@pytest.mark.parametrize(
    "method, path", [("GET", "/"), ("GET", "/api/runs"), ("GET", "/static/dashboard.js")]
)
def test_every_read_needs_the_token(tmp_path: Path, method: str, path: str) -> None:
    anyone = client(dashboard(tmp_path), token=None)
    answer = anyone.request(method, path)
    assert answer.status_code == 401 and answer.headers["WWW-Authenticate"] == "Bearer"
    assert answer.json()["error"].startswith("no valid token: open the URL wfm web printed")
    assert client(dashboard(tmp_path), token="x" * 43).request(method, path).status_code == 401


def test_a_browser_opening_a_page_without_the_token_reads_why(tmp_path: Path) -> None:
    answer = client(dashboard(tmp_path), token=None).get("/runs", headers={"Accept": "text/html,*/*"})
    assert answer.status_code == 401 and answer.headers["content-type"].startswith("text/html")
    assert "no valid token: open the URL wfm web printed" in answer.text
    assert "started again" in answer.text and "<script" not in answer.text


def test_the_token_in_either_header_is_taken(tmp_path: Path) -> None:
    anyone = client(dashboard(tmp_path), token=None)
    assert anyone.get("/api/runs", headers={"X-WFM-Token": TOKEN}).status_code == 200
    assert anyone.get("/api/runs", headers={"Authorization": f"bearer {TOKEN}"}).status_code == 200
    assert anyone.get("/api/runs", headers={"Authorization": f"Basic {TOKEN}"}).status_code == 401
    not_ascii = ("é" * 43).encode("latin-1")
    assert anyone.get("/api/runs", headers={"X-WFM-Token": not_ascii}).status_code == 401


@pytest.mark.parametrize("action", ["trigger", "cancel", "rerun"])
def test_an_action_without_the_token_is_refused_and_not_done(
    tmp_path: Path, fired: list[str], action: str
) -> None:
    board = dashboard(tmp_path)
    board.session = agents = _Agents()
    answer = client(board, token=None).post(f"/api/{action}", json={**ACTION, "gid": "g1"})
    assert answer.status_code == 401
    assert fired == [] and agents.done == []


def test_a_cross_site_form_cannot_trigger(tmp_path: Path, fired: list[str]) -> None:
    """What any web page can send without the browser asking first: no JSON type, its own Origin."""
    web = client(dashboard(tmp_path), token=None)
    forged = web.post(
        "/api/trigger",
        content=b'{"workflow":"PAYROLL"}',
        headers={"Content-Type": "text/plain", "Origin": "https://evil.example"},
    )
    assert forged.status_code == 403 and fired == []
    assert forged.json() == {"error": "cross-origin request from 'https://evil.example' refused"}


def test_an_action_must_be_json(tmp_path: Path, fired: list[str]) -> None:
    web = client(dashboard(tmp_path))
    plain = web.post(
        "/api/trigger", content=b'{"workflow":"PAYROLL"}', headers={"Content-Type": "text/plain"}
    )
    assert plain.status_code == 403
    assert plain.json() == {"error": "POST needs Content-Type: application/json (got 'text/plain')"}
    form = web.post("/api/trigger", data={"workflow": "PAYROLL"})
    assert form.status_code == 403 and fired == []
    typed = {"Content-Type": "Application/JSON; charset=utf-8"}
    assert web.post("/api/trigger", content=b'{"workflow":"PAYROLL"}', headers=typed).status_code == 200
    assert fired == ["PAYROLL"]


def test_an_action_from_another_origin_is_refused_and_from_this_one_taken(
    tmp_path: Path, fired: list[str]
) -> None:
    web = client(dashboard(tmp_path))
    for origin in ("https://evil.example", "http://testserver.evil.example", "null", "http://testserver:81"):
        answer = web.post("/api/trigger", json=ACTION, headers={"Origin": origin})
        assert answer.status_code == 403, origin
    assert fired == []
    assert web.post("/api/trigger", json=ACTION, headers={"Origin": "http://testserver"}).status_code == 200
    assert fired == ["PAYROLL"]


def test_a_host_the_server_does_not_listen_on_is_refused(tmp_path: Path) -> None:
    """DNS rebinding: evil.example, pointed at 127.0.0.1, reaches the port with its own name."""
    web = client(dashboard(tmp_path))
    rebound = web.get("/api/runs", headers={"Host": "evil.example:7104"})
    assert rebound.status_code == 403
    assert rebound.json() == {"error": "unknown Host 'evil.example:7104': open the dashboard by its address"}
    for known in ("localhost:7104", "127.0.0.1:7104", "[::1]:7104", "LOCALHOST"):
        assert web.get("/api/runs", headers={"Host": known}).status_code == 200, known
    assert web.get("/api/runs", headers={"Host": "[::1"}).status_code == 403  # not a host at all


def test_listening_on_every_address_takes_any_address_but_only_this_machines_names() -> None:
    local = Guard.listening("127.0.0.1", 7104, TOKEN)
    every = Guard.listening("0.0.0.0", 7104, TOKEN)
    asked = {"authorization": f"Bearer {TOKEN}"}
    for guard, host, allowed in (
        (local, "10.1.2.3:7104", False),
        (every, "10.1.2.3:7104", True),
        (every, "[fe80::1]:7104", True),
        (every, "evil.example:7104", False),
        (every, "localhost:7104", True),
    ):
        assert (guard.decide("GET", "/", "", {**asked, "host": host}) is None) is allowed, (guard, host)


def test_the_token_url_sets_a_strict_httponly_cookie_and_redirects_without_it(tmp_path: Path) -> None:
    web = client(dashboard(tmp_path), token=None)
    login = web.get("/history", params={"since": "2026-11-01", "token": TOKEN}, follow_redirects=False)
    assert login.status_code == 303 and login.headers["location"] == "/history?since=2026-11-01"
    cookie = login.headers["set-cookie"]
    assert cookie.startswith(f"wfm-token-80={TOKEN};")
    assert {"httponly", "samesite=strict", "path=/"} <= {part.strip().lower() for part in cookie.split(";")}
    assert web.get("/api/runs").status_code == 200  # the cookie is the token now
    assert web.get("/", params={"token": TOKEN}, follow_redirects=False).headers["location"] == "/"
    wrong = client(dashboard(tmp_path), token=None).get(
        "/", params={"token": "w" * 43}, follow_redirects=False
    )
    assert wrong.status_code == 401 and "set-cookie" not in wrong.headers
    guard = Guard.listening("testserver", 80, TOKEN)
    elsewhere = guard.decide("GET", "//evil.example/", f"token={TOKEN}", {"host": "testserver"})
    assert elsewhere is not None and elsewhere.headers["location"] == "/evil.example/"  # never another site


def test_a_token_given_must_be_long_and_url_safe() -> None:
    assert check_token("a" * 16) == "a" * 16
    for bad in ("short", "a" * 15 + " ", "a" * 20 + ";", "a" * 513):
        with pytest.raises(ValueError, match="must be 16 to 512 characters"):
            check_token(bad)


class _Agents:
    done: list[object]

    def __init__(self) -> None:
        self.done = []

    async def cancel(self, *args: Any) -> dict[str, tuple[str, str]]:
        self.done.append(args)
        return {}

    async def rerun(self, *args: Any) -> str:
        self.done.append(args)
        return "g1-r1"


def test_a_stalled_event_stream_keeps_one_pending_set_and_notices_are_coalesced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(app_module, "NOTICE_GAP", 0.5)
    board = dashboard(tmp_path)
    app = create_app(board, Guard.listening("testserver", 80, TOKEN), background=False)

    async def scenario() -> None:
        chunks: asyncio.Queue[str] = asyncio.Queue()
        reading, gone = asyncio.Event(), asyncio.Event()
        reading.set()
        receive = _client(gone)

        async def send(message: dict[str, Any]) -> None:
            await reading.wait()  # a reader that stalls: its socket's buffer is full
            if message.get("body"):
                chunks.put_nowait(message["body"].decode())

        async def next_chunk() -> str:
            return await asyncio.wait_for(chunks.get(), 5)

        serving = asyncio.create_task(app(_scope("/events"), receive, send))
        assert await next_chunk() == "retry: 2000\n\n"
        (notices,) = board.listeners
        reading.clear()
        for _ in range(10_000):
            board.changed("runs")
            board.changed("overlay")
            await asyncio.sleep(0)
        assert notices.pending == {"overlay", "runs"}  # however many changes: one name per page
        reading.set()
        frames = 'event: overlay\ndata: "overlay"\n\nevent: runs\ndata: "runs"\n\n'
        assert await next_chunk() == frames  # what it took before it stalled
        assert await next_chunk() == frames  # what changed since: once
        assert notices.pending == set()
        board.changed("runs")  # within NOTICE_GAP of the last notice: both wait for the next one
        for _ in range(10):
            await asyncio.sleep(0)
        board.changed("overlay")
        assert await next_chunk() == frames
        board.close_streams()
        await asyncio.wait_for(serving, 5)
        assert board.listeners == set()
        gone.set()

    asyncio.run(scenario())


def test_the_event_stream_needs_the_token(tmp_path: Path) -> None:
    """As an ASGI call, not through TestClient: a stream that were served would never end."""
    app = create_app(dashboard(tmp_path), Guard.listening("testserver", 80, TOKEN), background=False)
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def call() -> None:
        gone = asyncio.Event()
        try:
            await asyncio.wait_for(app(_scope("/events", authorised=False), _client(gone), send), 5)
        finally:
            gone.set()

    asyncio.run(call())
    assert sent[0]["status"] == 401


def _client(gone: asyncio.Event) -> Callable[[], Awaitable[dict[str, Any]]]:
    """An ASGI ``receive``: the request, then a disconnection once ``gone`` is set."""
    requested = False

    async def receive() -> dict[str, Any]:
        nonlocal requested
        if not requested:
            requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    return receive


def _scope(path: str, authorised: bool = True) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver")]
        + ([(b"authorization", f"Bearer {TOKEN}".encode())] if authorised else []),
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }


def test_the_pages_work_with_the_cookie_alone(tmp_path: Path) -> None:
    web = TestClient(
        create_app(dashboard(tmp_path), Guard.listening("testserver", 80, TOKEN), background=False),
        cookies={"wfm-token-80": TOKEN},
    )
    assert web.get("/runs").status_code == 200 and web.get("/fragment/runs").status_code == 200
    assert web.post("/api/trigger", json={"workflow": 7}).status_code == 400  # past the guard
