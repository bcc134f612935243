"""Overlap may err towards yes and covering towards no, never the other way: checked on values."""

from __future__ import annotations

import random

import pytest

from broker.language import Filter, Predicate, Publication, Var, parse_filter, parse_publication
from broker.language.operators import holds
from broker.routing.relations import (
    Fit,
    advertisement_covers,
    fits,
    overlaps,
    predicate_covers,
    predicate_overlaps,
    subscription_covers,
)
from tests.matching.random_messages import NUMBERS, STRINGS, random_predicate

PROBES = [*NUMBERS, *STRINGS, 1.5, 2.0001, 99.9, -100, "abd", "ab\0", "IBMX", "a\U0010ffff", "aa", "b\0"]


def test_overlap_and_covering_are_sound_on_random_predicates() -> None:
    rng = random.Random(5)
    said_overlap = said_cover = 0
    for _ in range(20000):
        a = random_predicate(rng, "x", variables=True)
        b = random_predicate(rng, "x", variables=True)
        both = [v for v in PROBES if holds(a.op, a.value, v) and holds(b.op, b.value, v)]
        if both:
            assert predicate_overlaps(a, b), (str(a), str(b), both[0])
        if predicate_overlaps(a, b):
            said_overlap += 1
        if predicate_covers(a, b):
            said_cover += 1
            escaped = [v for v in PROBES if holds(b.op, b.value, v) and not holds(a.op, a.value, v)]
            assert not escaped, (str(a), str(b), escaped[0])
    assert said_cover > 1000 and said_overlap > 5000  # the relations are not trivially no


@pytest.mark.parametrize(
    ("a", "b", "overlap"),
    [
        ("[x,<,10]", "[x,>,5]", True),
        ("[x,<,5]", "[x,>,5]", False),
        ("[x,<=,5]", "[x,>=,5]", True),
        ("[x,<,5]", "[x,>=,5]", False),
        ("[x,=,5]", "[x,<>,5]", False),
        ("[x,<>,5]", "[x,<>,6]", True),
        ("[x,=,5]", "[x,eq,'5']", False),
        ("[x,str-prefix,'IB']", "[x,str-prefix,'I']", True),
        ("[x,str-prefix,'IB']", "[x,str-prefix,'IC']", False),
        ("[x,str-prefix,'IB']", "[x,eq,'IBM']", True),
        ("[x,str-prefix,'IB']", "[x,str-lt,'IB']", False),
        ("[x,str-prefix,'IB']", "[x,str-le,'IB']", True),
        ("[x,neq,'a']", "[x,eq,'a']", False),
        ("[x,str-postfix,'.xml']", "[x,str-contains,'abc']", True),
        ("[x,isPresent,0]", "[x,>,5]", True),
        ("[x,isPresent,'']", "[x,>,5]", False),
    ],
)
def test_predicate_overlap_table(a: str, b: str, overlap: bool) -> None:
    pa, pb = (parse_filter(f"[class,eq,c],{t}").predicates[0] for t in (a, b))
    assert predicate_overlaps(pa, pb) is overlap
    assert predicate_overlaps(pb, pa) is overlap


@pytest.mark.parametrize(
    ("wide", "narrow", "covers"),
    [
        ("[x,>,50]", "[x,>=,51]", True),
        ("[x,>=,51]", "[x,>,50]", False),  # 50.5: numbers are real
        ("[x,>,50]", "[x,>,50]", True),
        ("[x,>=,50]", "[x,>,50]", True),
        ("[x,>,50]", "[x,>=,50]", False),
        ("[x,<>,5]", "[x,>,5]", True),
        ("[x,<>,5]", "[x,>=,5]", False),
        ("[x,str-prefix,'I']", "[x,str-prefix,'IB']", True),
        ("[x,str-prefix,'IB']", "[x,str-prefix,'I']", False),
        ("[x,str-contains,'B']", "[x,str-prefix,'IBM']", True),
        ("[x,str-postfix,'ml']", "[x,str-postfix,'.xml']", True),
        ("[x,isPresent,'']", "[x,str-postfix,'.xml']", True),
        ("[x,isPresent,0]", "[x,str-postfix,'.xml']", False),
    ],
)
def test_predicate_covering_table(wide: str, narrow: str, covers: bool) -> None:
    pw, pn = (parse_filter(f"[class,eq,c],{t}").predicates[0] for t in (wide, narrow))
    assert predicate_covers(pw, pn) is covers


def test_filter_relations() -> None:
    adv = parse_filter("[class,eq,stock],[price,<,100],[amount,>,100]")
    assert overlaps(parse_filter("[class,eq,stock],[price,<,100]"), adv)
    assert not overlaps(parse_filter("[class,eq,stock],[price,>,100],[amount,>,100]"), adv)
    assert not overlaps(parse_filter("[class,eq,stock],[volume,>,1]"), adv)  # not advertised
    assert not overlaps(parse_filter("[class,eq,bond]"), adv)
    assert overlaps(parse_filter("[class,eq,stock],[time,>,now-1h]"), adv)  # time is the broker's
    wide = parse_filter("[class,eq,stock],[price,<,100]")
    narrow = parse_filter("[class,eq,stock],[price,<,50],[amount,>,1]")
    assert subscription_covers(wide, narrow) and not subscription_covers(narrow, wide)
    assert advertisement_covers(adv, parse_filter("[class,eq,stock],[price,<,50]"))
    assert not advertisement_covers(parse_filter("[class,eq,stock],[price,<,50]"), adv)
    assert fits(parse_publication("[class,stock],[price,80]"), adv)
    assert not fits(parse_publication("[class,stock],[price,80],[volume,5]"), adv)
    assert not fits(parse_publication("[class,stock],[price,180]"), adv)


def test_a_compiled_fit_says_what_the_advertisement_says_on_random_publications() -> None:
    """``Fit`` (compiled once per advertisement) against the definition: every attribute of the
    publication advertised, and its predicate holds."""
    rng = random.Random(7)
    said_yes = 0
    for _ in range(5000):
        names = rng.sample("abc", rng.randint(0, 3))
        advertisement = Filter("c", tuple(random_predicate(rng, name, variables=True) for name in names))
        publication = Publication(
            rng.choice(["c", "c", "d"]), [(name, rng.choice(PROBES)) for name in rng.sample("abcd", 2)]
        )
        expected = publication.cls == advertisement.cls and all(
            name in advertisement and holds(advertisement[name].op, advertisement[name].value, value)
            for name, value in publication.fields.items()
        )
        assert Fit.of(advertisement)(publication) == expected, (str(advertisement), str(publication))
        said_yes += expected
    assert said_yes > 20  # the relation is not trivially no


def test_variables_overlap_by_type() -> None:
    s = Predicate("g", "eq", "x")
    var_s = Predicate("g", "eq", Var("S", "X"))
    var_i = Predicate("g", "=", Var("I", "X"))
    assert predicate_overlaps(var_s, s)
    assert not predicate_overlaps(var_i, s)
