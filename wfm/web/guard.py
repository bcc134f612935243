"""Who may use the dashboard: the dashboard acts as the deployer, so whoever reaches its port
must not thereby become one, nor may a web page the operator happens to visit use the operator's
browser to do so. Three rules, as Jupyter and Airflow do for their local servers:

- every request carries the per-process token: an ``Authorization: Bearer`` or ``X-WFM-Token``
  header, or the cookie that opening ``/?token=TOKEN`` sets (HttpOnly, SameSite=Strict: a browser
  sends it with no request another site starts);
- a request that changes something (any method but GET, HEAD, OPTIONS) is JSON
  (``Content-Type: application/json``, which a page of another site cannot send without the
  browser asking first) and, if it has an ``Origin``, that origin is this server;
- the ``Host`` header names this server (an address it listens on, or a local name), so that a
  name an attacker points at 127.0.0.1 (DNS rebinding) reaches nothing.

The decision (:meth:`Guard.decide`) is a pure function of the request's method, path, query and
headers; :class:`Guarded` is the ASGI adapter.
"""

from __future__ import annotations

import hmac
import html
import ipaddress
import re
import secrets
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qsl, urlencode, urlsplit

from starlette.datastructures import Headers
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["Guard", "Guarded", "check_token", "new_token"]

LOCAL_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
EVERY_ADDRESS = frozenset({"", "0.0.0.0", "::"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
TOKEN = re.compile(r"[A-Za-z0-9._~-]{16,512}")  # safe in a URL and a cookie as it is


def new_token() -> str:
    return secrets.token_urlsafe(32)


def check_token(token: str) -> str:
    """``token`` if it can be one (given with ``--token`` or WFM_WEB_TOKEN), else ValueError."""
    if not TOKEN.fullmatch(token):
        raise ValueError(
            "the dashboard's token must be 16 to 512 characters of A-Z a-z 0-9 . _ ~ - "
            f"(got {len(token)} characters)"
        )
    return token


@dataclass(frozen=True)
class Guard:
    """The token and the names this server answers to."""

    token: str
    names: frozenset[str]  # host names (lower case) a Host header may carry
    any_address: bool  # listening on every address: a Host that is an IP address is fine too
    cookie: str  # per port: browsers keep cookies per host, and two dashboards may share one

    @classmethod
    def listening(cls, host: str, port: int, token: str) -> Guard:
        """The guard of a server listening on ``host``:``port``; when that is every address, the
        machine's own names are accepted as well as any address."""
        names = {host.lower().strip("[]"), *LOCAL_NAMES}
        every = host in EVERY_ADDRESS
        if every:
            names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
        return cls(check_token(token), frozenset(names - {""}), every, f"wfm-token-{port}")

    def decide(self, method: str, path: str, query: str, headers: Mapping[str, str]) -> Response | None:
        """None if the request may go on; else the answer: a refusal (401 or 403, one line of
        JSON) or, for ``?token=`` with the right token, the cookie and a redirect to the page."""
        host = headers.get("host", "")
        if not self._known_host(host):
            return refusal(403, f"unknown Host {host!r}: open the dashboard by its address")
        origin = headers.get("origin")
        if origin is not None and not _same_origin(origin, host):
            return refusal(403, f"cross-origin request from {origin!r} refused")
        params = parse_qsl(query, keep_blank_values=True)
        given = [value for name, value in params if name == "token"]
        if given and method == "GET":
            if not self._matches(given[-1]):
                return refusal(401, "wrong token: open the URL wfm web printed", headers)
            rest = urlencode([(name, value) for name, value in params if name != "token"])
            page = "/" + path.lstrip("/")  # never "//elsewhere": a Location to another site
            answer = RedirectResponse(page + (f"?{rest}" if rest else ""), status_code=303)
            answer.set_cookie(self.cookie, self.token, httponly=True, samesite="strict")
            answer.headers["Cache-Control"] = "no-store"
            return answer
        if not any(self._matches(t) for t in _presented(headers, self.cookie)):
            return refusal(
                401,
                "no valid token: open the URL wfm web printed (/?token=...), or send "
                "'Authorization: Bearer TOKEN' or 'X-WFM-Token: TOKEN'",
                headers,
            )
        if method not in SAFE_METHODS:
            kind = headers.get("content-type", "").split(";")[0].strip().lower()
            if kind != "application/json":
                return refusal(403, f"{method} needs Content-Type: application/json (got {kind or 'none'!r})")
        return None

    def _known_host(self, host: str) -> bool:
        try:
            name = (urlsplit(f"//{host}").hostname or "") if host else ""
        except ValueError:
            return False
        if name in self.names:
            return True
        if not self.any_address:
            return False
        try:
            ipaddress.ip_address(name)  # an address is no name another site can point here
        except ValueError:
            return False
        return True

    def _matches(self, given: str) -> bool:
        return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), self.token.encode())


def _presented(headers: Mapping[str, str], cookie_name: str) -> list[str]:
    """The tokens a request presents: the two headers and the login cookie."""
    found = []
    scheme, _, value = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        found.append(value.strip())
    if "x-wfm-token" in headers:
        found.append(headers["x-wfm-token"].strip())
    cookies: SimpleCookie = SimpleCookie()
    try:
        cookies.load(headers.get("cookie", ""))
    except CookieError:  # a malformed Cookie header is no token
        return found
    if cookie_name in cookies:
        found.append(cookies[cookie_name].value)
    return found


def _same_origin(origin: str, host: str) -> bool:
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and parts.netloc.lower() == host.lower()


STALE = (
    "A dashboard open before wfm up or wfm web was started again holds the old token: each start "
    "prints a new URL."
)


def refusal(status: int, line: str, request: Mapping[str, str] | None = None) -> Response:
    """One line of JSON for a program; for a browser opening a page (``Accept: text/html``),
    the same line as a page a person can read, and why a tab that worked may now be refused."""
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    if status == 401 and request is not None and "text/html" in request.get("accept", ""):
        page = f"<!doctype html><title>wfm: sign in</title><p>{html.escape(line)}</p><p>{STALE}</p>"
        return HTMLResponse(page, status_code=status, headers=headers)
    return JSONResponse({"error": line}, status_code=status, headers=headers)


class Guarded:
    """ASGI middleware: every HTTP request passes :meth:`Guard.decide` first; the server's own
    lifespan events pass; anything else (a WebSocket: the dashboard has none) is not answered."""

    def __init__(self, app: ASGIApp, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            query = scope.get("query_string", b"").decode("latin-1")
            answer = self.guard.decide(scope["method"], scope["path"], query, Headers(scope=scope))
            if answer is not None:
                await answer(scope, receive, send)
                return
        elif scope["type"] != "lifespan":
            return
        await self.app(scope, receive, send)
