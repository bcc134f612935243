"""Connections in handshake, counted without I/O: a share per address, and room made in all."""

from __future__ import annotations

from broker.transport.admission import Admission


def test_past_its_share_an_address_is_turned_away() -> None:
    admission: Admission[str] = Admission(limit=10, per_address=2)
    assert admission.begin("a", "a1").admitted and admission.begin("a", "a2").admitted
    third = admission.begin("a", "a3")
    assert not third.admitted and third.evicted is None
    assert third.reason == "2 connections from there in handshake already"
    assert admission.count == 2 and list(admission.by_address["a"]) == ["a1", "a2"]


def test_past_the_limit_the_oldest_of_the_busiest_address_makes_room() -> None:
    admission: Admission[str] = Admission(limit=4, per_address=3)
    for connection, address in [
        ("a1", "a"),
        ("b1", "b"),
        ("b2", "b"),
        ("a2", "a"),
    ]:
        assert admission.begin(address, connection).admitted
    verdict = admission.begin("a", "a3")  # a and b hold two each: the first of them gives way
    assert verdict.admitted and verdict.evicted == "a1"
    assert verdict.reason == "4 connections in handshake: closed the oldest of the busiest address"
    assert admission.count == 4 and {k: list(v) for k, v in admission.by_address.items()} == {
        "a": ["a2", "a3"],
        "b": ["b1", "b2"],
    }


def test_ending_a_handshake_frees_its_place_once() -> None:
    admission: Admission[str] = Admission(limit=4, per_address=2)
    admission.begin("a", "a1")
    admission.end("a1")
    admission.end("a1")  # an evicted connection's handler ends it again
    assert admission.count == 0 and admission.by_address == {}
