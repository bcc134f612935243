"""A publication's checks, which its constructor's fast paths (every broker and client runs it for
every publication) must keep: numbers in range and finite, names valid and not reserved even once
other names are known, no attribute twice, attributes sorted whatever the input's order."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from broker.language import Publication
from broker.language.values import MAX_EXACT


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), float(2**60), -float(2**60)])
def test_a_float_that_is_not_finite_or_out_of_range_is_refused(value: float) -> None:
    with pytest.raises(ValueError, match=r"finite|out of range"):
        Publication("c", [("x", value)])


@pytest.mark.parametrize(
    ("value", "kept"),
    [(1.5, 1.5), (-0.25, -0.25), (3.0, 3), (float(MAX_EXACT), MAX_EXACT), (-float(MAX_EXACT), -MAX_EXACT)],
)
def test_a_float_in_range_is_kept_and_an_integral_one_becomes_an_int(value: float, kept: float) -> None:
    got = Publication("c", [("x", value)])["x"]
    assert got == kept and type(got) is type(kept)


@pytest.mark.parametrize("name", ["class", "time", "1bad", "a b"])
def test_a_reserved_or_bad_name_is_refused_after_good_names_were_seen(name: str) -> None:
    Publication("c", [("seq", 1), ("pad", "x")])  # known names take the fast path
    with pytest.raises(ValueError):
        Publication("c", [("seq", 1), (name, 2)])


def test_an_attribute_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="more than once"):
        Publication("c", [("seq", 1), ("seq", 2)])


@pytest.mark.parametrize(
    "attributes",
    [
        [("z", 1), ("a", 2), ("m", "s")],
        [("a", 2), ("m", "s"), ("z", 1)],
        {"z": 1, "a": 2, "m": "s"},
        MappingProxyType({"m": "s", "z": 1, "a": 2}),
        (pair for pair in [("m", "s"), ("z", 1), ("a", 2)]),
    ],
)
def test_attributes_are_sorted_whatever_the_input(attributes: object) -> None:
    publication = Publication("c", attributes)  # type: ignore[arg-type]
    assert list(publication.fields) == ["a", "m", "z"]
    assert publication == Publication("c", {"a": 2, "m": "s", "z": 1})
