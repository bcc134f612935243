"""What every answer of the dashboard tells the browser, whichever route, refusal or error made it:
a page, a fragment, JSON, a static file, the event stream, a 401 from the guard, a 404 or a 500.

- ``Content-Security-Policy``: the page may load its own stylesheet and script, fetch and open its
  event stream on its own origin, and nothing else: no inline script or style (the pages have
  none: ``static/dashboard.js`` and ``static/dashboard.css`` are files, the SVG is styled by
  classes), no plugin, no ``<base>``, no framing by any page, no form sent elsewhere. Should a
  fragment ever let markup through its escaping, a script in it would not run.
- ``X-Content-Type-Options: nosniff``: JSON and text are never taken for HTML or script.
- ``Referrer-Policy: no-referrer``: no URL of the dashboard leaves with a request.
- ``X-Frame-Options: DENY``: no framing (click-jacking), for browsers before ``frame-ancestors``.

:class:`SecurityHeaders` is the ASGI middleware that sets them, replacing any a response set itself.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["HEADERS", "POLICY", "SecurityHeaders"]

POLICY = "; ".join(
    (
        "default-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
        "form-action 'self'",
    )
)
HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"content-security-policy", POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
)
_NAMES = frozenset(name for name, _ in HEADERS)


class SecurityHeaders:
    """ASGI middleware: :data:`HEADERS` on the start of every HTTP response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [(n, v) for n, v in message.get("headers", ()) if n.lower() not in _NAMES]
                message = {**message, "headers": [*kept, *HEADERS]}
            await send(message)

        await self.app(scope, receive, sending)
