"""The counting matcher must agree with the literal oracle on everything.

``CountingMatcher`` answers a list: compared as a multiset, so that an id answered twice fails.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from broker.language import parse_filter, parse_publication
from broker.matching import CountingMatcher, LinearMatcher, Matcher
from tests.matching.random_messages import random_filter, random_publication

NOW = 1_800_000_000.0


@pytest.mark.parametrize("seed", range(4))
def test_agrees_with_oracle_on_random_filters(seed: int) -> None:
    rng = random.Random(seed)
    fast, slow = CountingMatcher(), LinearMatcher()
    for i in range(1500):
        f = random_filter(rng, variables=True, timed=True)
        fast.add(i, f)
        slow.add(i, f)
    matched = 0
    for _ in range(400):
        p = random_publication(rng)
        expected = slow.match(p, NOW)
        assert Counter(fast.match(p, NOW)) == Counter(expected), str(p)
        matched += len(expected)
    assert matched > 400  # the vocabulary is small enough for matches to be common


def test_agrees_while_adding_and_removing() -> None:
    """Interleaved changes exercise the pending lists, merges, dead slots and compaction."""
    rng = random.Random(99)
    fast, slow = CountingMatcher(), LinearMatcher()
    live: list[int] = []
    for step in range(6000):
        if live and rng.random() < 0.45:
            victim = live.pop(rng.randrange(len(live)))
            fast.remove(victim)
            slow.remove(victim)
        else:
            f = random_filter(rng)
            fast.add(step, f)
            slow.add(step, f)
            live.append(step)
        if step % 7 == 0:
            p = random_publication(rng)
            assert Counter(fast.match(p, NOW)) == Counter(slow.match(p, NOW)), (step, str(p))
    assert len(fast) == len(slow) == len(live)


def test_bulk_path_agrees() -> None:
    """Enough satisfied predicates per publication to take the NumPy counting path."""
    rng = random.Random(7)
    fast, slow = CountingMatcher(), LinearMatcher()
    for i in range(20000):
        f = random_filter(rng)
        fast.add(i, f)
        slow.add(i, f)
    for _ in range(30):
        p = random_publication(rng)
        assert Counter(fast.match(p, NOW)) == Counter(slow.match(p, NOW)), str(p)


@pytest.mark.parametrize("x", [5, 400, 995], ids=["few-in-a-dict", "satisfied-side", "failed-side"])
def test_a_filter_of_its_class_alone_is_answered_once(x: int) -> None:
    """A filter with no predicate but its class matches every publication of the class: it is
    answered from its own list, never by the counting too, whichever way the counting goes."""
    m = CountingMatcher()
    m.add("class only", parse_filter("[class,eq,s]"))
    for i in range(1000):
        m.add(i, parse_filter(f"[class,eq,s],[x,>,{i}]"))
    answer = m.match(parse_publication(f"[class,s],[x,{x}]"), NOW)
    assert Counter(answer) == Counter(["class only", *range(x)])


def test_the_pinned_matcher_answers_a_set() -> None:
    m = Matcher()
    m.add("a", parse_filter("[class,eq,s],[x,>,0]"))
    assert m.match(parse_publication("[class,s],[x,1]")) == {"a"}
    assert m.match(parse_publication("[class,t],[x,1]")) == set()
