"""``str-regex``: RE2 patterns, checked and compiled once, searched in linear time.

Python's ``re`` backtracks: one hostile filter (``(a+)+$`` against thirty ``a`` and a ``b``) keeps
it busy for minutes, and a broker matches every publication against every filter it holds, some
sent by strangers. RE2 (the ``google-re2`` binding) runs in time linear in the text whatever the
pattern, and refuses the constructs that need backtracking (back-references, look-around).

Meaning: ``[x,str-regex,P]`` holds when ``P`` matches anywhere in the string value (RE2 search,
like ``str-contains``); write ``^`` and ``$`` to anchor it. Values are searched as UTF-8 (``.``
is one code point), case-sensitively unless the pattern says ``(?i)``.

Limits, checked where a predicate is made (parser, wire codec, any code building a ``Predicate``):
a pattern of at most ``MAX_PATTERN`` characters that RE2 compiles within ``MAX_MEM`` bytes into at
most ``MAX_PROGRAM`` instructions. ``MAX_MEM`` also caps the lazily built DFA of each pattern; RE2
falls back to its NFA (still linear) when that fills. Each distinct pattern is compiled once.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

import re2

__all__ = [
    "MAX_MEM",
    "MAX_PATTERN",
    "MAX_PROGRAM",
    "REGEX",
    "check_pattern",
    "encoded",
    "search",
    "searcher",
    "valid_pattern",
]

REGEX = "str-regex"
MAX_PATTERN = 1000  # characters of a pattern
MAX_PROGRAM = 10_000  # RE2 instructions: ``.{1000}`` is 8,004, ``\pL{100}`` 119,604
MAX_MEM = 1 << 20  # bytes RE2 may use for one pattern's program and DFA (its default is 8 MiB)

Search = Callable[[bytes], bool]


def _options() -> re2.Options:
    options = re2.Options()
    options.max_mem = MAX_MEM
    options.never_capture = True  # a yes/no answer: no submatch to find
    options.log_errors = False  # a bad pattern is the sender's error, reported as a ValueError
    return options


def _described(pattern: str) -> str:
    """The pattern quoted as the language writes it, shortened: for a one-line error."""
    shown = pattern if len(pattern) <= 60 else pattern[:57] + "..."
    quote = '"' if "'" in shown else "'"
    return f"str-regex pattern {quote}{shown}{quote}"


@lru_cache(maxsize=4096)
def _compiled(pattern: str) -> Search | str:
    """The search function of a pattern, or why it is refused (errors are cached too: a peer
    repeating a bad pattern costs one compilation)."""
    if len(pattern) > MAX_PATTERN:
        return f"{_described(pattern)} is {len(pattern):,} characters long (at most {MAX_PATTERN:,})"
    try:
        encoded = pattern.encode()
    except UnicodeEncodeError:
        return f"{_described(pattern)} is not valid Unicode"
    regexp = _re2.RE2(encoded, _OPTIONS)
    if not regexp.ok():
        reason = regexp.error()
        reason = reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)
        if "too large" in reason:
            return f"{_described(pattern)} is too large once compiled (RE2 memory {MAX_MEM:,} bytes)"
        return f"{_described(pattern)} is not valid RE2 syntax: {reason}"
    size = regexp.ProgramSize()
    if size > MAX_PROGRAM:
        limit = f"{size:,} instructions, at most {MAX_PROGRAM:,}"
        return f"{_described(pattern)} is too large once compiled ({limit})"
    match, anchor, missing = regexp.Match, _UNANCHORED, _NO_MATCH

    def search(data: bytes) -> bool:
        return match(anchor, data, 0, len(data))[0] != missing

    return search


def encoded(text: str) -> bytes:
    """A string value as RE2 searches it: UTF-8 (a lone surrogate, which no wire carries, is
    encoded as its three bytes rather than raising)."""
    return text.encode(errors="surrogatepass")


def check_pattern(pattern: str) -> str:
    """The pattern, if RE2 accepts it within the limits; ValueError saying why not, naming it."""
    verdict = _compiled(pattern)
    if isinstance(verdict, str):
        raise ValueError(verdict)
    return pattern


def valid_pattern(pattern: str) -> bool:
    """Whether ``check_pattern`` accepts the pattern."""
    return not isinstance(_compiled(pattern), str)


def searcher(pattern: str) -> Search:
    """``encoded(text) -> bool``: does ``pattern`` match anywhere in ``text``? ValueError for a
    bad pattern. The matcher encodes a value once for all the patterns of its attribute."""
    verdict = _compiled(pattern)
    if isinstance(verdict, str):
        raise ValueError(verdict)
    return verdict


def search(pattern: str, text: str) -> bool:
    """The literal meaning of ``[x,str-regex,pattern]`` for the string value ``text``."""
    return searcher(pattern)(encoded(text))


# The binding's low-level object answers a search in about 1 us; its ``re``-like wrapper spends
# about 9 us mapping byte offsets back to characters, which a yes/no answer does not need.
_re2 = re2._re2
_OPTIONS = _options()
_UNANCHORED = _re2.RE2.Anchor.UNANCHORED
_NO_MATCH = (-1, -1)
