"""The one error family of the project: every error raised on purpose derives from :class:`WfmError`.

So an adapter (the CLI, a connection handler, the agent service) converts errors at one boundary by
catching one type, and its message is always one line, safe to log or to print after ``wfm: error:``.

As in h11, errors are split by whose fault they are:

- :class:`LocalError`: what this process was given cannot be used (a message text, a workflow file,
  an option, a store directory) or this process cannot do it (a port in use, no Java). Retrying
  the same thing fails the same way; the fix is on this side.
- :class:`RemoteError`: another process broke the protocol, refused, went away or did not answer.
  The fix is on the other side, or retrying later may work.

Errors that explain themselves with numbers keep them as attributes (``FrameTooLarge.size`` and
``.limit``), so callers and tests need not parse messages. Errors about bad values also derive from
``ValueError`` and errors about connections from ``ConnectionError``, which is what code that does
not know this family (and the standard library's habits) catches.
"""

from __future__ import annotations

__all__ = [
    "BadMessage",
    "ConnectError",
    "FrameTooLarge",
    "LinkClosed",
    "LocalError",
    "NoAnswer",
    "ParseError",
    "ProtocolError",
    "RefusedError",
    "RemoteError",
    "WfmError",
]


class WfmError(Exception):
    """Base of every error the project raises on purpose; the message is one line."""


class LocalError(WfmError):
    """The input this process was given, or this process itself, is at fault."""


class RemoteError(WfmError):
    """Another process is at fault: it broke the protocol, refused, went away or did not answer."""


class ParseError(LocalError, ValueError):
    """A message text that is not valid. ``column`` is 1-based; ``reason`` has no position.

    Model constructors raise plain ``ValueError`` (they do not know where a value came from); the
    parser converts those into ``ParseError`` with the column of the offending token, so every
    caller of ``parse_*`` handles exactly one exception type."""

    def __init__(self, reason: str, column: int, text: str = "") -> None:
        self.reason = reason
        self.column = column
        self.text = text
        super().__init__(f"{reason} at column {column}")


class ProtocolError(RemoteError, ValueError):
    """A peer broke the wire protocol: these bytes are not a valid message."""


class FrameTooLarge(ProtocolError):
    """A length prefix above the limit: the stream cannot be resynchronised, so the link must close."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit}")

    def __reduce__(self) -> tuple[type[FrameTooLarge], tuple[int, int]]:
        # the default pickling would call __init__ with the message only
        return (FrameTooLarge, (self.size, self.limit))


class BadMessage(ProtocolError):
    """A complete frame whose content is not a valid message; the frame boundary is intact, so the
    link may survive (answer with an error and count it)."""


class LinkClosed(RemoteError, ConnectionError):
    """The link is closed; the message says why."""


class ConnectError(RemoteError, ConnectionError):
    """The broker could not be reached, did not answer the handshake or refused the connection."""


class RefusedError(RemoteError):
    """The broker refused a request; the message is its reason."""


class NoAnswer(RemoteError, TimeoutError):
    """A peer did not answer a request in time; the message names the request and the wait."""
