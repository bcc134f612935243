"""The filter index may only ever leave out filters that cannot overlap the query."""

from __future__ import annotations

import random

import pytest

from broker.language import parse_filter
from broker.routing.filter_index import FilterIndex
from broker.routing.relations import overlaps
from tests.matching.random_messages import random_filter


@pytest.mark.parametrize("seed", range(5))
def test_candidates_hold_every_overlapping_filter(seed: int) -> None:
    rng = random.Random(seed)
    stored = {f"f{i}": random_filter(rng) for i in range(300)}
    index = FilterIndex()
    for entry, filter_ in stored.items():
        index.add(entry, filter_)
    for entry in rng.sample(sorted(stored), 100):  # and removals keep it exact
        index.remove(entry)
        del stored[entry]
    pruned = 0
    for _ in range(300):
        query = random_filter(rng, variables=True)
        candidates = set(index.candidates(query))
        assert candidates <= stored.keys()
        overlapping = {e for e, f in stored.items() if overlaps(query, f)}
        assert overlapping <= candidates
        pruned += len(stored) - len(candidates)
    assert pruned > 0  # the index does leave filters out


def test_equal_values_select_and_others_are_kept() -> None:
    index = FilterIndex()
    index.add("a", parse_filter("[class,eq,S],[job,eq,A],[g,isPresent,'']"))
    index.add("b", parse_filter("[class,eq,S],[job,eq,B]"))
    index.add("any", parse_filter("[class,eq,S],[job,isPresent,'']"))
    index.add("n", parse_filter("[class,eq,S],[n,=,1]"))
    index.add("other", parse_filter("[class,eq,T],[job,eq,A]"))
    assert set(index.candidates(parse_filter("[class,eq,S],[job,eq,A]"))) == {"a", "any", "n"}
    assert set(index.candidates(parse_filter("[class,eq,S],[n,=,1.0]"))) == {"a", "b", "any", "n"}
    assert set(index.candidates(parse_filter("[class,eq,S],[n,=,2]"))) == {"a", "b", "any"}
    assert set(index.candidates(parse_filter("[class,eq,U]"))) == set()
    index.remove("any")
    assert set(index.candidates(parse_filter("[class,eq,S],[job,eq,A]"))) == {"a", "n"}
