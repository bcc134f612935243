"""The incremental build and the counting of failed sorted predicates, against the oracle.

A bulk add leaves the sorted indexes pending; each publication merges what ``SETTLE_BUDGET``
allows (a number costs 1, a string ``STRING_COST``) and scans the rest. A tiny budget here keeps
indexes half-merged for many publications, so that every mix of sorted, pending and removed
entries is met.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.language import Filter, Predicate, Publication, parse_filter, parse_publication
from broker.matching import LinearMatcher, Matcher, matcher
from broker.matching.bounds import STRING_COST
from tests.matching.random_messages import random_filter, random_publication

NOW = 1_800_000_000.0


@pytest.fixture
def small_budget() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(matcher, "SETTLE_BUDGET", STRING_COST + 4)
        yield


def test_a_publication_right_after_a_bulk_add_sees_every_subscription(small_budget: None) -> None:
    m = Matcher()
    for i in range(500):
        m.add(i, parse_filter(f"[class,eq,s],[x,>=,{i}],[name,str-ge,'{i:04}']"))
    assert m.match(parse_publication("[class,s],[x,1000],[name,'9']"), NOW) == set(range(500))
    assert m.match(parse_publication("[class,s],[x,250],[name,'0100']"), NOW) == set(range(101))
    assert m.match(parse_publication("[class,s],[x,250],[name,'9']"), NOW) == set(range(251))
    attributes = m._classes["s"].attributes.values()
    pending = sum(len(bounds.pending_keys) for index in attributes for bounds in index.bounds)
    assert pending == 2 * 500 - 3 * (1 + 4)  # three publications, each one string and four numbers


def test_removals_while_entries_are_pending(small_budget: None) -> None:
    m = Matcher()
    for i in range(100):
        m.add(i, parse_filter(f"[class,eq,s],[x,<,{i}]"))
    m.match(parse_publication("[class,s],[x,50]"), NOW)  # some merged, the rest pending
    for i in range(0, 100, 2):
        m.remove(i)
    assert m.match(parse_publication("[class,s],[x,50]"), NOW) == set(range(51, 100, 2))
    for i in range(0, 100, 2):
        m.add(f"again {i}", parse_filter(f"[class,eq,s],[x,<,{i}]"))
    assert m.match(parse_publication("[class,s],[x,95]"), NOW) == {97, 99, "again 96", "again 98"}


def test_failed_side_counts_missing_attributes_and_other_types() -> None:
    """Most order predicates hold, so the failed side is counted: a publication lacking an
    attribute, or carrying a string where the filters compare numbers, must still fail them."""
    m, oracle = Matcher(), LinearMatcher()
    for i in range(400):
        f = Filter("s", (Predicate("x", ">=", i % 10), Predicate("y", "<=", 1000 - i % 7)))
        m.add(i, f)
        oracle.add(i, f)
    m.add("eq", parse_filter("[class,eq,s],[x,>=,0],[z,eq,'a']"))
    oracle.add("eq", parse_filter("[class,eq,s],[x,>=,0],[z,eq,'a']"))
    for text, size in [
        ("[class,s],[x,9],[y,0]", 400),
        ("[class,s],[x,9]", 0),  # y missing
        ("[class,s],[x,9],[y,'0']", 0),  # y is a string
        ("[class,s],[x,5],[y,995],[z,'a']", 207),
    ]:
        p = parse_publication(text)
        assert m.match(p, NOW) == oracle.match(p, NOW), text
        assert len(oracle.match(p, NOW)) == size, text


@pytest.mark.parametrize("op", ["str-prefix", "str-postfix", "str-contains"])
def test_failed_side_of_text_operators(op: str) -> None:
    """Texts are runs of a sorted index; the keys before, between and after the runs fail."""
    m, oracle = Matcher(), LinearMatcher()
    affixes = ["", "a", "ab", "abc", "b", "ba", "c"]
    for i in range(700):
        f = Filter("s", (Predicate("x", ">=", i % 3), Predicate("t", op, affixes[i % len(affixes)])))
        m.add(i, f)
        oracle.add(i, f)
    for value in ["abc", "cba", "ba", "zz", ""]:
        p = Publication("s", {"x": 5, "t": value})
        assert m.match(p, NOW) == oracle.match(p, NOW), value


def _order_heavy_filter(rng: random.Random) -> Filter:
    """Mostly order predicates, wide or narrow, so that both sides get counted."""
    f = random_filter(rng)
    ops = ["<", "<=", ">", ">="]
    extra = [Predicate(a, rng.choice(ops), rng.randint(-5, 105)) for a in ("p", "q") if rng.random() < 0.7]
    return Filter(f.cls, f.predicates + tuple(extra))


def _publication(rng: random.Random) -> Publication:
    p = random_publication(rng)
    fields = dict(p.fields)
    for a in ("p", "q"):
        if rng.random() < 0.8:
            fields[a] = rng.randint(-10, 110)
    return Publication(p.cls, fields)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "add", "bulk", "remove", "match"]), st.integers(0, 2**32))))
def test_agrees_with_oracle_under_random_interleavings(steps: list[tuple[str, int]]) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(matcher, "SETTLE_BUDGET", 2 * STRING_COST + 5)
        fast, slow = Matcher(), LinearMatcher()
        live: list[tuple[int, int]] = []
        for n, (kind, seed) in enumerate(steps):
            rng = random.Random(seed)
            if kind in ("add", "bulk"):
                for k in range(1 if kind == "add" else 200):
                    f = _order_heavy_filter(rng)
                    fast.add((n, k), f)
                    slow.add((n, k), f)
                    live.append((n, k))
            elif kind == "remove" and live:
                victim = live.pop(seed % len(live))
                fast.remove(victim)
                slow.remove(victim)
            else:
                p = _publication(rng)
                assert fast.match(p, NOW) == slow.match(p, NOW), str(p)


@pytest.mark.parametrize("budget", [0, 32_768])
def test_a_string_with_a_trailing_nul_is_not_its_prefix(budget: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pending entries are scanned with NumPy, whose own strings drop trailing NULs."""
    monkeypatch.setattr(matcher, "SETTLE_BUDGET", budget)
    m, oracle = Matcher(), LinearMatcher()
    texts = ["[class,eq,s],[c,eq,a]", "[class,eq,s],[c,neq,a]", "[class,eq,s],[c,str-le,a]"]
    for i, text in enumerate(texts):
        m.add(i, parse_filter(text))
        oracle.add(i, parse_filter(text))
    publication = Publication("s", {"c": "a\x00"})
    assert m.match(publication, 0) == oracle.match(publication, 0) == {1}
