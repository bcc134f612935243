"""The errors of the wire codec: one base class, so a connection handler catches one type.

``ProtocolError`` subclasses ``ValueError`` because every one of them means "these bytes are not a
valid message", which is what callers already catch for model validation.
"""

from __future__ import annotations

__all__ = ["BadMessage", "FrameTooLarge", "ProtocolError"]


class ProtocolError(ValueError):
    """A peer broke the wire protocol. The message is one line, safe to log or send back."""


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
