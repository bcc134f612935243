"""The one error a message text can raise.

Model constructors raise plain ``ValueError`` (they do not know where a value came from); the parser
converts those into ``ParseError`` with the column of the offending token, so every caller of
``parse_*`` handles exactly one exception type.
"""

from __future__ import annotations

__all__ = ["ParseError"]


class ParseError(ValueError):
    """A message text that is not valid. ``column`` is 1-based; ``reason`` has no position."""

    def __init__(self, reason: str, column: int, text: str = "") -> None:
        self.reason = reason
        self.column = column
        self.text = text
        super().__init__(f"{reason} at column {column}")
