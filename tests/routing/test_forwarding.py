"""What a broker forwards to a neighbour: equal subscriptions travel as one (``Twins``)."""

from __future__ import annotations

import itertools
import random

from broker.language import parse_filter
from broker.routing.forwarding import Twins

TRIGGER = parse_filter("[class,eq,Trigger],[applname,eq,BIG]")
OTHER = parse_filter("[class,eq,Trigger],[applname,eq,TEN]")


def test_equal_entries_travel_once_and_the_last_to_go_retracts_them_whatever_the_order() -> None:
    for seed in range(20):
        twins, order = Twins(), [f"s{i}" for i in range(10)]
        sent = [a for entry in order for a in twins.want("B2", entry, TRIGGER)]
        assert sent == [("send", "s0", TRIGGER)]
        assert twins.held_count() == 9 and twins.wants("B2", "s7")
        random.Random(seed).shuffle(order)
        gone = [twins.unwant("B2", entry) for entry in order]
        # the neighbour knows the group by the id it was sent under, whoever is left in it
        assert gone == [[]] * 9 + [[("retract", "s0", TRIGGER)]], seed
        assert not twins.wants("B2", order[-1]) and twins.held_count() == 0


def test_filters_differ_or_hops_differ_then_each_travels() -> None:
    twins = Twins()
    assert twins.want("B2", "a", TRIGGER) == [("send", "a", TRIGGER)]
    assert twins.want("B2", "b", OTHER) == [("send", "b", OTHER)]
    assert twins.want("B3", "c", TRIGGER) == [("send", "c", TRIGGER)]
    assert twins.want("B2", "a", TRIGGER) == []  # wanted already
    assert twins.unwant("B2", "nobody") == []


def test_an_id_still_on_the_wire_that_comes_back_with_another_filter_renames_its_old_group() -> None:
    twins = Twins()
    twins.want("B2", "a", TRIGGER)
    twins.want("B2", "b", TRIGGER)
    assert twins.unwant("B2", "a") == []  # the group goes on under "a", for "b"
    # "a" again, for another filter: the neighbour knows "a" as the trigger group, so that group
    # takes b's id first (sent before the old one is retracted: no gap in between)
    assert twins.want("B2", "a", OTHER) == [
        ("send", "b", TRIGGER),
        ("retract", "a", TRIGGER),
        ("send", "a", OTHER),
    ]
    assert twins.unwant("B2", "b") == [("retract", "b", TRIGGER)]
    assert twins.unwant("B2", "a") == [("retract", "a", OTHER)]


def test_a_link_forgotten_forgets_its_groups() -> None:
    twins = Twins()
    for entry in itertools.islice(itertools.count(), 3):
        twins.want("B2", str(entry), TRIGGER)
    twins.forget("B2")
    assert twins.held_count() == 0 and not twins.wants("B2", "1")
    assert twins.want("B2", "1", TRIGGER) == [("send", "1", TRIGGER)]


def test_stand_ins_travel_as_one_apart_from_equal_lasting_subscriptions() -> None:
    """A stand-in travels as its advertisement's class alone, as class-only subscriptions do: in
    one group with them it could leave its id on the wire for them, and the neighbour would list
    a stand-in long after every one ended. So stand-ins group with stand-ins only."""
    everything = parse_filter("[class,eq,Trigger]")
    twins = Twins()
    assert twins.want("B2", "B1~stand-in~B3~a", everything, apart=True) == [
        ("send", "B1~stand-in~B3~a", everything)
    ]
    assert twins.want("B2", "B1~stand-in~B3~b", everything, apart=True) == []
    assert twins.want("B2", "real", everything) == [("send", "real", everything)]
    assert twins.unwant("B2", "B1~stand-in~B3~a") == []
    assert twins.unwant("B2", "B1~stand-in~B3~b") == [("retract", "B1~stand-in~B3~a", everything)]
    assert twins.wants("B2", "real") and twins.unwant("B2", "real") == [("retract", "real", everything)]
