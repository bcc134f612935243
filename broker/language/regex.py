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
from weakref import WeakValueDictionary

import re2

__all__ = [
    "MAX_MEM",
    "MAX_PATTERN",
    "MAX_PROGRAM",
    "REGEX",
    "SET_MEM",
    "PatternSet",
    "check_pattern",
    "encoded",
    "literal_prefix",
    "search",
    "searcher",
    "valid_pattern",
]

REGEX = "str-regex"
MAX_PATTERN = 1000  # characters of a pattern
MAX_PROGRAM = 10_000  # RE2 instructions: ``.{1000}`` is 8,004, ``\pL{100}`` 119,604
MAX_MEM = 1 << 20  # bytes RE2 may use for one pattern's program and DFA (its default is 8 MiB)
SET_MEM = 32 << 20  # bytes for a PatternSet's program and DFA: one for thousands of patterns

Search = Callable[[bytes], bool]


def _options(max_mem: int = MAX_MEM) -> re2.Options:
    options = re2.Options()
    options.max_mem = max_mem
    options.never_capture = True  # a yes/no answer: no submatch to find
    options.log_errors = False  # a bad pattern is the sender's error, reported as a ValueError
    return options


def _described(pattern: str) -> str:
    """The pattern quoted as the language writes it, shortened: for a one-line error."""
    shown = pattern if len(pattern) <= 60 else pattern[:57] + "..."
    quote = '"' if "'" in shown else "'"
    return f"str-regex pattern {quote}{shown}{quote}"


def _compiled(pattern: str) -> Search | str:
    """The search function of a pattern, or why it is refused: compiled once while anything holds
    it (a matcher's index does), and kept a while after (parsing a filter then adding it to a matcher
    compiles once, however many other patterns came in between)."""
    found = _live.get(pattern)
    if found is not None:
        return found
    verdict = _compile(pattern)
    if not isinstance(verdict, str):
        _live[pattern] = verdict
    return verdict


@lru_cache(maxsize=4096)
def _compile(pattern: str) -> Search | str:
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


def literal_prefix(pattern: str) -> str:
    """A text every value the pattern matches starts with ("" when none is proven): the literal
    characters after a leading ``^`` in a pattern without ``|``, the last one left out when a
    quantifier follows it (``^JOB_[0-9]+`` -> ``JOB_``, ``^ab*`` -> ``a``). No ``|`` anywhere means
    no alternative that could start elsewhere; no flag can precede the ``^``, so the characters are
    matched as written. The matcher looks such patterns up by the value's prefix instead of
    searching with each. RE2's own range of the matches must agree, or the answer is ""."""
    if not pattern.startswith("^") or "|" in pattern:
        return ""
    end = 1
    while end < len(pattern) and pattern[end] not in _SPECIAL:
        end += 1
    prefix = pattern[1:end]
    if end < len(pattern) and pattern[end] in "*+?{":
        prefix = prefix[:-1]
    if not prefix or isinstance(_compiled(pattern), str):
        return ""
    found, low, high = _RANGE(pattern.encode(), _OPTIONS).PossibleMatchRange(len(prefix.encode()) + 1)
    wanted = prefix.encode()
    return prefix if found and low.startswith(wanted) and high.startswith(wanted) else ""


class PatternSet:
    """Many patterns searched in one pass over a value (RE2::Set, unanchored, under the same options
    as one pattern): the cost follows the value's length, not the number of patterns.

    RE2::Set answers no match at all when its DFA runs out of memory (``SET_MEM``), which the
    binding does not report. So the set holds one more pattern, ``""``, which matches every value:
    an answer without it is that failure, and ``matches`` says None (search them one by one)."""

    __slots__ = ("_match",)

    def __init__(self, match: Callable[[bytes], list[int]]) -> None:
        self._match = match

    @classmethod
    def of(cls, patterns: list[str]) -> PatternSet | None:
        """The set of these (valid) patterns, or None when RE2 cannot compile them together."""
        built = _re2.Set(_UNANCHORED, _options(SET_MEM))
        if built.Add(b"") != 0:
            return None
        for number, pattern in enumerate(patterns, 1):
            if built.Add(pattern.encode()) != number:
                return None
        return cls(built.Match) if built.Compile() else None

    def matches(self, data: bytes) -> list[int] | None:
        """The positions (in ``of``'s list) of the patterns found in ``data`` (``encoded``), in
        no order; None if RE2 could not tell."""
        found = self._match(data)
        if 0 not in found:
            return None
        return [number - 1 for number in found if number]


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
_live: WeakValueDictionary[str, Search] = WeakValueDictionary()  # every pattern in use, compiled
_OPTIONS = _options()
_UNANCHORED = _re2.RE2.Anchor.UNANCHORED
_NO_MATCH = (-1, -1)
_SPECIAL = frozenset("\\.+*?()|[]{}^$")
_RANGE = _re2.RE2
