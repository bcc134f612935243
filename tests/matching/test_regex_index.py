"""The matcher's index of ``str-regex`` predicates (attribute_index._Regexes) against the oracle:
patterns with a literal prefix looked up by the value's prefix, the others searched in RE2 sets
(the logarithmic method), and the fallbacks when RE2 cannot build or run a set."""

from __future__ import annotations

import math
import pickle
import random

import pytest

import broker.language.regex as regex
import broker.matching.attribute_index as attribute_index
from broker.language import Filter, Predicate, Publication
from broker.language.operators import holds
from broker.language.regex import PatternSet, check_pattern, literal_prefix, valid_pattern
from broker.matching import CountingMatcher, LinearMatcher

NOW = 1_800_000_000.0
ALPHABET = "abAB0é.|"
PIECES = ["a", "b", "A", "é", "0", ".", "\\.", "[ab]", "[^a]", "\\d", "(a|b)", "(?i)a", "\\Qa|\\E", "|", "$"]
QUANTIFIERS = ["", "", "", "*", "+", "?", "{2}", "{0,1}"]


def random_pattern(rng: random.Random) -> str:
    """Anchored or not, literal runs, classes, groups, alternatives, flags, quoted text."""
    while True:
        pattern = "^" if rng.random() < 0.6 else ""
        for _ in range(rng.randint(0, 5)):
            pattern += rng.choice(PIECES) + rng.choice(QUANTIFIERS)
        if valid_pattern(pattern):
            return pattern


def random_text(rng: random.Random) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 6)))


@pytest.mark.parametrize(
    ("pattern", "prefix"),
    [
        ("^abc", "abc"),
        ("^abc$", "abc"),
        ("^JOB_[0-9]+$", "JOB_"),
        ("^JOB_.*", "JOB_"),
        ("^ab*c", "a"),  # b is optional
        ("^ab+c", "a"),  # not proven past a quantifier: less is enough
        ("^ab{2}", "a"),
        ("^ab?", "a"),
        ("^ab(?i)cd", "ab"),
        ("^é[a-z]", "é"),
        ("^x y,z", "x y,z"),
        ("^w000123$", "w000123"),
        ("abc", ""),  # not anchored
        ("^a|b", ""),  # b anywhere
        ("^ab(c|d)", ""),  # any | at all: none
        ("^a\\Q|\\E", ""),
        ("^(?i)abc", ""),  # A or a
        ("(?i)^abc", ""),
        ("(?m)^abc", ""),
        ("\\Aabc", ""),  # anchored, but not spelled ^: none, which is allowed
        ("^(abc)?d", ""),
        ("^\\.x", ""),
        ("^", ""),
        ("^$", ""),
        ("", ""),
    ],
)
def test_literal_prefix(pattern: str, prefix: str) -> None:
    assert literal_prefix(check_pattern(pattern)) == prefix


def test_every_value_a_pattern_matches_starts_with_its_literal_prefix() -> None:
    rng = random.Random(5)
    checked = 0
    for _ in range(3000):
        pattern = random_pattern(rng)
        prefix = literal_prefix(pattern)
        for _ in range(20):
            text = prefix + random_text(rng) if prefix and rng.random() < 0.5 else random_text(rng)
            if holds("str-regex", pattern, text):
                assert text.startswith(prefix), (pattern, prefix, text)
                checked += bool(prefix)
    assert checked > 500


def _agree(matcher: CountingMatcher, linear: LinearMatcher, publications: list[Publication]) -> None:
    for publication in publications:
        assert sorted(matcher.match(publication, NOW)) == sorted(linear.match(publication, NOW)), publication  # type: ignore[type-var]


def _publications(rng: random.Random, count: int) -> list[Publication]:
    publications = []
    for _ in range(count):
        fields: dict[str, int | str] = {"n": rng.randint(0, 3)}
        if rng.random() < 0.9:
            fields["s"] = random_text(rng) if rng.random() < 0.8 else rng.randint(0, 3)
        publications.append(Publication("c", fields))
    return publications


@pytest.mark.parametrize("set_min", [2, 16])
def test_random_patterns_agree_with_the_oracle_as_they_come_and_go(
    set_min: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(attribute_index, "SET_MIN", set_min)
    rng = random.Random(set_min)
    matcher, linear = CountingMatcher(), LinearMatcher()
    publications = _publications(rng, 60)
    live: list[int] = []
    for n in range(700):
        predicates = [Predicate("s", "str-regex", random_pattern(rng))]
        if rng.random() < 0.5:
            predicates.append(Predicate("n", "<", rng.randint(0, 4)))
        subscription = Filter("c", tuple(predicates))
        matcher.add(n, subscription)
        linear.add(n, subscription)
        live.append(n)
        if rng.random() < 0.2:
            gone = live.pop(rng.randrange(len(live)))
            matcher.remove(gone)
            linear.remove(gone)
        if n % 50 == 0:
            _agree(matcher, linear, publications)
    _agree(matcher, linear, publications)


def test_sets_are_few_and_cover_the_unanchored_patterns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attribute_index, "SET_MIN", 4)
    matcher = CountingMatcher()
    for n in range(1000):
        matcher.add(n, Filter("c", (Predicate("s", "str-regex", f"x{n}y"),)))
    regexes = matcher._classes["c"].attributes["s"].texts["str-regex"]
    assert isinstance(regexes, attribute_index._Regexes)
    sizes = [level.end - level.start for level in regexes.levels]
    assert len(sizes) <= math.log2(1000 / 4) + 1, sizes
    assert sum(sizes) + (1000 - regexes.levels[-1].end) == 1000
    assert all(level.set is not None for level in regexes.levels)
    assert matcher.match(Publication("c", {"s": "ax517yb"}), NOW) == [517]


def test_patterns_RE2_cannot_set_together_are_searched_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attribute_index, "SET_MIN", 4)
    monkeypatch.setattr(regex, "SET_MEM", 1 << 10)  # too little for any set
    assert PatternSet.of(["a", "b"]) is None
    rng = random.Random(9)
    matcher, linear = CountingMatcher(), LinearMatcher()
    for n in range(100):
        subscription = Filter("c", (Predicate("s", "str-regex", random_pattern(rng)),))
        matcher.add(n, subscription)
        linear.add(n, subscription)
    regexes = matcher._classes["c"].attributes["s"].texts["str-regex"]
    assert isinstance(regexes, attribute_index._Regexes)
    assert regexes.levels and all(level.set is None for level in regexes.levels)
    _agree(matcher, linear, _publications(rng, 100))


def test_a_set_out_of_memory_for_a_value_falls_back_to_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """RE2::Set answers nothing when its DFA runs out of memory; the always-matching pattern in every
    set tells that apart from no match (here the failure is simulated: it needs a huge set)."""
    monkeypatch.setattr(attribute_index, "SET_MIN", 4)
    real = PatternSet(lambda data: [])  # what RE2 answers then: not even the sentinel
    assert real.matches(b"anything") is None
    assert PatternSet.of(["x", "y"]).matches(b"zz") == []  # type: ignore[union-attr]
    rng = random.Random(10)
    matcher, linear = CountingMatcher(), LinearMatcher()
    for n in range(100):
        subscription = Filter("c", (Predicate("s", "str-regex", random_pattern(rng)),))
        matcher.add(n, subscription)
        linear.add(n, subscription)
    monkeypatch.setattr(PatternSet, "matches", lambda self, data: None)
    _agree(matcher, linear, _publications(rng, 100))


def test_a_matcher_with_patterns_survives_a_snapshot(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broker's snapshot pickles its matcher: the compiled patterns and sets are made again."""
    monkeypatch.setattr(attribute_index, "SET_MIN", 4)
    rng = random.Random(12)
    matcher, linear = CountingMatcher(), LinearMatcher()
    for n in range(200):
        subscription = Filter("c", (Predicate("s", "str-regex", random_pattern(rng)),))
        matcher.add(n, subscription)
        linear.add(n, subscription)
    for n in range(0, 200, 3):
        matcher.remove(n)
        linear.remove(n)
    restored = pickle.loads(pickle.dumps(matcher))
    publications = _publications(rng, 100)
    _agree(restored, linear, publications)
    restored.add(1000, Filter("c", (Predicate("s", "str-regex", "b"),)))
    linear.add(1000, Filter("c", (Predicate("s", "str-regex", "b"),)))
    _agree(restored, linear, publications)
