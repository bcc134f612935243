"""``str-regex`` (docs/language.md): RE2 patterns, searched anywhere in a string value in linear time."""

from __future__ import annotations

import pickle
import re
import time

import msgpack
import pytest

from broker.language import ParseError, Predicate, Publication, parse_filter, parse_publication
from broker.language.operators import holds
from broker.language.regex import MAX_PATTERN, _compile, searcher
from broker.matching import CountingMatcher, LinearMatcher, Matcher
from broker.messages import Advertise, LinkUp, Publish, Subscribe
from broker.routing.relations import predicate_covers, predicate_overlaps
from broker.routing.router import Router
from broker.transport import BadMessage, decode, encode

HOSTILE = "(a+)+$"  # nested quantifiers: Python's re tries every way to split the a's
NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("[class,eq,a],[s,str-regex,'^IB(M|N)$']", "[class,eq,a],[s,str-regex,'^IB(M|N)$']"),
        ("[class,eq,a],[s,str-regex,IBM]", "[class,eq,a],[s,str-regex,IBM]"),
        ('[class,eq,a],[s,str-regex,"IBM"]', "[class,eq,a],[s,str-regex,IBM]"),
        ('[class,eq,a],[s,str-regex,"it\'s|[,\\]]"]', '[class,eq,a],[s,str-regex,"it\'s|[,\\]]"]'),
        ("[class,eq,a],[s,str-regex,'']", "[class,eq,a],[s,str-regex,'']"),
        ("[class,eq,a] , [s , str-regex , '(?i)x{2,3}']", "[class,eq,a],[s,str-regex,'(?i)x{2,3}']"),
    ],
)
def test_parses_to_its_canonical_text_and_back(text: str, canonical: str) -> None:
    subscription = parse_filter(text)
    assert str(subscription) == canonical
    assert parse_filter(canonical) == subscription
    assert subscription["s"].op == "str-regex"


@pytest.mark.parametrize(
    ("pattern", "column", "error"),
    [
        ("(a", 27, "str-regex pattern '(a' is not valid RE2 syntax: missing ): (a"),
        ("(a)\\1", 27, "is not valid RE2 syntax: invalid escape sequence: \\1"),  # no back-references
        ("a(?=b)", 27, "is not valid RE2 syntax: invalid perl operator: (?="),  # no look-ahead
        ("x{1001}", 27, "is not valid RE2 syntax: invalid repetition size: {1001}"),
        ("\\pL{100}", 27, "str-regex pattern '\\pL{100}' is too large once compiled (RE2 memory"),
        (".{1000}.{300}", 27, "is too large once compiled (10,404 instructions, at most 10,000)"),
        ("a" * (MAX_PATTERN + 1), 27, "str-regex pattern 'aaaa"),
    ],
)
def test_a_bad_pattern_is_a_one_line_parse_error_naming_it(pattern: str, column: int, error: str) -> None:
    with pytest.raises(ParseError) as caught:
        parse_filter(f"[class,eq,a],[s,str-regex,'{pattern}']")
    text = str(caught.value)
    assert error in text and caught.value.column == column, text
    assert "\n" not in text and len(text) < 200, text


def test_an_oversized_pattern_says_how_long_it_is() -> None:
    with pytest.raises(ParseError, match=r"is 1,001 characters long \(at most 1,000\) at column 27"):
        parse_filter(f"[class,eq,a],[s,str-regex,'{'a' * 1001}']")
    assert str(parse_filter(f"[class,eq,a],[s,str-regex,'{'a' * 1000}']"))  # the limit itself is fine


def test_str_regex_takes_a_string() -> None:
    with pytest.raises(
        ParseError, match="string operator 'str-regex' needs a string value, not the number 3"
    ):
        parse_filter("[class,eq,a],[s,str-regex,3]")
    with pytest.raises(ValueError, match="not valid RE2"):
        Predicate("s", "str-regex", "[")  # code that builds a predicate is checked too


@pytest.mark.parametrize(
    ("pattern", "value", "expected"),
    [
        ("BM", "IBM", True),  # a search: anywhere in the value
        ("^BM", "IBM", False),
        ("^IB", "IBM", True),
        ("IB$", "IBM", False),
        ("^IBM$", "IBM", True),
        ("^IBM$", "IBMX", False),
        ("", "", True),
        ("", "anything", True),
        ("^$", "", True),
        ("^$", "x", False),
        ("ibm", "IBM", False),  # case-sensitive
        ("(?i)ibm", "IBM", True),
        ("^.$", "é", True),  # one code point, though two bytes
        ("^..$", "é", False),
        ("^\\pL+$", "Zürich", True),
        ("^[a-c]+\\d{2,3}$", "abc123", True),
        ("^[a-c]+\\d{2,3}$", "abc1234", False),
        ("a.c", "a\tc", True),
        ("x|y", "zzz", False),
        ("it's", "it's", True),
    ],
)
def test_meaning(pattern: str, value: str, expected: bool) -> None:
    assert holds("str-regex", pattern, value) is expected
    subscription = parse_filter(f'[class,eq,a],[s,str-regex,"{pattern}"]')
    publication = parse_publication(f'[class,a],[s,"{value}"]')
    matcher = Matcher()
    matcher.add("s1", subscription)
    assert matcher.match(publication, NOW) == ({"s1"} if expected else set())


def test_never_a_number_nor_a_missing_attribute() -> None:
    matcher = CountingMatcher()
    matcher.add("s", parse_filter("[class,eq,a],[x,str-regex,'']"))  # any string at all
    assert matcher.match(parse_publication("[class,a],[x,'']"), NOW) == ["s"]
    assert matcher.match(parse_publication("[class,a],[x,12]"), NOW) == []
    assert matcher.match(parse_publication("[class,a],[y,'x']"), NOW) == []
    assert not holds("str-regex", "1", 12)


def test_a_hostile_regex_is_answered_in_microseconds() -> None:
    """``(a+)+$`` against a run of a's and a b: Python's ``re`` doubles its time with every a (the
    30 below would take it minutes); RE2 is linear, and so is the matcher holding the filter."""
    text = "a" * 30 + "b"
    matcher = CountingMatcher()
    matcher.add("hostile", parse_filter(f"[class,eq,a],[x,str-regex,'{HOSTILE}'],[n,<,5]"))
    matcher.add("other", parse_filter("[class,eq,a],[x,str-prefix,aaa]"))
    publication = parse_publication(f"[class,a],[n,1],[x,{text}]")
    assert matcher.match(publication, NOW) == ["other"]  # warm: the pattern was compiled at parse time
    best = min(_timed(lambda: matcher.match(publication, NOW)) for _ in range(50))
    assert best < 1e-3, f"{best * 1e6:.0f} us"  # typically 10-20 us, both filters included

    search = searcher(HOSTILE)
    long = ("a" * 100_000 + "b").encode()
    assert not search(long)
    assert min(_timed(lambda: search(long)) for _ in range(5)) < 5e-3  # 100,000 a's: ~0.1 ms

    # the same pattern is catastrophic for re: 18 a's take it more than 100 times 30 a's for RE2
    backtracking = _timed(lambda: re.search(HOSTILE, "a" * 18 + "b"))
    assert backtracking > 100 * best, (backtracking, best)


def _timed(action: object) -> float:
    start = time.perf_counter()
    action()  # type: ignore[operator]
    return time.perf_counter() - start


def test_each_distinct_pattern_is_compiled_once() -> None:
    pattern = "^compiled-once-[0-9]+$"
    before = _compile.cache_info()
    matcher = CountingMatcher()
    for n in range(20):
        matcher.add(n, parse_filter(f"[class,eq,a],[x,str-regex,'{pattern}'],[n,=,{n}]"))
    assert searcher(pattern) is searcher(pattern)
    assert _compile.cache_info().misses - before.misses == 1
    _compile.cache_clear()  # forgotten by the cache, but the matcher holds it: not compiled again
    matcher.add("again", parse_filter(f"[class,eq,a],[x,str-regex,'{pattern}']"))
    assert _compile.cache_info().misses == 0


def test_subscriptions_sharing_a_pattern_are_one_search() -> None:
    """The index keeps each distinct pattern once with the slots that use it; removal and the
    rebuild after many removals keep agreeing with the oracle."""
    matcher, linear = CountingMatcher(), LinearMatcher()
    patterns = ["^a", "b$", "(?i)^AB", "^(ab)+$", "[0-9]", ""]
    for n in range(600):
        subscription = parse_filter(f"[class,eq,c],[s,str-regex,'{patterns[n % 6]}'],[n,<,{n % 7}]")
        matcher.add(n, subscription)
        linear.add(n, subscription)
    publications = [
        parse_publication(f"[class,c],[n,{n}],[s,{s}]")
        for s in ("ab", "abab", "x9", "Abc", "b")
        for n in range(7)
    ]
    for removed in [*range(0, 600, 3), *range(1, 600, 3)]:
        if removed % 50 == 0:
            for publication in publications:
                assert set(matcher.match(publication, NOW)) == linear.match(publication, NOW)
        matcher.remove(removed)
        linear.remove(removed)
    for publication in publications:
        assert set(matcher.match(publication, NOW)) == linear.match(publication, NOW)


# covering and overlap: exact where a point is involved, conservative otherwise


def _p(op: str, value: str) -> Predicate:
    return Predicate("x", op, value)


@pytest.mark.parametrize(
    ("wide", "narrow", "covers"),
    [
        (_p("str-regex", "^IB"), _p("str-regex", "^IB"), True),  # the same pattern
        (_p("str-regex", "^IB"), _p("eq", "IBM"), True),  # a point: the pattern is asked
        (_p("str-regex", "^IB"), _p("eq", "XIBM"), False),
        (_p("str-regex", "^IB"), _p("str-prefix", "IBM"), False),  # true, but not proven: no
        (_p("str-regex", "^I"), _p("str-regex", "^IB"), False),  # likewise
        (_p("isPresent", ""), _p("str-regex", "^IB"), True),  # any string
        (_p("neq", "IBM"), _p("str-regex", "^X"), True),  # IBM is not among its values
        (_p("neq", "XY"), _p("str-regex", "^X"), False),
        (_p("str-prefix", "IB"), _p("str-regex", "^IBM"), False),  # not proven: no
    ],
)
def test_covering_is_proven_or_refused(wide: Predicate, narrow: Predicate, covers: bool) -> None:
    assert predicate_covers(wide, narrow) is covers


@pytest.mark.parametrize(
    ("one", "other", "overlap"),
    [
        (_p("str-regex", "^IB"), _p("eq", "IBM"), True),
        (_p("str-regex", "^IB"), _p("eq", "MSFT"), False),  # a point the pattern refuses
        (_p("str-regex", "^a"), _p("str-regex", "^b"), True),  # disjoint, but not proven: yes
        (_p("str-regex", "^a"), _p("str-prefix", "b"), True),
        (_p("str-regex", ""), Predicate("x", "isPresent", 0), False),  # a string and a number
        (_p("str-regex", ""), Predicate("x", ">", 3), False),
    ],
)
def test_overlap_is_refused_only_when_proven(one: Predicate, other: Predicate, overlap: bool) -> None:
    assert predicate_overlaps(one, other) is overlap
    assert predicate_overlaps(other, one) is overlap


# the wire


def test_a_subscription_with_a_pattern_round_trips_on_the_wire() -> None:
    message = Subscribe("s1", parse_filter('[class,eq,a],[x,str-regex,"^it\'s (a|b)+\\d$"]'))
    assert decode(encode(message)[4:]) == message  # the payload after its length


@pytest.mark.parametrize(
    ("pattern", "error"),
    [
        ("(a", "bad Subscribe: str-regex pattern '(a' is not valid RE2 syntax"),
        ("a" * 5000, "bad Subscribe: str-regex pattern 'aaaa"),
        ("x{1001}", "is not valid RE2 syntax: invalid repetition size"),
        ("\\pL{1000}", "is too large once compiled"),
        ("(\\pL|\\pN){1000}", "is too large once compiled"),
        ("x\ny", "a string value cannot contain a line break"),
    ],
)
def test_a_hostile_pattern_from_the_network_is_a_bad_message(pattern: str, error: str) -> None:
    payload = msgpack.packb(["sub", "s1", ["a", [["x", "str-regex", pattern]]], 1], use_bin_type=True)
    with pytest.raises(BadMessage) as caught:
        decode(payload)
    assert error in str(caught.value) and "\n" not in str(caught.value), str(caught.value)


def test_a_router_holding_patterns_is_snapshotted_and_restored() -> None:
    """The broker's snapshot pickles its router, matcher included: the patterns come back compiled."""
    router = Router("B1")
    router.handle(LinkUp(False), "pub", 1.0)
    router.handle(LinkUp(False), "sub", 1.0)
    router.handle(Advertise("a", parse_filter("[class,eq,t],[s,isPresent,'']")), "pub", 2.0)
    for n, pattern in enumerate(["^JOB_[0-9]+$", "(a+)+$", "(?i)payroll", "x|y"]):
        router.handle(Subscribe(f"s{n}", parse_filter(f"[class,eq,t],[s,str-regex,'{pattern}']")), "sub", 3.0)
    restored = Router.restore(pickle.loads(pickle.dumps(router.snapshot(), pickle.HIGHEST_PROTOCOL)))
    delivered = 0
    for n, value in enumerate(["JOB_12", "baaa", "PayRoll run", "y", "none"]):
        publish = Publish(str(n), Publication("t", {"s": value}))
        out = router.handle(publish, "pub", 4.0)
        assert restored.handle(publish, "pub", 4.0) == out
        delivered += sum(hop == "sub" for hop, _ in out)
    assert delivered == 4
