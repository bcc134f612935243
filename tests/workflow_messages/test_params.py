"""Run parameters: values of each type, declarations, and the Trigger's ``params`` attribute."""

from __future__ import annotations

from datetime import date

import pytest

from broker.language import Publication, parse_publication
from broker.routing.relations import fits
from workflow_messages import PARAMS, Param, resolve, trigger, trigger_advertisement, trigger_params
from workflow_messages.params import (
    decode_params,
    encode_params,
    param_environment,
    parse_assignment,
    parse_declarations,
    parse_value,
)


@pytest.mark.parametrize(
    ("kind", "text", "canonical"),
    [
        ("string", " as is ", " as is "),
        ("string", "", ""),
        ("int", "007", "7"),
        ("int", "-3", "-3"),
        ("int", "+12 ", "12"),
        ("float", "1.50", "1.5"),
        ("float", "1e3", "1000.0"),
        ("float", ".5", "0.5"),
        ("bool", "TRUE", "true"),
        ("bool", "yes", "true"),
        ("bool", "0", "false"),
        ("date", "2026-11-23", "2026-11-23"),
    ],
)
def test_a_value_is_written_canonically(kind: str, text: str, canonical: str) -> None:
    assert parse_value(kind, text) == canonical


@pytest.mark.parametrize(
    ("kind", "text", "fragment"),
    [
        ("int", "1.5", "is not an integer"),
        ("int", "", "is not an integer"),
        ("float", "nan", "is not a finite number"),
        ("float", "1e999", "is not a finite number"),
        ("bool", "maybe", "is not true or false"),
        ("date", "2026-02-30", "is not a date YYYY-MM-DD"),
        ("date", "20261123", "is not a date YYYY-MM-DD"),
        ("string", "a\x00b", "NUL"),
        ("string", "x" * 5000, "longer than 4096"),
        ("blob", "x", "unknown parameter type 'blob'"),
    ],
)
def test_a_value_not_of_its_type_is_one_line(kind: str, text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment) as caught:
        parse_value(kind, text)
    assert "\n" not in str(caught.value)


DECLARED = (Param("REGION", "string", "eu"), Param("LIMIT", "int"), Param("DRY", "bool", "false"))


def test_resolve_fills_defaults_in_declaration_order() -> None:
    assert list(resolve(DECLARED, {"LIMIT": "05"}).items()) == [
        ("REGION", "eu"),
        ("LIMIT", "5"),
        ("DRY", "false"),
    ]
    assert resolve(DECLARED, {"LIMIT": "1", "DRY": "yes", "REGION": "us"}) == {
        "REGION": "us",
        "LIMIT": "1",
        "DRY": "true",
    }
    assert resolve((), {}) == {}


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"LIMIT": "1", "COLOR": "red"}, "unknown parameter COLOR (declared: REGION, LIMIT, DRY)"),
        ({}, "required parameter LIMIT (int) not given"),
        ({"LIMIT": "many"}, "parameter LIMIT (int): 'many' is not an integer"),
    ],
)
def test_resolve_refuses_unknown_missing_and_mistyped(given: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError) as caught:
        resolve(DECLARED, given)
    assert str(caught.value) == message


def test_assignments() -> None:
    assert parse_assignment("A=b=c") == ("A", "b=c")
    assert parse_assignment("A=") == ("A", "")
    for bad in ("A", "9A=1", "A-B=1", "=1"):
        with pytest.raises(ValueError):
            parse_assignment(bad)


def test_the_trigger_carries_them_as_one_string_that_parses_back_and_fits_its_advertisement() -> None:
    awkward = {"NOTE": 'it\'s "quoted"\nand multi-line, ü', "N": "1"}
    published = trigger("W", "g1", date(2026, 11, 23), params=awkward)
    assert published[PARAMS] == encode_params(awkward)
    assert "\n" not in str(published[PARAMS]) and "'" not in str(published[PARAMS])
    again = parse_publication(str(published))
    assert again == published and trigger_params(again) == awkward
    signed = Publication("Trigger", {**again.fields, "signer": "s", "signature": "x", "sequence": 1})
    assert fits(signed, trigger_advertisement())
    assert PARAMS not in trigger("W", "g1", date(2026, 11, 23)).fields  # none: the old shape
    assert trigger_params(trigger("W", "g1", date(2026, 11, 23))) == {}


@pytest.mark.parametrize(
    "garbled",
    ["not json", "[1, 2]", '{"A": 1}', '{"bad-name": "x"}', "{" * 5000, 17],
)
def test_garbled_params_are_a_one_line_error(garbled: object) -> None:
    with pytest.raises(ValueError) as caught:
        trigger_params(Publication("Trigger", {"applname": "W", "GID": "g", PARAMS: garbled}))  # type: ignore[dict-item]
    assert "\n" not in str(caught.value)
    with pytest.raises(ValueError):
        decode_params(garbled)


def test_declarations_of_a_deploy_are_checked() -> None:
    assert parse_declarations(None) == ()
    records = [{"name": "A", "type": "int", "default": "1"}, {"name": "B"}]
    assert parse_declarations(records) == (Param("A", "int", "1"), Param("B"))
    for bad in (
        [{"name": "A", "type": "int", "default": "x"}],
        [{"name": "A"}, {"name": "A"}],
        "A",
        [{"type": "int"}],
    ):
        with pytest.raises(ValueError):
            parse_declarations(bad)


def test_the_environment_of_a_run() -> None:
    assert param_environment({"REGION": "eu", "DRY": "false"}) == {
        "WFM_PARAM_REGION": "eu",
        "WFM_PARAM_DRY": "false",
    }
