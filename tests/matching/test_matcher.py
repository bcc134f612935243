"""The Matcher's contract, case by case; the random agreement with the oracle is in test_matcher_oracle."""

from __future__ import annotations

import pytest

from broker.language import parse_composite, parse_filter, parse_publication
from broker.matching import LinearMatcher, Matcher, matches

NOW = 1_800_000_000.0  # 2027-01-15


@pytest.fixture(params=[Matcher, LinearMatcher], ids=["counting", "oracle"])
def matcher(request: pytest.FixtureRequest) -> Matcher:
    return request.param()  # type: ignore[no-any-return]


# (filter, publication, matches?)
CASES = [
    # PADRES examples: a publication may carry extra attributes, but needs every filter attribute
    ("[class,eq,stock],[price,<,100]", "[class,stock],[price,80]", True),
    ("[class,eq,stock],[price,>,100],[amount,>,100]", "[class,stock],[price,120]", False),
    ("[class,eq,stock],[price,>,100]", "[class,stock],[price,120],[amount,5]", True),
    ("[class,eq,stock]", "[class,stock],[price,120]", True),
    ("[class,eq,stock]", "[class,bond],[price,120]", False),
    ("[class,eq,stock],[symbol,str-prefix,'IB']", "[class,stock],[symbol,IBM]", True),
    ("[class,eq,stock],[symbol,str-prefix,'IB']", "[class,stock],[symbol,XIBM]", False),
    # numbers compare numerically whatever their written form
    ("[class,eq,s],[price,>,100]", "[class,s],[price,100.5]", True),
    ("[class,eq,s],[price,=,100]", "[class,s],[price,100.0]", True),
    ("[class,eq,s],[price,=,100.3]", "[class,s],[price,100.30]", True),
    ("[class,eq,s],[price,>,100]", "[class,s],[price,100]", False),
    ("[class,eq,s],[price,>=,100]", "[class,s],[price,100]", True),
    ("[class,eq,s],[price,<,100]", "[class,s],[price,99.99999]", True),
    ("[class,eq,s],[price,<=,-1]", "[class,s],[price,-1.0]", True),
    ("[class,eq,s],[price,<>,1]", "[class,s],[price,2]", True),
    ("[class,eq,s],[price,<>,1]", "[class,s],[price,1.0]", False),
    # a numeric operator never matches a string, nor a string operator a number
    ("[class,eq,s],[price,<>,1]", "[class,s],[price,'1']", False),
    ("[class,eq,s],[price,<,100]", "[class,s],[price,'50']", False),
    ("[class,eq,s],[x,neq,'1']", "[class,s],[x,1]", False),
    ("[class,eq,s],[x,neq,'1']", "[class,s],[x,'2']", True),
    ("[class,eq,s],[x,eq,'1']", "[class,s],[x,1]", False),
    # string order is by code point
    ("[class,eq,s],[x,str-lt,'b']", "[class,s],[x,'abc']", True),
    ("[class,eq,s],[x,str-lt,'b']", "[class,s],[x,'b']", False),
    ("[class,eq,s],[x,str-le,'b']", "[class,s],[x,'b']", True),
    ("[class,eq,s],[x,str-gt,'b']", "[class,s],[x,'b']", False),
    ("[class,eq,s],[x,str-gt,'b']", "[class,s],[x,'b ']", True),
    ("[class,eq,s],[x,str-ge,'b']", "[class,s],[x,'b']", True),
    ("[class,eq,s],[x,str-gt,'Z']", "[class,s],[x,'a']", True),
    ("[class,eq,s],[x,str-postfix,'.xml']", "[class,s],[x,'a.xml']", True),
    ("[class,eq,s],[x,str-postfix,'.xml']", "[class,s],[x,'a.xmls']", False),
    ("[class,eq,s],[x,str-contains,'b c']", "[class,s],[x,'ab cd']", True),
    ("[class,eq,s],[x,str-contains,'']", "[class,s],[x,'']", True),
    ("[class,eq,s],[x,str-prefix,'']", "[class,s],[x,'anything']", True),
    # isPresent checks existence and type
    ("[class,eq,s],[x,isPresent,0]", "[class,s],[x,-7.5]", True),
    ("[class,eq,s],[x,isPresent,0]", "[class,s],[x,'7']", False),
    ("[class,eq,s],[x,isPresent,'']", "[class,s],[x,'7']", True),
    ("[class,eq,s],[x,isPresent,'']", "[class,s],[y,'7']", False),
]


@pytest.mark.parametrize(("text", "publication", "expected"), CASES)
def test_cases(matcher: Matcher, text: str, publication: str, expected: bool) -> None:
    matcher.add("s", parse_filter(text))
    assert matcher.match(parse_publication(publication), NOW) == ({"s"} if expected else set())


def test_variables_in_atoms_match_by_type() -> None:
    composite = parse_composite("{{[class,eq,a],[g,eq,$S$X],[n,=,$I$N]}&{[class,eq,b],[f,=,$F$F]}}")
    first, second = (atom.filter for atom in composite.atoms())
    m = Matcher()
    m.add(1, first)
    m.add(2, second)
    assert m.match(parse_publication("[class,a],[g,'g1'],[n,3]")) == {1}
    assert m.match(parse_publication("[class,a],[g,'g1'],[n,3.5]")) == set()  # $I$ wants an integer
    assert m.match(parse_publication("[class,a],[g,5],[n,3]")) == set()
    assert m.match(parse_publication("[class,b],[f,3.5]")) == {2}
    assert m.match(parse_publication("[class,b],[f,'x']")) == set()


def test_time_predicates_use_the_given_now(matcher: Matcher) -> None:
    matcher.add("recent", parse_filter("[class,eq,T],[time,>,now-1h]"))
    matcher.add("before", parse_filter("[class,eq,T],[time,<,'2027-01-01']"))
    matcher.add("after", parse_filter("[class,eq,T],[time,>=,'2027-01-01T00:00:00Z']"))
    p = parse_publication("[class,T]")
    assert matcher.match(p, now=NOW) == {"recent", "after"}
    assert matcher.match(p, now=1_700_000_000.0) == {"recent", "before"}


def test_without_now_the_pinned_matcher_takes_the_publication_as_published_now() -> None:
    m = Matcher()
    m.add("recent", parse_filter("[class,eq,T],[time,>,now-1h]"))
    m.add("past", parse_filter("[class,eq,T],[time,<,'2020-01-01']"))
    assert m.match(parse_publication("[class,T]")) == {"recent"}


def test_add_remove_and_errors(matcher: Matcher) -> None:
    f = parse_filter("[class,eq,s],[x,>,1]")
    matcher.add(("tuple", 1), f)
    with pytest.raises(ValueError, match="already in use"):
        matcher.add(("tuple", 1), f)
    matcher.remove(("tuple", 1))
    with pytest.raises(KeyError):
        matcher.remove(("tuple", 1))
    with pytest.raises(KeyError):
        matcher.remove("never added")
    assert matcher.match(parse_publication("[class,s],[x,2]"), NOW) == set()
    matcher.add(("tuple", 1), f)  # the id is free again
    assert matcher.match(parse_publication("[class,s],[x,2]"), NOW) == {("tuple", 1)}
    assert len(matcher) == 1


def test_rejects_what_is_not_a_filter() -> None:
    with pytest.raises(TypeError):
        Matcher().add("s", "[class,eq,s]")  # type: ignore[arg-type]


def test_compaction_keeps_ids_and_filters() -> None:
    m = Matcher()
    for i in range(1000):
        m.add(i, parse_filter(f"[class,eq,s],[x,>=,{i}]"))
    for i in range(0, 1000, 1):
        if i % 10:
            m.remove(i)
    assert len(m) == 100
    assert m.match(parse_publication("[class,s],[x,55]")) == {0, 10, 20, 30, 40, 50}
    assert m.get(990) == parse_filter("[class,eq,s],[x,>=,990]")
    assert 990 in m and 991 not in m


def test_oracle_function_matches_contract() -> None:
    f = parse_filter("[class,eq,stock],[price,<,100]")
    assert matches(f, parse_publication("[class,stock],[price,80],[volume,1]"), NOW)
    assert not matches(f, parse_publication("[class,stock],[volume,1]"), NOW)
