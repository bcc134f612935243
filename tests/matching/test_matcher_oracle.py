"""The counting matcher must agree with the literal oracle on everything."""

from __future__ import annotations

import random

import pytest

from broker.matching import LinearMatcher, Matcher
from tests.matching.random_messages import random_filter, random_publication

NOW = 1_800_000_000.0


@pytest.mark.parametrize("seed", range(4))
def test_agrees_with_oracle_on_random_filters(seed: int) -> None:
    rng = random.Random(seed)
    fast, slow = Matcher(), LinearMatcher()
    for i in range(1500):
        f = random_filter(rng, variables=True, timed=True)
        fast.add(i, f)
        slow.add(i, f)
    matched = 0
    for _ in range(400):
        p = random_publication(rng)
        expected = slow.match(p, NOW)
        assert fast.match(p, NOW) == expected, str(p)
        matched += len(expected)
    assert matched > 400  # the vocabulary is small enough for matches to be common


def test_agrees_while_adding_and_removing() -> None:
    """Interleaved changes exercise the pending lists, merges, dead slots and compaction."""
    rng = random.Random(99)
    fast, slow = Matcher(), LinearMatcher()
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
            assert fast.match(p, NOW) == slow.match(p, NOW), (step, str(p))
    assert len(fast) == len(slow) == len(live)


def test_bulk_path_agrees() -> None:
    """Enough satisfied predicates per publication to take the NumPy counting path."""
    rng = random.Random(7)
    fast, slow = Matcher(), LinearMatcher()
    for i in range(20000):
        f = random_filter(rng)
        fast.add(i, f)
        slow.add(i, f)
    for _ in range(30):
        p = random_publication(rng)
        assert fast.match(p, NOW) == slow.match(p, NOW), str(p)
