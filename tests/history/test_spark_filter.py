"""Every operator compiled to Spark agrees with the oracle on the same random data."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest
from pyspark.sql import functions as F

from broker.language import Filter, Predicate, Publication, TimeRef
from broker.language.operators import ALL_OPERATORS, TIME_ATTRIBUTE
from broker.matching.oracle import matches
from tests.history.conftest import land
from tests.matching.random_messages import random_filter, random_publication
from wfm.history.spark_filter import compile_filter
from wfm.history.store import PYTHON_LANDING_BYTES, HistoryStore

# Just before a UTC midnight, so the data spans two date partitions.
NOW = datetime(2026, 3, 1, 0, 30, tzinfo=UTC).timestamp()


def fixed_at(subscription: Filter, now: float) -> Filter:
    """Relative times made absolute at ``now``: the oracle then compares each publication's time."""
    return Filter(
        subscription.cls,
        tuple(
            Predicate(p.attribute, p.op, p.value.absolute(now)) if isinstance(p.value, TimeRef) else p
            for p in subscription.predicates
        ),
    )


def random_rows(seed: int, count: int) -> list[tuple[str, float, Publication]]:
    rng = random.Random(seed)
    # times on a 15-minute grid around NOW, so now-1h, now and now+1h are hit exactly
    return [(f"p{n}", NOW + 900 * rng.randint(-8, 8), random_publication(rng)) for n in range(count)]


@pytest.mark.parametrize("compacted", [False, True], ids=["landing", "table"])
def test_random_filters_match_the_oracle(store: HistoryStore, compacted: bool) -> None:
    rows = random_rows(7, 400)
    land(store, rows[:200])
    if compacted:
        store.compact()
    land(store, rows[200:])  # and some still landing: both halves are read
    rng = random.Random(11)
    filters = [random_filter(rng, variables=True, timed=True) for _ in range(150)]
    used = {p.op for f in filters for p in f.predicates}
    assert used >= ALL_OPERATORS and any(TIME_ATTRIBUTE in f for f in filters)

    frame = store.frame()
    compiled = [compile_filter(f, frame.columns, NOW).alias(f"f{i}") for i, f in enumerate(filters)]
    result = frame.select("id", *compiled).collect()
    assert sorted(r.id for r in result) == sorted(id for id, _, _ in rows)
    by_id = {r.id: r for r in result}
    for i, subscription in enumerate(filters):
        expected = {id for id, time, p in rows if matches(fixed_at(subscription, NOW), p, time)}
        got = {id for id, row in by_id.items() if row[f"f{i}"]}
        assert got == expected, str(subscription)
        if i < 12:  # query() itself: the table through Spark, the landing log through the oracle
            assert {s.id for s in store.query(subscription, now=NOW)} == expected, str(subscription)
        elif i < 16:  # and a landing log too big for Python, through Spark with the table
            store.python_landing_bytes = 0
            assert {s.id for s in store.query(subscription, now=NOW)} == expected, str(subscription)
            store.python_landing_bytes = PYTHON_LANDING_BYTES


def test_query_returns_publications_in_time_order_within_the_window(store: HistoryStore) -> None:
    rows = random_rows(3, 120)
    land(store, rows)
    subscription = Filter("stock", (Predicate("time", ">=", TimeRef(offset=-3600)),))
    since, until = NOW - 7200, NOW + 1800
    got = list(store.query(subscription, since=since, until=until, now=NOW))
    expected = sorted(
        (time, id, p) for id, time, p in rows if p.cls == "stock" and max(since, NOW - 3600) <= time < until
    )
    assert [(s.time, s.id, s.publication) for s in got] == expected
    assert {s.publisher for s in got} == {"tester"}


def test_attribute_names_are_case_sensitive(store: HistoryStore) -> None:
    land(store, [("1", NOW, Publication("x", {"GID": "a"})), ("2", NOW, Publication("x", {"gid": "b"}))])
    store.compact()
    got = store.query(Filter("x", (Predicate("gid", "eq", "b"),)), now=NOW)
    assert [s.id for s in got] == ["2"]
    assert store.frame().where(F.col("s_GID").isNotNull()).count() == 1


def test_str_regex_is_searched_by_re2_not_java(store: HistoryStore) -> None:
    """Spark's ``rlike`` would backtrack for hours on ``(a+)+$`` against 40 a's and a b, and its ``.``
    refuses U+2028; the UDF answers what the broker's matcher does."""
    values = ["a" * 40 + "b", "a" * 40, "a\u2028b", "ab", "Ab"]
    land(store, [(f"p{n}", NOW, Publication("x", {"s": value})) for n, value in enumerate(values)])
    store.compact()
    land(
        store,
        [("late", NOW, Publication("x", {"s": "aab", "n": 1})), ("num", NOW, Publication("x", {"s": 3}))],
    )
    frame = store.frame()
    for pattern in ["(a+)+$", "^a.b$", "(?i)^ab$", "b", ""]:
        subscription = Filter("x", (Predicate("s", "str-regex", pattern),))
        got = {
            r.id for r in frame.where(compile_filter(subscription, frame.columns, NOW)).select("id").collect()
        }
        rows = [*((f"p{n}", v) for n, v in enumerate(values)), ("late", "aab"), ("num", 3)]
        expected = {id for id, value in rows if matches(subscription, Publication("x", {"s": value}), NOW)}
        assert got == expected, pattern
    query = store.query(Filter("x", (Predicate("s", "str-regex", "^a.b$"),)), now=NOW)
    assert {s.id for s in query} == {"p2", "late"}
